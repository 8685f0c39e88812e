"""Elementwise primitives: NumPy's ufuncs, with broadcasting undone in one place.

Each primitive's VJP rules are written as if no broadcasting happened; the
wrapper made by `_elementwise_rules` sums a cotangent back to its operand's shape
and dtype (`unbroadcast`), and broadcasts a tangent up to the output's
(`rebroadcast`). Complex derivatives follow JAX and autograd: the VJP is the
transpose of the JVP, with no conjugation.
"""
import inspect
import math

import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, Tracer, Zero, get_aval

from fgrad.primitives.base import elementwise_abstract, result_dtype
from fgrad.primitives.batching import broadcasting_batch_rule, unary_batch_rule

FAMILY = "primitives/elementwise.py"


# primitive -> the NumPy ufunc it wraps, for the eager fast path of its binder
_NUMPY_UFUNCS = {}


# operands NumPy computes with: the eager fast path of impls and binders
_PLAIN_TYPES = frozenset({np.ndarray, float, int, np.float64, np.float32,
                          np.complex128, np.complex64, np.int64, np.bool_, bool})


def _ufunc_primitive(name, nondiff=False, np_name=None):
    np_fn = getattr(np, np_name or name)
    xp_name = np_name or name

    def impl(*args):
        xp = array_module(*args)
        return (np_fn if xp is np else getattr(xp, xp_name))(*args)
    # NumPy operands skip the backend lookup (the test `_binder` makes outside
    # transformations, made here for traced values: impl runs once per operation)
    nin = getattr(np_fn, "nin", None)
    if nin == 1:
        on_any_backend = impl

        def impl(x):
            if x.__class__ is np.ndarray:
                return np_fn(x)
            return on_any_backend(x)
    elif nin == 2:
        on_any_backend, plain = impl, _PLAIN_TYPES

        def impl(x, y):
            if x.__class__ in plain and y.__class__ in plain:
                return np_fn(x, y)
            return on_any_backend(x, y)
    prim = Primitive(name, impl, elementwise_abstract(np_fn), nondiff=nondiff,
                     family=FAMILY)
    prim.batch = broadcasting_batch_rule(prim)
    # jit's compiler calls the backend's ufunc directly (with out= for buffer reuse)
    prim.ufunc_name = xp_name if isinstance(np_fn, np.ufunc) else None
    _NUMPY_UFUNCS[prim] = np_fn
    return prim


def _shape_dtype(x):
    try:
        return x.shape, x.dtype
    except AttributeError:                 # a Python scalar
        aval = get_aval(x)
        return aval.shape, aval.dtype


def unbroadcast(ct, like):
    """Sum ``ct`` over the axes broadcasting added, and cast it to ``like``'s dtype.

    The cotangent of an operand must have the operand's shape and dtype: a
    ``(3,)`` operand added to a ``(2, 3)`` one receives the sum of the ``(2, 3)``
    cotangent over its first axis; a float32 operand in a float64 product
    receives a float32 cotangent; a real operand receives the real part.
    """
    shape, dtype = _shape_dtype(like)
    ct_shape, ct_dtype = _shape_dtype(ct)
    if ct_shape == shape and ct_dtype == dtype:
        return ct
    if ct_shape != shape:
        lead = len(ct_shape) - len(shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, d in enumerate(shape) if d == 1 and ct_shape[lead + i] != 1)
        if axes:
            ct = sum_(ct, axis=axes)
        if _shape_dtype(ct)[0] != shape:
            ct = reshape(ct, shape)
    return _cast(ct, dtype)


def rebroadcast(t, ans):
    """Broadcast a tangent contribution ``t`` to the output's shape and dtype."""
    shape, dtype = _shape_dtype(ans)
    t_shape, t_dtype = _shape_dtype(t)
    if t_shape == shape and t_dtype == dtype:
        return t
    if t_shape != shape:
        t = broadcast_to(t, shape)
    return _cast(t, dtype)


def cast_like(x, aval):
    """``x`` in ``aval``'s dtype; the real part when ``aval`` is real."""
    return _cast(x, aval.dtype)


