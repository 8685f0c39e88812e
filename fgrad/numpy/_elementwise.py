"""NumPy's elementwise functions beyond the primitives' binders.

Most are primitives bound directly (re-exported by ``fgrad.numpy``); the rest
are composites whose derivatives come from the primitives they call. Functions
with a removable singularity (``sinc``) or a kink at zero use the double-``where``
technique: the unsafe branch is evaluated on a harmless stand-in value, so
neither it nor its derivative produces inf or nan that ``where`` would multiply by
zero (``0 * nan`` is nan).
"""
import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.errors import NumpyArgumentError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.primitives import creation as _creation
from fgrad.primitives import elementwise as _ew

_DEG = float(_np.pi / 180.0)


def _is_complex(x):
    return _get_aval(x).dtype.kind == "c"


def reciprocal(x):
    """``1 / x``.

    >>> reciprocal(_np.array([2.0, 4.0]))
    array([0.5 , 0.25])
    """
    if not isinstance(x, _Tracer):
        return _xp(x).reciprocal(x)
    return _ew.divide(1.0, x)


def positive(x):
    """``+x``: a new array (of a tracer, a new tracer of its value)."""
    return x.clone() if isinstance(x, _Tracer) else _xp(x).positive(x)


def deg2rad(x):
    """Degrees to radians; ``radians`` is the same function.

    >>> float(deg2rad(180.0))
    3.141592653589793
    """
    if not isinstance(x, _Tracer):
        return _xp(x).deg2rad(x)
    return _ew.multiply(x, _DEG)


def rad2deg(x):
    """Radians to degrees; ``degrees`` is the same function."""
    if not isinstance(x, _Tracer):
        return _xp(x).rad2deg(x)
    return _ew.multiply(x, 1.0 / _DEG)


radians, degrees = deg2rad, rad2deg


def fabs(x):
    """Absolute value of real ``x`` (``absolute`` also takes complex)."""
    if _is_complex(x):
        raise TypeError("fabs is not defined for complex inputs (as in NumPy): "
                        "use fgrad.numpy.abs")
    return _ew.absolute(x)


def sinc(x):
    """``sin(pi x) / (pi x)``, and 1 at 0, with every derivative finite there.

    Near zero a Taylor polynomial replaces the quotient (double ``where``), so
    the derivative at 0 is 0 and the second derivative is ``-pi**2 / 3``.

    >>> import fgrad
    >>> float(fgrad.grad(sinc)(0.0))
    0.0
    """
    if not isinstance(x, _Tracer):
        return _xp(x).sinc(x)
    small = _ew.less(_ew.absolute(x), 1e-3)
    safe = _ew.where(small, 1.0, x)
    px = safe * _np.pi
    quotient = _ew.sin(px) / px
    p2 = _ew.square(x * _np.pi)
    taylor = 1.0 - p2 / 6.0 + p2 * p2 / 120.0
    return _ew.where(small, taylor, quotient)


