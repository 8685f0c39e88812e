"""Special functions and the scipy.linalg solvers behind `fgrad.scipy`.

The implementations call ``scipy.special`` / ``scipy.linalg`` on NumPy arrays
and ``cupyx.scipy`` on CuPy arrays; scipy is imported on first use, so fgrad
itself does not require it (it is the optional extra ``fgrad[scipy]``).
Derivatives are written with fgrad primitives (``gammaln``'s is ``digamma``,
``digamma``'s is ``polygamma(1, .)``, ...), so every order works.
"""
import math

import numpy as np

from fgrad.core.backend import array_module, scipy_module as backend_scipy_module
from fgrad.core.errors import DeviceError
from fgrad.core.trace import Primitive, ShapedArray, Zero, get_aval

from fgrad.primitives.batching import axis_size, move_axis, unary_batch_rule
from fgrad.primitives.elementwise import cast_like, exp, unbroadcast
from fgrad.primitives.products import matmul
from fgrad.primitives.shape import transpose

FAMILY = "primitives/special.py"

_SQRT_PI = math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2 * math.pi)


def scipy_module(name, *arrays):
    """``scipy.<name>`` for NumPy arrays, ``cupyx.scipy.<name>`` for CuPy ones."""
    return backend_scipy_module(array_module(*arrays), name)


def scipy_function(module, name, *arrays):
    """``scipy.<module>.<name>`` for ``arrays``' backend, or a `DeviceError`
    naming it where that backend's SciPy (``cupyx.scipy``) lacks it."""
    namespace = scipy_module(module, *arrays)
    fn = getattr(namespace, name, None)
    if fn is None:
        raise DeviceError(
            f"scipy.{module}.{name} has no counterpart in {namespace.__name__} (it "
            f"lacks {name}), so it cannot run on these device arrays: move them to "
            "the host with fgrad.device_put(x, 'cpu') for this function.")
    return fn


def _float_abstract(x, **params):
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    return ShapedArray(x.shape, dtype)


def _special_unary(name, derivative):
    """A unary scipy.special function whose derivative is ``derivative(ans, x)``."""
    def impl(x, **params):
        fn = scipy_function("special", name, x)
        if params:
            xp = array_module(x)
            # cupyx.scipy.special.polygamma broadcasts its order as an array
            # (a Python int there fails inside CuPy): hand device backends one
            orders = params.values() if xp is np else [xp.asarray(v) for v in params.values()]
            out = fn(*orders, x)
        else:
            out = fn(x)
        dtype = _float_abstract(get_aval(x)).dtype
        return out if out.dtype == dtype else out.astype(dtype)
    prim = Primitive(name, impl, _float_abstract, family=FAMILY)
    prim.def_vjp(lambda ct, ans, x, **p: cast_like(ct * derivative(ans, x, **p),
                                                   get_aval(x)))
    prim.def_jvp(lambda t, ans, x, **p: t * derivative(ans, x, **p))
    prim.batch = unary_batch_rule(prim)
    return prim


erf_p = _special_unary("erf", lambda ans, x: (2 / _SQRT_PI) * exp(-(x * x)))
erfc_p = _special_unary("erfc", lambda ans, x: (-2 / _SQRT_PI) * exp(-(x * x)))
erfinv_p = _special_unary("erfinv", lambda ans, x: (_SQRT_PI / 2) * exp(ans * ans))
gammaln_p = _special_unary("gammaln", lambda ans, x: digamma(x))
digamma_p = _special_unary("digamma", lambda ans, x: polygamma(1, x))
polygamma_p = _special_unary("polygamma", lambda ans, x, n: polygamma(n + 1, x))
expit_p = _special_unary("expit", lambda ans, x: ans * (1 - ans))
# d log Phi(x) = phi(x) / Phi(x) = exp(-x^2/2 - log Phi(x)) / sqrt(2 pi): stable
# deep in the left tail, where Phi underflows
log_ndtr_p = _special_unary(
    "log_ndtr", lambda ans, x: exp(-0.5 * (x * x) - ans) / _SQRT_2PI)


def _bind(x, prim, **params):
    # A Python number stays a Python number (weak-typed), so that
    # ``betaln(float32_array, 1.7)`` remains float32 as NumPy 2's rules say.
    if type(x) in (int, float):
        return float(prim.impl(x, **params))
    return prim.bind(x, **params)


def erf(x):
    return _bind(x, erf_p)


def erfc(x):
    return _bind(x, erfc_p)


def erfinv(x):
    return _bind(x, erfinv_p)


def gammaln(x):
    return _bind(x, gammaln_p)


def digamma(x):
    return _bind(x, digamma_p)


def polygamma(n, x):
    n = int(n)
    return digamma(x) if n == 0 else _bind(x, polygamma_p, n=n)


def expit(x):
    return _bind(x, expit_p)


def log_ndtr(x):
    return _bind(x, log_ndtr_p)


# ---------------------------------------------------------------------------
# scipy.linalg: triangular solve, Sylvester equation, matrix square root
# ---------------------------------------------------------------------------

def _tri_mask(x, lower):
    n = get_aval(x).shape[-1]
    dtype = get_aval(x).dtype
    dtype = np.finfo(dtype).dtype if dtype.kind == "c" else dtype
    if lower:
        return tri_like_p.bind(x, n=n, m=n, k=0, dtype=dtype)
    return 1 - tri_like_p.bind(x, n=n, m=n, k=-1, dtype=dtype)