def _cast(x, dtype):
    x_dtype = _shape_dtype(x)[1]
    if x_dtype == dtype:
        return x
    if x_dtype.kind == "c" and dtype.kind != "c":
        x = real(x)
    return convert_element_type(x, dtype)


def _elementwise_rules(prim, vjps, jvps=None, reads=None):
    """Register per-argument rules wrapped with unbroadcast / rebroadcast.

    Each rule is linear in its first argument, so when ``jvps`` is omitted the
    VJP rules serve as the JVP rules too (``ct * y`` read as ``t * y``), as in
    `_unary`; give ``jvps`` only where the two differ.
    """
    if jvps is None:
        jvps = vjps
    def wrap_vjp(i, rule):
        if rule is None:
            return None
        return lambda ct, ans, *args: unbroadcast(rule(ct, ans, *args), args[i])
    prim.def_vjp(*[wrap_vjp(i, r) for i, r in enumerate(vjps)], reads=reads)

    def wrap_jvp(rule):
        if rule is None:
            return None
        return lambda t, ans, *args: rebroadcast(rule(t, ans, *args), ans)
    prim.def_jvp(*[wrap_jvp(r) for r in jvps])


def _unary(name, vjp, reads, jvp=None):
    """A unary ufunc; ``vjp(ct, ans, x)`` also serves as the JVP (it is linear in
    ``ct``); ``reads`` is ``{0}`` (x), ``{"ans"}`` or ``set()``."""
    prim = _ufunc_primitive(name)
    # no cast: a floating-point unary op keeps its operand's dtype
    prim.def_vjp(vjp, reads=[reads])
    prim.def_jvp(jvp or (lambda t, ans, x: vjp(t, ans, x)))
    return prim


# ---------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------

add_p = _ufunc_primitive("add")
_elementwise_rules(add_p,
                   [lambda ct, ans, x, y: ct,
                    lambda ct, ans, x, y: ct],
                   reads=set())

subtract_p = _ufunc_primitive("subtract")
_elementwise_rules(subtract_p,
                   [lambda ct, ans, x, y: ct,
                    lambda ct, ans, x, y: -ct],
                   reads=set())

multiply_p = _ufunc_primitive("multiply")
_elementwise_rules(multiply_p,
                   [lambda ct, ans, x, y: ct * y,
                    lambda ct, ans, x, y: ct * x],
                   reads=[{1}, {0}])

divide_p = _ufunc_primitive("divide")
_elementwise_rules(divide_p,
                   [lambda ct, ans, x, y: ct / y,
                    lambda ct, ans, x, y: -ct * ans / y],
                   reads=[{1}, {1, "ans"}])


def _safe_log(x):
    # log(x) where x != 0 and 0 elsewhere: d(x**y)/dy = x**y * log(x) is 0 at
    # x == 0 (for y > 0), and the inner where keeps log(0) = -inf out of it.
    nonzero = not_equal(x, 0)
    return where(nonzero, log(where(nonzero, x, 1)), 0)


def _power_dx(x, y):
    # y * x ** (y - 1), but 0 at x == y == 0 (0 * inf there): x ** 0 is the
    # constant 1, as JAX's integer-exponent rule and autograd have it. The
    # exponent is what is switched, to 1, so that no inf remains for a second
    # derivative to multiply by zero; everywhere else it is exactly y - 1, and
    # the mixed derivative keeps its 1 / x at y == 0. The switched exponent
    # is cast to the power's dtype, as JAX's rule casts it: NumPy's promotion
    # takes a Python number as x's dtype (float32 x ** 3 is float32) but not
    # an array of one (float32 x ** an int64 array is float64): uncast,
    # float32 x ** 3 had float64 derivatives. An array ``y`` is cast too; a
    # Python number stays one (it goes with any backend, a NumPy scalar not).
    dtype = result_dtype(np.power, [get_aval(x), get_aval(y)])
    both_zero = where(equal(x, 0), equal(y, 0), False)
    if isinstance(y, (bool, int, float, complex)):
        return y * power(x, where(both_zero, dtype.type(1), dtype.type(y - 1)))
    y = _cast(y, dtype)
    return y * power(x, where(both_zero, 1, y - 1))


