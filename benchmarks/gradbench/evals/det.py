"""GradBench's ``det`` eval: a determinant by expansion by minors, and its gradient.

Expanding along the top row of the rows ``r..ell-1`` needs the determinants of
those rows on every subset of columns of size ``ell - r``.  Each such minor is
computed once, level by level from the bottom row up, as one gather-multiply-sum
over all subsets of a size; the recursion of the C++ reference recomputes equal
minors (ell! products where this takes ell * 2**(ell-1)), so this eval's ratio
to ``manual`` measures the algorithm as much as the differentiation.
"""

import functools
import itertools

import numpy as np

import fgrad
import fgrad.numpy as fnp

from benchmarks.gradbench.tool import timed


@functools.lru_cache(maxsize=None)
def expansion_tables(ell):
    """Per level k = 1..ell: for each k-subset of columns (in combinations order),
    its columns, the index of each one-smaller subset in level k-1, and the signs."""
    tables = []
    previous = {(): 0}
    for k in range(1, ell + 1):
        subsets = list(itertools.combinations(range(ell), k))
        columns = np.array(subsets, dtype=np.intp)
        minors = np.array([[previous[s[:i] + s[i + 1:]] for i in range(k)] for s in subsets],
                          dtype=np.intp)
        signs = (-1.0) ** np.arange(k)
        tables.append((columns, minors, signs))
        previous = {s: i for i, s in enumerate(subsets)}
    return tables


def det_by_minors(a):
    ell = a.shape[0]
    minors = fnp.ones(1)
    for k, (columns, below, signs) in enumerate(expansion_tables(ell), start=1):
        row = a[ell - k]
        minors = fnp.sum(signs * row[columns] * minors[below], axis=1)
    return minors[0]


def _prepare(raw):
    ell = raw["ell"]
    return np.asarray(raw["A"], dtype=np.float64).reshape(ell, ell)


_primal = fgrad.jit(det_by_minors)
_gradient = fgrad.jit(fgrad.grad(det_by_minors))

primal = timed(prepare=_prepare, output=float)(_primal)
gradient = timed(prepare=_prepare, output=lambda g: g.ravel().tolist())(_gradient)
