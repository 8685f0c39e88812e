"""NumPy's remaining elementwise functions: floating-point bit fiddling
(``copysign``, ``ldexp``, ``frexp``, ``modf``), ``heaviside``, ``divmod`` and
the integer bit operations.

Each is a composite of primitives chosen so that its derivative comes out
right without a rule of its own: ``copysign`` is ``x1`` or ``-x1`` picked by
the sign bits, so its derivative in ``x1`` is +1 or -1 and in ``x2`` zero;
``frexp``'s mantissa is ``ldexp(x, -exponent)`` with the exponent held
constant, so ``d mantissa / dx = 2**-exponent``. Outside every transformation
each calls NumPy directly.
"""
import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.core.trace import plain_array as _plain_array
from fgrad.primitives import elementwise as _ew
from fgrad.primitives.base import result_dtype as _result_dtype


def _traced(*args):
    return any(isinstance(a, _Tracer) for a in args)


def _as_result_dtype(np_fn, out, *args):
    """``out`` in the dtype NumPy's ``np_fn`` gives for ``args``."""
    return _ew.convert_element_type(
        out, _result_dtype(np_fn, [_get_aval(a) for a in args]))


def _float_operand(x):
    """``x`` in the floating dtype NumPy's ``frexp`` and ``modf`` compute in."""
    # NumPy's loops: float16 for 8-bit integers and bool, float32 for 16-bit,
    # float64 for wider integers; floating dtypes stay
    return _ew.convert_element_type(x, _np.result_type(_get_aval(x).dtype, _np.float16))


def heaviside(x1, x2):
    """The step function: 0 where ``x1 < 0``, ``x2`` where ``x1 == 0``, 1 where
    ``x1 > 0``.

    A step has zero derivative in ``x1``; the derivative in ``x2`` is 1 where
    ``x1 == 0`` (the output is ``x2`` there) and 0 elsewhere.

    >>> heaviside(_np.array([-1.0, 0.0, 2.0]), 0.5)
    array([0. , 0.5, 1. ])
    """
    if not _traced(x1, x2):
        # NumPy's function on plain arrays: an np.matrix is read as its ndarray
        x1, x2 = _plain_array(x1), _plain_array(x2)
        return _xp(x1, x2).heaviside(x1, x2)
    step = _ew.where(_ew.less(x1, 0), 0.0, 1.0)
    out = _ew.where(_ew.equal(x1, 0), x2, step)
    out = _ew.where(_ew.isnan(x1), _np.nan, out)
    return _as_result_dtype(_np.heaviside, out, x1, x2)


def copysign(x1, x2):
    """``x1`` with the sign (bit) of ``x2``.

    The derivative in ``x1`` is +1 where the two sign bits agree and -1 where
    they differ; ``x2`` only contributes its sign, so its derivative is 0.

    >>> import fgrad
    >>> float(fgrad.grad(lambda x: copysign(x, -1.0))(2.0))
    -1.0
    """
    if not _traced(x1, x2):
        # NumPy's function on plain arrays: an np.matrix is read as its ndarray
        x1, x2 = _plain_array(x1), _plain_array(x2)
        return _xp(x1, x2).copysign(x1, x2)
    x1 = _as_result_dtype(_np.copysign, x1, x1, x2)
    same = _ew.equal(_ew.signbit(x1), _ew.signbit(x2))
    return _ew.where(same, x1, _ew.negative(x1))


def ldexp(x1, x2):
    """``x1 * 2**x2`` for integer ``x2``, exactly; differentiable in ``x1``.

    >>> ldexp(_np.array([0.75, 3.0]), _np.array([2, -1]))
    array([3. , 1.5])
    """
    return _ew.ldexp(x1, x2)


def frexp(x):
    """``(mantissa, exponent)`` with ``x == mantissa * 2**exponent`` and
    ``0.5 <= |mantissa| < 1`` (both 0 at ``x == 0``).

    The exponent is an integer array without derivative; the mantissa's
    derivative is ``2**-exponent``.

    >>> m, e = frexp(_np.array([8.0, 0.3]))
    >>> m, e
    (array([0.5, 0.6]), array([ 4, -1], dtype=int32))
    """
    if not isinstance(x, _Tracer):
        x = _plain_array(x)
        return _xp(x).frexp(x)
    x = _float_operand(x)
    exponent = _ew.frexp_exponent(x)
    return _ew.ldexp(x, _ew.negative(exponent)), exponent


def modf(x):
    """``(fractional, integral)`` parts of ``x``, both with the sign of ``x``.

    The fractional part has derivative 1, the integral part (``trunc``) 0.
    Where the fractional part is zero its sign may differ from NumPy's
    (``0.0`` for ``-0.0``), which compares equal.

    >>> modf(_np.array([2.5, -1.25]))
    (array([ 0.5 , -0.25]), array([ 2., -1.]))
    """
    if not isinstance(x, _Tracer):
        x = _plain_array(x)
        return _xp(x).modf(x)
    x = _float_operand(x)
    integral = _ew.trunc(x)
    # inf - trunc(inf) is nan; NumPy's fractional part of +-inf is +-0
    finite_part = _ew.where(_ew.isinf(x), 0.0, x)
    fractional = finite_part - _ew.trunc(finite_part)
    return fractional, integral


def divmod(x1, x2):
    """``(floor_divide(x1, x2), remainder(x1, x2))``, as NumPy's ``divmod``.

    The quotient is a step function (zero derivative); the remainder is
    differentiable as `remainder` is.

    >>> divmod(_np.array([7.0, -7.0]), 2.0)
    (array([ 3., -4.]), array([1., 1.]))
    """
    if not _traced(x1, x2):
        # NumPy's function on plain arrays: an np.matrix is read as its ndarray
        x1, x2 = _plain_array(x1), _plain_array(x2)
        return _xp(x1, x2).divmod(x1, x2)
    return _ew.floor_divide(x1, x2), _ew.remainder(x1, x2)


bitwise_and, bitwise_or, bitwise_xor = _ew.bitwise_and, _ew.bitwise_or, _ew.bitwise_xor
invert = bitwise_not = bitwise_invert = _ew.invert
left_shift, right_shift = _ew.left_shift, _ew.right_shift
bitwise_left_shift, bitwise_right_shift = left_shift, right_shift
gcd, lcm = _ew.gcd, _ew.lcm