power_p = _ufunc_primitive("power")
_elementwise_rules(power_p,
                   [lambda ct, ans, x, y: ct * _power_dx(x, y),
                    lambda ct, ans, x, y: ct * ans * _safe_log(x)],
                   reads=[{0, 1}, {0, "ans"}])

maximum_p = _ufunc_primitive("maximum")
minimum_p = _ufunc_primitive("minimum")


def _select_ties(ct, wins, ties):
    # ties split the derivative evenly between the two operands
    return where(wins, ct, where(ties, ct * 0.5, 0))


_elementwise_rules(maximum_p,
                   [lambda ct, ans, x, y: _select_ties(ct, greater(x, y), equal(x, y)),
                    lambda ct, ans, x, y: _select_ties(ct, less(x, y), equal(x, y))],
                   reads={0, 1})
_elementwise_rules(minimum_p,
                   [lambda ct, ans, x, y: _select_ties(ct, less(x, y), equal(x, y)),
                    lambda ct, ans, x, y: _select_ties(ct, greater(x, y), equal(x, y))],
                   reads={0, 1})

# ---------------------------------------------------------------------------
# Unary functions: rule(ct, ans, x) -> ct * f'(x)
# ---------------------------------------------------------------------------

negative_p = _unary("negative", lambda ct, ans, x: -ct, set())
square_p = _unary("square", lambda ct, ans, x: ct * 2 * x, {0})
sqrt_p = _unary("sqrt", lambda ct, ans, x: ct * 0.5 / ans, {"ans"})
exp_p = _unary("exp", lambda ct, ans, x: ct * ans, {"ans"})
log_p = _unary("log", lambda ct, ans, x: ct / x, {0})
log1p_p = _unary("log1p", lambda ct, ans, x: ct / (1 + x), {0})
expm1_p = _unary("expm1", lambda ct, ans, x: ct * (ans + 1), {"ans"})
sin_p = _unary("sin", lambda ct, ans, x: ct * cos(x), {0})
cos_p = _unary("cos", lambda ct, ans, x: -ct * sin(x), {0})
tan_p = _unary("tan", lambda ct, ans, x: ct * (1 + ans * ans), {"ans"})
tanh_p = _unary("tanh", lambda ct, ans, x: ct * (1 - ans * ans), {"ans"})
sinh_p = _unary("sinh", lambda ct, ans, x: ct * cosh(x), {0})
cosh_p = _unary("cosh", lambda ct, ans, x: ct * sinh(x), {0})
arctan_p = _unary("arctan", lambda ct, ans, x: ct / (1 + x * x), {0})


def _abs_vjp(ct, ans, x):
    # real: sign(x), which is 0 at the kink. Complex: the transpose of the
    # R-linear JVP t -> re(conj(x) t) / |x| under the pairing re(a b) is
    # ct * conj(x) / |x| (JAX's convention), taken as 0 at x == 0.
    if get_aval(x).dtype.kind != "c":
        return ct * sign(x)
    return ct * _conj_unit(x, ans)


def _abs_jvp(t, ans, x):
    if get_aval(x).dtype.kind != "c":
        return rebroadcast(t * sign(x), ans)
    return rebroadcast(real(_conj_unit(x, ans) * t), ans)


def _conj_unit(x, ans):
    # conj(x) / |x| with the double where, so x == 0 gives 0 and no nan
    nonzero = not_equal(ans, 0)
    return where(nonzero, conj(x) / where(nonzero, ans, 1), 0)


abs_p = _ufunc_primitive("absolute")
abs_p.def_vjp(_abs_vjp, reads=[{0, "ans"}])
abs_p.def_jvp(_abs_jvp)

# ---------------------------------------------------------------------------
# Without derivative: comparisons and sign
# ---------------------------------------------------------------------------

sign_p = _ufunc_primitive("sign", nondiff=True)
equal_p = _ufunc_primitive("equal", nondiff=True)
not_equal_p = _ufunc_primitive("not_equal", nondiff=True)
less_p = _ufunc_primitive("less", nondiff=True)
less_equal_p = _ufunc_primitive("less_equal", nondiff=True)
greater_p = _ufunc_primitive("greater", nondiff=True)
greater_equal_p = _ufunc_primitive("greater_equal", nondiff=True)

