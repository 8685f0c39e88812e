"""``scipy.linalg`` with derivatives: solve_triangular, cho_factor/cho_solve,
lu_factor/lu_solve, solve_banded, solve_sylvester, expm, logm and sqrtm (2-D
matrices, as SciPy's).

``expm``, ``logm`` and ``sqrtm`` differentiate through their Frechet
derivatives (a block matrix twice the size), ``lu_factor`` through the
derivative of the factors with the pivots held; everything composes to any
order.
"""
import numpy as _np

import fgrad.numpy as _fnp
from fgrad.core.errors import ScipyArgumentError as _ScipyArgumentError
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import linalg as _la
from fgrad.primitives import einsum as _einsum
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import scipy_linalg as _sl
from fgrad.primitives import shape as _shape
from fgrad.primitives import special as _sp

solve_sylvester = _sp.solve_sylvester


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False,
                     overwrite_b=False, check_finite=True):
    """Solve ``op(a) x = b`` where only one triangle of ``a`` is read (without
    its diagonal, taken as ones, when ``unit_diagonal``).

    >>> import numpy as np
    >>> solve_triangular(np.array([[2.0, 0.0], [1.0, 1.0]]), np.array([2.0, 3.0]),
    ...                  lower=True)
    array([1., 2.])
    """
    if unit_diagonal:
        # ones in place of the diagonal: it is not read, and gets no derivative
        n = _get_aval(a).shape[-1]
        a = _ew.where(_einsum.identity_like(a, n, _np.bool_), _fnp.ones_like(a), a)
    trans = {"N": 0, "T": 1, "C": 1}.get(trans, trans)
    vector = _get_aval(b).ndim == 1
    b2 = _shape.reshape(b, (-1, 1)) if vector else b
    x = _sp.solve_triangular(a, b2, lower, trans)
    return _shape.reshape(x, (-1,)) if vector else x


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)``: the Cholesky factor (triangle ``lower``) for `cho_solve`."""
    low = _la.cholesky(a)
    return (low if lower else _shape.swap_last_axes(low)), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` given ``cho_factor(a)``.

    >>> import numpy as np
    >>> cho_solve(cho_factor(np.diag([4.0, 1.0])), np.array([4.0, 1.0]))
    array([1., 1.])
    """
    c, lower = c_and_lower
    if lower:
        y = solve_triangular(c, b, lower=True)
        return solve_triangular(c, y, trans=1, lower=True)
    y = solve_triangular(c, b, trans=1, lower=False)
    return solve_triangular(c, y, lower=False)


def sqrtm(a, disp=True, blocksize=64):
    """Principal matrix square root (derivative by a Sylvester equation)."""
    return _sp.sqrtm(a)


def expm(A):
    """The matrix exponential.

    >>> import numpy as np
    >>> expm(np.zeros((2, 2)))
    array([[1., 0.],
           [0., 1.]])
    """
    return _sl.expm(A)


def logm(A, disp=True):
    """The principal matrix logarithm (a real matrix must have a real one)."""
    return _sl.logm(A)


def lu_factor(a, overwrite_a=False, check_finite=True):
    """``(lu, piv)``: ``P a = L U`` packed into ``lu``, as SciPy's; differentiable
    in ``a`` (the pivots held), under vmap and jit too.

    >>> import numpy as np
    >>> lu, piv = lu_factor(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> lu_solve((lu, piv), np.array([5.0, 6.0]))
    array([-4. ,  4.5])
    """
    piv = _sl.lu_pivots(a)
    return _sl.lu_factor(a, _sl.pivot_permutation(piv)), piv


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` (``trans=1``: ``a^T x = b``) given ``lu_factor(a)``;
    differentiable in ``lu`` and ``b``."""
    lu, piv = lu_and_piv
    perm = _sl.pivot_permutation(piv)
    trans = {"N": 0, "T": 1, "C": 1}.get(trans, trans)
    low, up = _sl.lu_unpack(lu)
    if trans == 0:                                   # x = U^-1 L^-1 P b
        y = solve_triangular(low, _fnp.take(b, perm, axis=0), lower=True)
        return solve_triangular(up, y)
    # a^T = U^T L^T P, so x = P^T L^-T U^-T b
    y = solve_triangular(up, b, trans=1)
    return _fnp.take(solve_triangular(low, y, trans=1, lower=True), _fnp.argsort(perm), axis=0)



def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` for a banded ``a`` given in SciPy's band storage
    (``ab[u + i - j, j] = a[i, j]``); differentiable in ``ab`` and ``b``.

    The band is expanded to a dense matrix (a gather, so the derivative in
    ``ab`` is its scatter) and solved densely: O(n^3), for the small and
    medium systems of models, not SciPy's O(n (l + u)) banded LU.

    >>> import numpy as np
    >>> ab = np.array([[0.0, 1.0, 1.0], [2.0, 2.0, 2.0], [1.0, 1.0, 0.0]])
    >>> solve_banded((1, 1), ab, np.array([3.0, 4.0, 3.0]))
    array([1., 1., 1.])
    """
    lower, upper = (int(v) for v in l_and_u)
    rows, n = _get_aval(ab).shape
    if rows != lower + upper + 1:
        raise _ScipyArgumentError(
            f"solve_banded: ab has {rows} rows, but (l, u) = ({lower}, {upper}) needs "
            f"l + u + 1 = {lower + upper + 1}")
    i, j = _np.indices((n, n))
    band = (j - i <= upper) & (i - j <= lower)
    # the mask goes where ab is (a device array's mask on the device)
    dense = _fnp.where(_fnp.asarray(band, like=ab), ab[_np.where(band, upper + i - j, 0), j],
                       0.0)
    return _la.solve(dense, b)
