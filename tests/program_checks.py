"""Checks shared by the whole-program compiler's tests: a graph run through its
compiled program beside the interpreted tier (the generated NumPy code of the
same optimised graph)."""
import numpy as np

import fgrad
from fgrad.compiler.codegen import generate
from fgrad.compiler.passes import optimize
from fgrad.compiler.program import compile_program
from fgrad.compiler.program_loops import loop_graphs

# what a program computes otherwise than the interpreted tier's NumPy calls,
# to rounding (docs/jit.md): these functions by the C library or the vector
# functions, where NumPy has SIMD loops of its own; a float sum in order,
# where NumPy sums pairwise; products and factorizations by SciPy's BLAS and
# LAPACK, where NumPy may call its own. Everything else (arithmetic, sqrt,
# comparisons, casts, copies, max and min, indexing, draws, and every
# callout, which runs NumPy's code) gives NumPy's bits.
ROUNDING = frozenset({
    "power", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "cbrt", "sin", "cos",
    "tan", "sinh", "cosh", "tanh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh",
    "arctanh", "arctan2", "hypot", "fmod", "angle",
    "matmul", "einsum", "cholesky", "solve_factors", "factored_solve", "lu_factor", "det",
    "slogdet", "solve", "solve_triangular", "inv", "qr", "eigh", "svd"})


def same_operations(graph):
    """Whether a program computes every value of ``graph`` (loop bodies
    included) as the interpreted tier does, bit for bit: none of its
    equations is in `ROUNDING`, nor a float sum."""
    for eqn in graph.eqns:
        if eqn.prim.name in ROUNDING or eqn.prim.name == "sum" and \
                np.dtype(eqn.outvars[0].aval.dtype).kind in "fc":
            return False
        if not all(same_operations(g) for g in loop_graphs(eqn)):
            return False
    return True


def both(fun, *args):
    """``(program, its outputs, the interpreted tier's outputs)`` for ``fun``."""
    graph = optimize(fgrad.make_graph(fun)(*args), np)
    compiled = compile_program(graph)
    return compiled, compiled.call(*args), generate(graph, np).fn(*args)


def agree(got, want, exact=False):
    """Same shapes and dtypes; the same bits where ``exact`` (or not floats:
    NaN where NumPy has NaN, and infinities of its sign), else equal to
    rounding."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        if exact or g.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w)
        else:
            tol = 1e-5 if g.dtype in (np.float32, np.complex64) else 1e-11
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)
