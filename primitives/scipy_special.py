"""More ``scipy.special`` primitives: the gamma family, Bessel functions, zeta,
the incomplete gamma and beta functions and ``erfcinv``.

Each is one broadcasting primitive evaluated by ``scipy.special`` (or
``cupyx.scipy.special``), imported on first use. Its partial derivatives are
written with fgrad functions (``d gamma = gamma * digamma``, ``d j0 = -j1``, the
Bessel recurrences), so every order works and vmap maps them.

Some arguments have no derivative fgrad can offer: an integer order (``n`` of
``jn``), a real order or shape parameter whose derivative has no closed form
(``v`` of ``iv``, ``a`` of ``gammainc``). Differentiating one raises
`MissingRuleError` naming the function and the argument; the others stay
differentiable.
"""
import math

import numpy as np

from fgrad.core.errors import MissingRuleError
from fgrad.core.trace import Primitive, ShapedArray, Zero, get_aval

from fgrad.primitives.base import broadcast_shapes, dummy
from fgrad.primitives.batching import broadcasting_batch_rule
from fgrad.primitives.bessel import i0, i1  # noqa: F401  (fgrad.scipy.special's)
from fgrad.primitives.elementwise import exp, log, log1p, rebroadcast, sign, unbroadcast
from fgrad.primitives.special import digamma, gammaln, scipy_function

FAMILY = "primitives/scipy_special.py"

_SQRT_PI = math.sqrt(math.pi)


def _float_result(*avals):
    dtype = np.result_type(*(dummy(a) for a in avals))
    return ShapedArray(broadcast_shapes(*avals),
                       dtype if dtype.kind == "f" else np.dtype(np.float64))


def _no_derivative(name, arg, i, why):
    return MissingRuleError(
        f"scipy.special.{name} has no derivative with respect to {arg} (argument {i}): "
        f"{why}. Pass {arg} as a constant (a value outside the differentiated "
        f"function), or supply a rule with fgrad.custom_vjp / fgrad.custom_jvp.")


def special_primitive(name, args, partials, why=None, nondiff=False):
    """A broadcasting primitive for ``scipy.special.<name>(*args)``.

    ``partials[i](ans, *operands)`` is the partial derivative of the output in
    argument ``i``, written with fgrad functions; ``None`` marks an argument
    without one (``why`` says why), which raises `MissingRuleError` naming
    ``args[i]`` when it is differentiated.
    """
    def impl(*operands):
        out = scipy_function("special", name, *operands)(*operands)
        dtype = _float_result(*map(get_aval, operands)).dtype
        return out if out.dtype == dtype else out.astype(dtype)

    prim = Primitive(name, impl, _float_result, family=FAMILY, nondiff=nondiff)
    prim.batch = broadcasting_batch_rule(prim)
    if nondiff:
        return prim

    def vjp(ct, ans, needed, *operands):
        out = []
        for i, need in enumerate(needed):
            if not need:
                out.append(None)
            elif partials[i] is None:
                raise _no_derivative(name, args[i], i, why)
            else:
                out.append(unbroadcast(ct * partials[i](ans, *operands), operands[i]))
        return tuple(out)

    def jvp(tangents, ans, *operands):
        total = None
        for i, t in enumerate(tangents):
            if type(t) is Zero:
                continue
            if partials[i] is None:
                raise _no_derivative(name, args[i], i, why)
            term = t * partials[i](ans, *operands)
            total = term if total is None else total + term
        return None if total is None else rebroadcast(total, ans)

    prim.def_vjp_joint(vjp)
    prim.def_jvp_joint(jvp)
    return prim


_ORDER = "the order is an integer, so there is nothing to differentiate"
_NO_CLOSED_FORM = ("its derivative in this argument has no closed form in terms of "
                   "functions fgrad provides")


# -- gamma and beta ------------------------------------------------------------------

gamma_p = special_primitive("gamma", ("x",), [lambda ans, x: ans * digamma(x)])
rgamma_p = special_primitive("rgamma", ("x",), [lambda ans, x: -ans * digamma(x)])
# the sign of Gamma(x) is piecewise constant: derivative zero wherever it exists
gammasgn_p = special_primitive("gammasgn", ("x",), None, nondiff=True)
beta_p = special_primitive("beta", ("a", "b"), [
    lambda ans, a, b: ans * (digamma(a) - digamma(a + b)),
    lambda ans, a, b: ans * (digamma(b) - digamma(a + b))])


# -- the regularized incomplete gamma and beta functions ----------------------------
#
# d/dx P(a, x) and d/dx I_x(a, b) are the gamma and beta densities; their
# derivatives in the shape parameters are series of hypergeometric terms.

def _gamma_density(a, x):
    return exp((a - 1) * log(x) - x - gammaln(a))


def _beta_density(a, b, x):
    return exp((a - 1) * log(x) + (b - 1) * log1p(-x)
               - gammaln(a) - gammaln(b) + gammaln(a + b))


gammainc_p = special_primitive("gammainc", ("a", "x"), [
    None, lambda ans, a, x: _gamma_density(a, x)], _NO_CLOSED_FORM)