def clip(a, a_min=None, a_max=None, *, min=None, max=None):
    """``a`` limited to ``[a_min, a_max]``; differentiable in all three.

    The bounds may also be given as NumPy 2's ``min=`` / ``max=`` keywords
    (not both spellings at once); with no bound at all ``a`` is returned
    unchanged, as in NumPy 2. The derivative goes to ``a`` strictly inside the
    interval (and at its ends), and to the bound that is active outside it.

    >>> clip(_np.array([-2.0, 0.5, 3.0]), 0.0, 1.0)
    array([0. , 0.5, 1. ])
    >>> clip(_np.array([-2.0, 0.5, 3.0]), max=1.0)
    array([-2. ,  0.5,  1. ])
    """
    if min is not None or max is not None:
        if a_min is not None or a_max is not None:
            raise NumpyArgumentError(
                "clip: pass the bounds either as a_min/a_max or as the keywords "
                "min/max, not both (min=/max= are NumPy 2's names for a_min/a_max)")
        a_min, a_max = min, max
    if not any(isinstance(v, _Tracer) for v in (a, a_min, a_max)):
        if a_min is None and a_max is None:
            return _xp(a).asarray(a).copy()
        return _xp(a, a_min, a_max).clip(a, a_min, a_max)
    out = a
    if a_min is not None:
        out = _ew.where(_ew.less(out, a_min), a_min, out)
    if a_max is not None:
        out = _ew.where(_ew.greater(out, a_max), a_max, out)
    return out


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``x`` with nan and infinities replaced; derivative 1 at finite entries."""
    if not isinstance(x, _Tracer):
        return _xp(x).nan_to_num(x, copy=copy, nan=nan, posinf=posinf, neginf=neginf)
    if _is_complex(x):
        return _ew.add(nan_to_num(_ew.real(x), nan=nan, posinf=posinf, neginf=neginf),
                       _ew.multiply(nan_to_num(_ew.imag(x), nan=nan, posinf=posinf,
                                               neginf=neginf), 1j))
    info = _np.finfo(_get_aval(x).dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = _ew.where(_ew.isnan(x), nan, x)
    out = _ew.where(_ew.logical_and(_ew.isinf(x), _ew.greater(x, 0)), posinf, out)
    return _ew.where(_ew.logical_and(_ew.isinf(x), _ew.less(x, 0)), neginf, out)


def angle(z, deg=False):
    """The argument of complex ``z``; for real ``z`` a constant (0 or pi)."""
    if not isinstance(z, _Tracer):
        return _xp(z).angle(z, deg=deg)
    if _is_complex(z):
        out = _ew.angle(z)
    else:
        out = _ew.angle(_creation.stop_gradient(z))
    return _ew.multiply(out, 1.0 / _DEG) if deg else out


def round(a, decimals=0):
    """Round to ``decimals`` places: a step function, so zero derivative."""
    return _ew.round_(a, decimals)


around = round


def fix(x):
    """Round toward zero (``trunc``); zero derivative."""
    return _ew.trunc(x)


def float_power(x, y):
    """``x ** y`` computed in float64 (or complex128)."""
    def up(v):
        kind = _get_aval(v).dtype.kind
        return _ew.convert_element_type(v, _np.complex128 if kind == "c"
                                        else _np.float64)
    return _ew.power(up(x), up(y))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """NumPy's ``isclose`` on the values (a boolean, no derivative)."""
    a, b = _concrete(a), _concrete(b)
    return _xp(a, b).isclose(a, b, rtol=rtol, atol=atol,
                       equal_nan=equal_nan)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """NumPy's ``allclose`` on the values."""
    a, b = _concrete(a), _concrete(b)
    return bool(_xp(a, b).allclose(a, b, rtol=rtol, atol=atol,
                             equal_nan=equal_nan))


def array_equal(a1, a2, equal_nan=False):
    """NumPy's ``array_equal`` on the values."""
    a1, a2 = _concrete(a1), _concrete(a2)
    return bool(_xp(a1, a2).array_equal(a1, a2, equal_nan=equal_nan))


def _concrete(x):
    """The value behind an eager tracer, for functions with no derivative."""
    while isinstance(x, _Tracer):
        x = x.concrete()
    return x


# -- numerically careful helpers (also used by fgrad.scipy and linalg) ----------

def xlogy(x, y):
    """``x * log(y)``, and 0 at ``x == y == 0`` with finite derivatives there.

    >>> import fgrad
    >>> float(fgrad.grad(xlogy, argnums=1)(0.0, 0.0))
    0.0
    """
    # Only x == y == 0 is unsafe; y is replaced by 1 there, so the value and the
    # derivative in y are 0 and log(0) never appears. Elsewhere x * log(y) is
    # left alone, so d/dx = log(y) also at x == 0.
    unsafe = _ew.logical_and(_ew.equal(x, 0), _ew.equal(y, 0))
    return x * _ew.log(_ew.where(unsafe, 1.0, y))


def safe_sqrt(x):
    """``sqrt(x)`` for ``x >= 0`` whose derivative at 0 is 0 instead of inf.

    The double ``where``: ``sqrt`` only ever sees positive stand-ins, so the
    branch that ``where`` discards contributes ``0``, not ``0 * inf = nan``.

    >>> import fgrad
    >>> float(fgrad.grad(safe_sqrt)(0.0))
    0.0
    """
    positive_ = _ew.greater(x, 0)
    return _ew.where(positive_, _ew.sqrt(_ew.where(positive_, x, 1.0)), 0.0)