# ---------------------------------------------------------------------------
# where, dtype conversion, real part
# ---------------------------------------------------------------------------


def _where_impl(c, x, y):
    return array_module(c, x, y).where(c, x, y)


where_p = Primitive("where", _where_impl, elementwise_abstract(np.where),
                    family=FAMILY)
where_p.batch = broadcasting_batch_rule(where_p)
# its VJP zeroes the cotangent of the branch not selected: debug_nans traces a
# NaN cotangent back to such a where (the "where trap") by this flag
where_p.masks_cotangent = True
_elementwise_rules(where_p,
                   [None,
                    lambda ct, ans, c, x, y: where(c, ct, 0),
                    lambda ct, ans, c, x, y: where(c, 0, ct)],
                   reads={0})


def _convert_impl(x, dtype):
    return array_module(x).asarray(x).astype(dtype)


def _convert_abstract(x, dtype):
    return ShapedArray(x.shape, dtype)


convert_element_type_p = Primitive("convert_element_type", _convert_impl,
                                   _convert_abstract, family=FAMILY)
convert_element_type_p.def_vjp(
    lambda ct, ans, x, dtype: cast_like(ct, get_aval(x))
    if get_aval(x).dtype.kind in "fc" else None, reads=[set()])
convert_element_type_p.def_jvp(lambda t, ans, x, dtype: convert_element_type(t, dtype))
convert_element_type_p.batch = unary_batch_rule(convert_element_type_p)

real_p = _ufunc_primitive("real")
real_p.makes_view = True              # x.real is a view of a complex x in NumPy
real_p.def_vjp(lambda ct, ans, x: cast_like(ct, get_aval(x)), reads=[set()])
real_p.def_jvp(lambda t, ans, x: real(t))

conj_p = _ufunc_primitive("conjugate")
conj_p.def_vjp(lambda ct, ans, x: conj(ct), reads=[set()])
conj_p.def_jvp(lambda t, ans, x: conj(t))


# ---------------------------------------------------------------------------
# Binding functions, used by rules everywhere and wrapped by fgrad.numpy
# ---------------------------------------------------------------------------

# Types NumPy computes on directly; a tracer or a foreign backend's array is never
# one of them, so for these the binder may skip bind (and array_module) entirely.


def _binder(prim):
    bind = prim.bind
    np_fn = _NUMPY_UFUNCS.get(prim)
    nin = getattr(np_fn, "nin", None)            # np.real is a function, not a ufunc
    plain = _PLAIN_TYPES
    ndarray = np.ndarray
    sequences = (list, tuple)
    if nin == 1:
        def fn(x):
            if x.__class__ is ndarray:
                return np_fn(x)
            if x.__class__ in sequences:        # [a, b] holding tracers
                x = array_likes.lift(x)
            return bind(x)
    elif nin == 2:
        def fn(x, y):
            if x.__class__ in plain and y.__class__ in plain:
                return np_fn(x, y)
            if x.__class__ in sequences or y.__class__ in sequences:
                x, y = array_likes.lift(x), array_likes.lift(y)
            return bind(x, y)
    else:
        def fn(*args):
            return bind(*(array_likes.lift(a) for a in args))
    # fgrad.numpy does not wrap it again for array-likes
    fn.lifts_array_likes = True
    fn.__name__ = prim.name
    fn.__doc__ = f"NumPy's ``{prim.name}``, binding the ``{prim.name}`` primitive."
    return fn


add, subtract, multiply, divide, _power = map(
    _binder, (add_p, subtract_p, multiply_p, divide_p, power_p))


def power(x, y):
    """NumPy's ``power``. A traced ``x ** 2`` binds ``square``, whose rules need
    no ``x ** 1`` pass (NumPy likewise computes ``x ** 2`` as a square)."""
    if (type(y) is int or type(y) is float) and y == 2 and isinstance(x, Tracer):
        return square_p.bind(x)
    return _power(x, y)