gammaincc_p = special_primitive("gammaincc", ("a", "x"), [
    None, lambda ans, a, x: -_gamma_density(a, x)], _NO_CLOSED_FORM)
betainc_p = special_primitive("betainc", ("a", "b", "x"), [
    None, None, lambda ans, a, b, x: _beta_density(a, b, x)], _NO_CLOSED_FORM)


# Student's t distribution function: d/dt is the t density (none in df)
def _t_density(df, t):
    # (df pi)^-1/2 by ** keeps a Python df a Python number (no host array beside
    # device data)
    return (exp(gammaln((df + 1) * 0.5) - gammaln(df * 0.5)
                - (df + 1) * 0.5 * log1p(t * t / df)) * (df * math.pi) ** -0.5)


stdtr_p = special_primitive("stdtr", ("df", "t"), [
    None, lambda ans, df, t: _t_density(df, t)], _NO_CLOSED_FORM)


# -- erfcinv -------------------------------------------------------------------------

# erfc(y) = x  =>  dy/dx = 1 / erfc'(y) = -sqrt(pi)/2 exp(y^2)
erfcinv_p = special_primitive("erfcinv", ("y",), [
    lambda ans, x: (-_SQRT_PI / 2) * exp(ans * ans)])


# -- Bessel functions ----------------------------------------------------------------
#
# The recurrences Z'_v = (Z_{v-1} - Z_{v+1}) / 2 (J, Y), I'_v = (I_{v-1} + I_{v+1}) / 2
# and K'_v = -(K_{v-1} + K_{v+1}) / 2 hold for every order, and stay finite at
# x = 0 where the alternative forms with v / x do not.

j0_p = special_primitive("j0", ("x",), [lambda ans, x: -j1(x)])
j1_p = special_primitive("j1", ("x",), [lambda ans, x: 0.5 * (j0(x) - jn(2, x))])
jn_p = special_primitive("jn", ("n", "x"), [
    None, lambda ans, n, x: 0.5 * (jn(n - 1, x) - jn(n + 1, x))], _ORDER)
y0_p = special_primitive("y0", ("x",), [lambda ans, x: -y1(x)])
y1_p = special_primitive("y1", ("x",), [lambda ans, x: 0.5 * (y0(x) - yn(2, x))])
yn_p = special_primitive("yn", ("n", "x"), [
    None, lambda ans, n, x: 0.5 * (yn(n - 1, x) - yn(n + 1, x))], _ORDER)
# i0 and i1 are fgrad.primitives.bessel's (no SciPy needed: fgrad.numpy.i0 has them)
iv_p = special_primitive("iv", ("v", "x"), [
    None, lambda ans, v, x: 0.5 * (iv(v - 1, x) + iv(v + 1, x))], _NO_CLOSED_FORM)
# ive = iv * exp(-|x|)
ive_p = special_primitive("ive", ("v", "x"), [
    None, lambda ans, v, x: 0.5 * (ive(v - 1, x) + ive(v + 1, x)) - sign(x) * ans],
    _NO_CLOSED_FORM)
kv_p = special_primitive("kv", ("v", "x"), [
    None, lambda ans, v, x: -0.5 * (kv(v - 1, x) + kv(v + 1, x))], _NO_CLOSED_FORM)


# -- zeta ----------------------------------------------------------------------------

# Hurwitz zeta(x, q) = sum_k (k + q)^-x: d/dq = -x zeta(x + 1, q)
zeta_p = special_primitive("zeta", ("x", "q"), [
    None, lambda ans, x, q: -x * zeta(x + 1, q)], _NO_CLOSED_FORM)


def gamma(x):
    """Gamma(x)."""
    return gamma_p.bind(x)


def rgamma(x):
    """1 / Gamma(x) (zero at the poles)."""
    return rgamma_p.bind(x)


def gammasgn(x):
    """The sign of Gamma(x)."""
    return gammasgn_p.bind(x)


def beta(a, b):
    """B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b)."""
    return beta_p.bind(a, b)


def gammainc(a, x):
    """P(a, x), the regularized lower incomplete gamma function."""
    return gammainc_p.bind(a, x)


def gammaincc(a, x):
    """Q(a, x) = 1 - P(a, x)."""
    return gammaincc_p.bind(a, x)


def betainc(a, b, x):
    """I_x(a, b), the regularized incomplete beta function."""
    return betainc_p.bind(a, b, x)


def stdtr(df, t):
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    return stdtr_p.bind(df, t)


def erfcinv(y):
    """The inverse of erfc on (0, 2)."""
    return erfcinv_p.bind(y)


def j0(x):
    return j0_p.bind(x)


def j1(x):
    return j1_p.bind(x)


def jn(n, x):
    return jn_p.bind(n, x)


def y0(x):
    return y0_p.bind(x)


def y1(x):
    return y1_p.bind(x)


def yn(n, x):
    return yn_p.bind(n, x)


def iv(v, x):
    return iv_p.bind(v, x)


def ive(v, x):
    return ive_p.bind(v, x)


def kv(v, x):
    return kv_p.bind(v, x)


def zeta(x, q):
    """The Hurwitz zeta function (q = 1: Riemann's)."""
    return zeta_p.bind(x, q)

