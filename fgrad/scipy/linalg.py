"""``scipy.linalg`` solvers with derivatives: solve_triangular, cho_solve,
cho_factor, solve_sylvester and sqrtm (2-D matrices, as scipy's)."""
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import linalg as _la
from fgrad.primitives import shape as _shape
from fgrad.primitives import special as _sp

solve_sylvester = _sp.solve_sylvester


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False,
                     overwrite_b=False, check_finite=True):
    """Solve ``op(a) x = b`` where only one triangle of ``a`` is read.

    >>> import numpy as np
    >>> solve_triangular(np.array([[2.0, 0.0], [1.0, 1.0]]), np.array([2.0, 3.0]),
    ...                  lower=True)
    array([1., 2.])
    """
    if unit_diagonal:
        raise NotImplementedError("fgrad.scipy.linalg.solve_triangular does not "
                                  "support unit_diagonal=True")
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
