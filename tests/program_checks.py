"""Checks shared by the whole-program compiler's tests: a graph run through its
compiled program beside the interpreted tier (the generated NumPy code of the
same optimised graph)."""
import numpy as np

import fgrad
from fgrad.compiler.codegen import generate
from fgrad.compiler.passes import optimize
from fgrad.compiler.program import compile_program


def both(fun, *args):
    """``(program, its outputs, the interpreted tier's outputs)`` for ``fun``."""
    graph = optimize(fgrad.make_graph(fun)(*args), np)
    compiled = compile_program(graph)
    return compiled, compiled.call(*args), generate(graph, np).fn(*args)


def agree(got, want, exact=False):
    """Same shapes and dtypes; the same bits where ``exact`` (or not floats),
    else equal to rounding."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        if exact or g.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w)
        else:
            tol = 1e-5 if g.dtype in (np.float32, np.complex64) else 1e-11
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)