def _solve_triangular_abstract(a, b, lower, trans):
    if a.ndim != 2 or a.shape[0] != a.shape[1] or b.ndim != 2 or b.shape[0] != a.shape[0]:
        raise ValueError(f"solve_triangular: expected a (n, n) matrix and a (n, k) "
                         f"right-hand side, got {a.shape} and {b.shape}")
    dtype = np.result_type(a.dtype, b.dtype, np.float32)
    return ShapedArray(b.shape, dtype)


def _solve_triangular_impl(a, b, lower, trans):
    out = scipy_module("linalg", a, b).solve_triangular(a, b, trans=trans, lower=lower)
    return out.astype(_solve_triangular_abstract(get_aval(a), get_aval(b), lower,
                                                 trans).dtype, copy=False)


solve_triangular_p = Primitive("solve_triangular", _solve_triangular_impl,
                               _solve_triangular_abstract, family=FAMILY)


def _op(m, trans):
    return transpose(m) if trans else m


def _solve_triangular_vjp(ct, ans, needed, a, b, lower, trans):
    ct_b = solve_triangular(a, ct, lower, 1 - trans)
    ct_a = None
    if needed[0]:
        ct_m = -matmul(ct_b, transpose(ans))                       # cotangent of op(tri(a))
        ct_a = cast_like(_op(ct_m, trans) * _tri_mask(a, lower), get_aval(a))
    return ct_a, (unbroadcast(ct_b, b) if needed[1] else None)


def _solve_triangular_jvp(tangents, ans, a, b, lower, trans):
    t_a, t_b = tangents
    rhs = None if type(t_b) is Zero else t_b
    if type(t_a) is not Zero:
        term = -matmul(_op(t_a * _tri_mask(a, lower), trans), ans)
        rhs = term if rhs is None else rhs + term
    return cast_like(solve_triangular(a, rhs, lower, trans), get_aval(ans))


solve_triangular_p.def_vjp_joint(_solve_triangular_vjp)
solve_triangular_p.def_jvp_joint(_solve_triangular_jvp)


def solve_triangular(a, b, lower=False, trans=0):
    """Solve ``op(a) x = b`` reading one triangle of ``a`` (``b`` is (n, k))."""
    return solve_triangular_p.bind(a, b, lower=bool(lower), trans=int(trans))


def _sylvester_abstract(a, b, q):
    return ShapedArray(q.shape, np.result_type(a.dtype, b.dtype, q.dtype, np.float32))


sylvester_p = Primitive(
    "solve_sylvester",
    lambda a, b, q: scipy_function("linalg", "solve_sylvester", a, b, q)(a, b, q),
    _sylvester_abstract, family=FAMILY)


def _sylvester_vjp(ct, ans, needed, a, b, q):
    ct_q = solve_sylvester(transpose(a), transpose(b), ct)
    return (cast_like(-matmul(ct_q, transpose(ans)), get_aval(a)) if needed[0] else None,
            cast_like(-matmul(transpose(ans), ct_q), get_aval(b)) if needed[1] else None,
            cast_like(ct_q, get_aval(q)) if needed[2] else None)


def _sylvester_jvp(tangents, ans, a, b, q):
    t_a, t_b, t_q = tangents
    rhs = None if type(t_q) is Zero else t_q
    for term in ((None if type(t_a) is Zero else -matmul(t_a, ans)),
                 (None if type(t_b) is Zero else -matmul(ans, t_b))):
        if term is not None:
            rhs = term if rhs is None else rhs + term
    return solve_sylvester(a, b, rhs)


sylvester_p.def_vjp_joint(_sylvester_vjp)
sylvester_p.def_jvp_joint(_sylvester_jvp)


def solve_sylvester(a, b, q):
    """``x`` with ``a x + x b = q``."""
    return sylvester_p.bind(a, b, q)


def _sqrtm_impl(a):
    out = scipy_function("linalg", "sqrtm", a)(a)
    return out[0] if isinstance(out, tuple) else out


sqrtm_p = Primitive("sqrtm", _sqrtm_impl,
                    lambda a: ShapedArray(a.shape, np.result_type(a.dtype, np.float32)),
                    family=FAMILY)
# X X = A  =>  X dX + dX X = dA: a Sylvester equation in dX
sqrtm_p.def_vjp(lambda ct, ans, a: cast_like(solve_sylvester(transpose(ans), transpose(ans), ct),
                                             get_aval(a)))
sqrtm_p.def_jvp(lambda t, ans, a: solve_sylvester(ans, ans, t))


def per_example_rule(prim):
    """Give ``prim`` a vmap rule that binds it once per example and stacks.

    scipy.linalg's functions take single matrices, so a batch is solved one
    example at a time, each a bound primitive (so the result differentiates).
    """

    def rule(args, dims, **params):
        size = axis_size(args, dims)
        moved = [x if d is None else move_axis(x, d, 0) for x, d in zip(args, dims)]
        outs = [prim.bind(*[x if d is None else x[i] for x, d in zip(moved, dims)],
                          **params) for i in range(size)]
        return stack(outs), 0
    prim.batch = rule


for _prim in (solve_triangular_p, sylvester_p, sqrtm_p):
    per_example_rule(_prim)


def sqrtm(a):
    """Principal square root of a matrix."""
    return sqrtm_p.bind(a)


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.linalg import tri_like_p  # noqa: E402
from fgrad.primitives.shape import stack  # noqa: E402