maximum, minimum, negative, square, sqrt = map(
    _binder, (maximum_p, minimum_p, negative_p, square_p, sqrt_p))
exp, log, log1p, expm1 = map(_binder, (exp_p, log_p, log1p_p, expm1_p))
sin, cos, tan, tanh, sinh, cosh, arctan, absolute = map(
    _binder, (sin_p, cos_p, tan_p, tanh_p, sinh_p, cosh_p, arctan_p, abs_p))
sign, equal, not_equal, less, less_equal, greater, greater_equal = map(
    _binder, (sign_p, equal_p, not_equal_p, less_p, less_equal_p, greater_p,
              greater_equal_p))
where, real, conj = map(_binder, (where_p, real_p, conj_p))


def _where_signature(condition, x1, x2, /):
    """The arguments of `where` as introspection shows them (its binder takes
    ``*args``, which ``inspect.signature`` would show instead)."""


where.__signature__ = inspect.signature(_where_signature)


def convert_element_type(x, dtype):
    """``x`` as ``dtype`` (``astype``); a no-op when the dtype already matches."""
    dtype = np.dtype(dtype)
    aval = get_aval(x)
    if aval.dtype == dtype and not aval.weak_type:
        return x
    return convert_element_type_p.bind(x, dtype=dtype)

# ---------------------------------------------------------------------------
# More of NumPy's math ufuncs
# ---------------------------------------------------------------------------

_LN2, _LN10 = math.log(2.0), math.log(10.0)

arcsin_p = _unary("arcsin", lambda ct, ans, x: ct / sqrt(1 - x * x), {0})
arccos_p = _unary("arccos", lambda ct, ans, x: -ct / sqrt(1 - x * x), {0})
arcsinh_p = _unary("arcsinh", lambda ct, ans, x: ct / sqrt(x * x + 1), {0})
# sqrt(x - 1) sqrt(x + 1), not sqrt(x*x - 1): the principal branch for complex x
arccosh_p = _unary("arccosh", lambda ct, ans, x: ct / (sqrt(x - 1) * sqrt(x + 1)), {0})
arctanh_p = _unary("arctanh", lambda ct, ans, x: ct / (1 - x * x), {0})
exp2_p = _unary("exp2", lambda ct, ans, x: ct * ans * _LN2, {"ans"})
log2_p = _unary("log2", lambda ct, ans, x: ct / (x * _LN2), {0})
log10_p = _unary("log10", lambda ct, ans, x: ct / (x * _LN10), {0})
cbrt_p = _unary("cbrt", lambda ct, ans, x: ct / (3 * ans * ans), {"ans"})

logaddexp_p = _ufunc_primitive("logaddexp")
_elementwise_rules(logaddexp_p,
                   [lambda ct, ans, x, y: ct * exp(x - ans),
                    lambda ct, ans, x, y: ct * exp(y - ans)],
                   reads=[{0, "ans"}, {1, "ans"}])
logaddexp2_p = _ufunc_primitive("logaddexp2")
_elementwise_rules(logaddexp2_p,
                   [lambda ct, ans, x, y: ct * exp2(x - ans),
                    lambda ct, ans, x, y: ct * exp2(y - ans)],
                   reads=[{0, "ans"}, {1, "ans"}])
arctan2_p = _ufunc_primitive("arctan2")
_elementwise_rules(arctan2_p,
                   [lambda ct, ans, y, x: ct * x / (x * x + y * y),
                    lambda ct, ans, y, x: -ct * y / (x * x + y * y)],
                   reads={0, 1})
hypot_p = _ufunc_primitive("hypot")
_elementwise_rules(hypot_p,
                   [lambda ct, ans, x, y: ct * x / ans,
                    lambda ct, ans, x, y: ct * y / ans],
                   reads=[{0, "ans"}, {1, "ans"}])
# remainder(x, y) = x - floor(x / y) * y, piecewise linear away from its jumps
remainder_p = _ufunc_primitive("remainder")
_elementwise_rules(remainder_p,
                   [lambda ct, ans, x, y: ct,
                    lambda ct, ans, x, y: -ct * floor(x / y)],
                   reads=[set(), {0, 1}])
fmod_p = _ufunc_primitive("fmod")
_elementwise_rules(fmod_p,
                   [lambda ct, ans, x, y: ct,
                    lambda ct, ans, x, y: -ct * trunc(x / y)],
                   reads=[set(), {0, 1}])

# ldexp(x, n) = x * 2**n with integer n: linear in x, and exact, so the rule
# is ldexp itself (scaling by a power of two never rounds)
ldexp_p = _ufunc_primitive("ldexp")
_elementwise_rules(ldexp_p,
                   [lambda ct, ans, x, n: ldexp(ct, n), None],
                   reads=[{1}, set()])


def _frexp_exponent_impl(x):
    return array_module(x).frexp(x)[1]


# frexp's integer exponent, on its own: the mantissa is then ldexp(x, -exponent)
frexp_exponent_p = Primitive(
    "frexp_exponent", _frexp_exponent_impl,
    lambda x: ShapedArray(x.shape, np.dtype(np.intc)),     # NumPy's, whatever x is
    nondiff=True, family=FAMILY)
frexp_exponent_p.batch = unary_batch_rule(frexp_exponent_p)

# imag(x): the JVP is t -> imag(t) = re(-1j t), so the VJP is ct -> -1j ct.
imag_p = _ufunc_primitive("imag")
imag_p.def_vjp(lambda ct, ans, x: cast_like(ct * -1j, get_aval(x)), reads=[set()])
imag_p.def_jvp(lambda t, ans, x: imag(t))

# angle(z) = arctan2(imag z, real z): JVP t -> imag(t / z), VJP ct -> -1j ct / z.
angle_p = _ufunc_primitive("angle")
angle_p.def_vjp(lambda ct, ans, x: cast_like(ct * -1j / x, get_aval(x)),
               reads=[{0}])
angle_p.def_jvp(lambda t, ans, x: imag(t / x))

# -- without derivative -------------------------------------------------------

_NONDIFF_UFUNCS = (
    "floor", "ceil", "rint", "trunc", "signbit", "isnan", "isinf", "isfinite",
    "logical_and", "logical_or", "logical_xor", "logical_not", "floor_divide",
    # integer-only bit operations (NumPy refuses floating-point operands)
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift",
    # integer number theory
    "gcd", "lcm",
) + (("bitwise_count",) if hasattr(np, "bitwise_count") else ())     # NumPy >= 2.0
for _name in _NONDIFF_UFUNCS:
    globals()[f"{_name}_p"] = _ufunc_primitive(_name, nondiff=True)


def _round_impl(x, decimals):
    return array_module(x).round(x, decimals)


round_p = Primitive("round", _round_impl,
                    lambda x, decimals: ShapedArray(x.shape, x.dtype),
                    nondiff=True, family=FAMILY)
round_p.batch = unary_batch_rule(round_p)


def round_(x, decimals=0):
    """NumPy's ``round``: zero derivative (a step function)."""
    return round_p.bind(x, decimals=int(decimals))


arcsin, arccos, arcsinh, arccosh, arctanh = map(
    _binder, (arcsin_p, arccos_p, arcsinh_p, arccosh_p, arctanh_p))
exp2, log2, log10, cbrt = map(_binder, (exp2_p, log2_p, log10_p, cbrt_p))
logaddexp, logaddexp2, arctan2, hypot, remainder, fmod = map(
    _binder, (logaddexp_p, logaddexp2_p, arctan2_p, hypot_p, remainder_p, fmod_p))
imag, angle, ldexp = map(_binder, (imag_p, angle_p, ldexp_p))
frexp_exponent = _binder(frexp_exponent_p)
for _name in _NONDIFF_UFUNCS:
    globals()[_name] = _binder(globals()[f"{_name}_p"])
del _name


__all__ = ["unbroadcast", "rebroadcast", "cast_like", "Zero"]


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives import array_likes  # noqa: E402
from fgrad.primitives.reductions import sum_  # noqa: E402
from fgrad.primitives.shape import broadcast_to, reshape  # noqa: E402
