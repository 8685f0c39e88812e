"""Counter-based random numbers: Threefry-2x32 keys, splitting, and draws.

A key is two 32-bit words (a ``uint32`` array of shape ``(2,)``). The
generator is Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random
numbers: as easy as 1, 2, 3", SC 2011), the function JAX uses: it encrypts a
64-bit counter under the key, so the ``i``-th number of a draw depends on the
key and ``i`` alone. Nothing is stateful, so a draw stages under `jit` as one
equation evaluated on every call, and maps under `vmap` over a batch of keys.

The words are those of JAX's ``jax_threefry_partitionable`` mode: counter
``i`` is the pair ``(i >> 32, i & 0xFFFFFFFF)``; ``split(key, n)[i]`` is the
encryption of counter ``i``, ``fold_in(key, d)`` that of the pair ``(0, d)``;
32-bit draws take the xor of the two output words, 64-bit draws join them
(first word high). Uniform floats are ``1.m - 1`` with the mantissa ``m``
from the top bits, so bits and uniforms equal JAX's bit for bit. Normals are
Box-Muller pairs (below).

Every primitive takes keys of shape ``(*lead, 2)`` and draws for each key
independently (output ``(*lead, *shape)``): that is its batching rule. The
draws have no derivative (integers, or floats that depend on the key alone),
except `random_gamma`, whose shape parameter has the implicit
reparameterization gradient ``dx/da = -(dF/da)(x; a) / p(x; a)``.

Each ``impl`` runs the array code here on any backend (``array_module``);
on NumPy arrays a compiled kernel gives the same bits faster when the compiler
layer installed one (`register_cpu_kernels`).
"""
import math

import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.errors import MissingRuleError
from fgrad.core.trace import Primitive, ShapedArray

from fgrad.primitives.base import broadcast_shapes, dummy
from fgrad.primitives.batching import axis_size, batch_to_front, broadcasting_batch_rule, \
    move_axis

FAMILY = "primitives/random.py"

# ---------------------------------------------------------------------------
# Threefry-2x32 over arrays
# ---------------------------------------------------------------------------

# the rotation constants of Threefry-2x32, four rounds each, alternating
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
# the third key word is k0 ^ k1 ^ this (Threefish's key schedule parity)
KEY_PARITY = 0x1BD11BDA
MASK32 = 0xFFFFFFFF


def threefry2x32(k0, k1, x0, x1):
    """Threefry-2x32 (20 rounds) of the counter words ``(x0, x1)`` under the
    key ``(k0, k1)``: uint32 arrays that broadcast together (0-d excluded,
    where NumPy warns of the wrap-around the cipher relies on).

    >>> k = np.zeros(1, np.uint32)
    >>> [hex(int(w[0])) for w in threefry2x32(k, k, k, k)]
    ['0x6b200159', '0x99ba4efe']
    """
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(KEY_PARITY))
    x0 = x0 + k0
    x1 = x1 + k1
    for group in range(5):
        for r in ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = (x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))
            x1 = x1 ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + ks[(group + 2) % 3] + np.uint32(group + 1)
    return x0, x1


def _counter_words(xp, keys, start, n):
    """The two output words for counters ``start .. start + n - 1`` under each
    of ``keys`` (shape ``(k, 2)``): two ``(k, n)`` uint32 arrays."""
    i = xp.arange(start, start + n, dtype=np.uint64)
    hi = (i >> np.uint64(32)).astype(np.uint32)[None]
    lo = (i & np.uint64(MASK32)).astype(np.uint32)[None]
    return threefry2x32(keys[:, 0:1], keys[:, 1:2], hi, lo)


def _bits64(xp, keys, start, n):
    y0, y1 = _counter_words(xp, keys, start, n)
    return (y0.astype(np.uint64) << np.uint64(32)) | y1.astype(np.uint64)


# (bits of the width, mantissa bits, the bits of 1.0) per float dtype
_FLOAT_LAYOUT = {np.dtype(np.float16): (np.uint16, 10, 0x3C00),
                 np.dtype(np.float32): (np.uint32, 23, 0x3F800000),
                 np.dtype(np.float64): (np.uint64, 52, 0x3FF0000000000000)}


def _unit_floats(bits, dtype):
    """``1.m`` in [1, 2), the mantissa ``m`` the top bits of ``bits`` (exact)."""
    uint, mantissa, one = _FLOAT_LAYOUT[dtype]
    width = np.dtype(uint).itemsize * 8
    return ((bits >> uint(width - mantissa)) | uint(one)).view(dtype)


def _draw_bits(xp, keys, n, dtype):
    if dtype == np.uint64:
        return _bits64(xp, keys, 0, n)
    y0, y1 = _counter_words(xp, keys, 0, n)
    bits = y0 ^ y1
    return bits if dtype == np.uint32 else bits.astype(dtype)


def _draw_uniform(xp, keys, n, dtype):
    uint = np.dtype(_FLOAT_LAYOUT[dtype][0])
    bits = _draw(xp, keys, n, BITS, np.dtype(np.uint32) if uint.itemsize < 4 else uint)
    return _unit_floats(bits.astype(uint, copy=False), dtype) - dtype.type(1)


# -- normals: Box-Muller on two 52-bit uniforms, in basic arithmetic ----------
#
# Normal j of the first half of a draw of n (m = ceil(n / 2) pairs) is
# r cos(theta), normal m + j is r sin(theta), with r = sqrt(-2 log y) for y in
# (0, 1] from counter j and theta = 2 pi v for v in [0, 1) from counter m + j.
# log, sin and cos are written here as fdlibm's polynomials (log: its Lg1..Lg7
# on [sqrt(2)/2, sqrt(2)]; sin, cos: __kernel_sin and __kernel_cos on
# [-pi/4, pi/4], theta reduced exactly by quarter turns) with IEEE +, -, *, /,
# sqrt and bit moves only: every backend, and the compiled kernel, compute the
# same doubles, so normals are pinned bit for bit like the bits themselves.

LOG_COEFFICIENTS = (6.666666666666735130e-01, 3.999999999940941908e-01,
                    2.857142874366239149e-01, 2.222219843214978396e-01,
                    1.818357216161805012e-01, 1.531383769920937332e-01,
                    1.479819860511658591e-01)
SIN_COEFFICIENTS = (-1.66666666666666324348e-01, 8.33333333332248946124e-03,
                    -1.98412698298579493134e-04, 2.75573137070700676789e-06,
                    -2.50507602534068634195e-08, 1.58969099521155010221e-10)
COS_COEFFICIENTS = (4.16666666666666019037e-02, -1.38888888888741095749e-03,
                    2.48015872894767294178e-05, -2.75573143513906633035e-07,
                    2.08757232129817482790e-09, -1.13596475577881948265e-11)
LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
# the bits of 2**52: or-ed onto a small integer, a double that is 2**52 more
EXPONENT_MAGIC = 0x4330000000000000
MANTISSA_MASK = 0x000FFFFFFFFFFFFF
ONE_BITS = 0x3FF0000000000000
SQRT_HALF = math.sqrt(0.5)
SQRT_TWO = math.sqrt(2.0)


def _log_unit(xp, y):
    """log(y) for y in (0, 1] (normal numbers): fdlibm's reduction and polynomial."""
    bits = y.view(np.uint64)
    e = ((bits >> np.uint64(52)) | np.uint64(EXPONENT_MAGIC)).view(np.float64) \
        - (4503599627370496.0 + 1023.0)
    m = ((bits & np.uint64(MANTISSA_MASK)) | np.uint64(ONE_BITS)).view(np.float64)
    big = m > SQRT_TWO
    m = xp.where(big, m * 0.5, m)
    e = xp.where(big, e + 1.0, e)
    lg1, lg2, lg3, lg4, lg5, lg6, lg7 = LOG_COEFFICIENTS
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    r = z * (lg1 + w * (lg3 + w * (lg5 + w * lg7))) + w * (lg2 + w * (lg4 + w * lg6))
    hfsq = 0.5 * f * f
    return e * LN2_HI - ((hfsq - (s * (hfsq + r) + e * LN2_LO)) - f)


def _box_muller(xp, u, v):
    """The normal pairs of uniforms ``u``, ``v`` in [1, 2) (see above)."""
    s1, s2, s3, s4, s5, s6 = SIN_COEFFICIENTS
    c1, c2, c3, c4, c5, c6 = COS_COEFFICIENTS
    radius = xp.sqrt(-2.0 * _log_unit(xp, 2.0 - u)) * SQRT_HALF
    turn = (v - 1.0) * 4.0
    quarter = xp.floor(turn)
    a = (turn - quarter - 0.5) * (math.pi / 2)
    z = a * a
    sin_a = a + a * z * (s1 + z * (s2 + z * (s3 + z * (s4 + z * (s5 + z * s6)))))
    cos_a = 1.0 - 0.5 * z + z * z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * c6)))))
    # theta = (quarter + 1/2) pi/2 + a: the centre's cosine and sine are
    # +-sqrt(1/2) (folded into the radius), with these signs
    sy = xp.where(quarter < 2.0, 1.0, -1.0)
    sx = xp.where(abs(quarter - 1.5) > 1.0, 1.0, -1.0)
    return radius * (sx * cos_a - sy * sin_a), radius * (sy * cos_a + sx * sin_a)


def _draw_normal(xp, keys, n):
    pairs = (n + 1) // 2
    u = _unit_floats(_bits64(xp, keys, 0, pairs), np.dtype(np.float64))
    v = _unit_floats(_bits64(xp, keys, pairs, pairs), np.dtype(np.float64))
    first, second = _box_muller(xp, u, v)
    return xp.concatenate([first, second[:, :n - pairs]], axis=1)


# ---------------------------------------------------------------------------
# Fast CPU kernels, installed from the compiler layer
# ---------------------------------------------------------------------------

# what the kernels draw; `fgrad.compiler.random_kernels` writes one loop per mode
BITS, UNIFORM, NORMAL, SPLIT, FOLD_IN = range(5)

# Filled once, when `fgrad.compiler.random_kernels` is imported (the compiler
# owns compiled code and its disk cache): "words32" and "words64" map to
# functions ``(keys, data, out, mode) -> bool``, False where no kernel runs
# (no llvmlite), and the array code above draws instead. Nothing else writes here.
_CPU_KERNELS = {}


def register_cpu_kernels(words32, words64):
    """Install the NumPy backend's kernels: ``words32`` fills a uint32 array
    (modes BITS, UNIFORM as float32 bits, SPLIT, FOLD_IN), ``words64`` a
    uint64 one (BITS, UNIFORM as float64 bits, NORMAL as float64 bits)."""
    _CPU_KERNELS["words32"] = words32
    _CPU_KERNELS["words64"] = words64


def _kernel_draw(xp, width, keys, data, out, mode):
    """Whether a CPU kernel filled ``out`` (viewed as words of ``width`` bits)."""
    if xp is not np:
        return False
    kernel = _CPU_KERNELS.get(f"words{width}")
    return kernel is not None and kernel(keys, data, out.view(f"u{width // 8}"), mode)


# ---------------------------------------------------------------------------
# The primitives: keys of shape (*lead, 2), one draw per key
# ---------------------------------------------------------------------------


def _flat_keys(xp, key):
    return xp.ascontiguousarray(key.reshape(-1, 2))


_NO_DATA = np.zeros(0, np.uint32)


def _draw(xp, keys, n, kind, dtype):
    """``(k, n)`` draws of ``kind`` under each of ``keys`` (``(k, 2)``), of
    ``dtype`` (BITS: 8 to 64 bits, UNIFORM: float16 to 64, NORMAL: float64)."""
    width = dtype.itemsize * 8
    if width in (32, 64):
        out = xp.empty((keys.shape[0], n), dtype)
        if _kernel_draw(xp, width, keys, _NO_DATA, out, kind):
            return out
    if kind == BITS:
        return _draw_bits(xp, keys, n, dtype)
    if kind == UNIFORM:
        return _draw_uniform(xp, keys, n, dtype)
    return _draw_normal(xp, keys, n)


def _draw_impl(kind):
    def impl(key, shape, dtype):
        xp = array_module(key)
        inner = np.dtype(np.float64) if kind == NORMAL else \
            np.dtype(np.uint32) if kind == BITS and dtype.itemsize < 4 else dtype
        out = _draw(xp, _flat_keys(xp, key), math.prod(shape), kind, inner)
        # narrower bits are the low bits of 32 (as JAX's are)
        return out.astype(dtype, copy=False).reshape(key.shape[:-1] + tuple(shape))
    return impl


def _key_abstract(key):
    if key.dtype != np.uint32 or not key.shape or key.shape[-1] != 2:
        raise TypeError(f"a random key is a uint32 array of shape (..., 2), got {key}")


def _draw_abstract(key, shape, dtype):
    _key_abstract(key)
    return ShapedArray(key.shape[:-1] + tuple(shape), dtype)


def _keys_batch(prim):
    """A draw per key: the batch axis of the keys moves first, and so is the
    output's."""
    def rule(args, dims, **params):
        return prim.bind(move_axis(args[0], dims[0], 0), **params), 0
    return rule


def _keys_and_values_batch(prim):
    """Keys ``(*lead, 2)`` and values ``(*lead, ...)``: both batched first."""
    def rule(args, dims, **params):
        size = axis_size(args, dims)
        return prim.bind(*(batch_to_front(x, d, size) for x, d in zip(args, dims)),
                         **params), 0
    return rule


random_bits_p = Primitive("random_bits", _draw_impl(BITS), _draw_abstract,
                          nondiff=True, family=FAMILY)
random_bits_p.batch = _keys_batch(random_bits_p)
random_uniform_p = Primitive("random_uniform", _draw_impl(UNIFORM), _draw_abstract,
                             nondiff=True, family=FAMILY)
random_uniform_p.batch = _keys_batch(random_uniform_p)
random_normal_p = Primitive("random_normal", _draw_impl(NORMAL), _draw_abstract,
                            nondiff=True, family=FAMILY)
random_normal_p.batch = _keys_batch(random_normal_p)


def random_bits(key, shape, dtype):
    """Unsigned integers of ``dtype`` (8 to 64 bits), one draw of ``shape`` per
    key of ``key`` (shape ``(*lead, 2)``).

    >>> random_bits(np.array([0, 42], np.uint32), (2,), np.dtype(np.uint32))
    array([2098992034, 2919706841], dtype=uint32)
    """
    return random_bits_p.bind(key, shape=tuple(shape), dtype=np.dtype(dtype))


def random_uniform(key, shape, dtype):
    """Floats in [0, 1): ``1.m - 1`` with the mantissa ``m`` the top bits of a
    draw of `random_bits` as wide as ``dtype``."""
    return random_uniform_p.bind(key, shape=tuple(shape), dtype=np.dtype(dtype))


def random_normal(key, shape, dtype):
    """Standard normals (Box-Muller, computed in float64, rounded to ``dtype``)."""
    return random_normal_p.bind(key, shape=tuple(shape), dtype=np.dtype(dtype))


# -- new keys: split and fold_in ------------------------------------------------


def _split_impl(key, shape):
    xp = array_module(key)
    keys = _flat_keys(xp, key)
    n = math.prod(shape)
    out = xp.empty((keys.shape[0], 2 * n), np.uint32)
    if not _kernel_draw(xp, 32, keys, _NO_DATA, out, SPLIT):
        out = xp.stack(_counter_words(xp, keys, 0, n), axis=-1)
    return out.reshape(key.shape[:-1] + tuple(shape) + (2,))


def _split_abstract(key, shape):
    _key_abstract(key)
    return ShapedArray(key.shape[:-1] + tuple(shape) + (2,), np.uint32)


random_split_p = Primitive("random_split", _split_impl, _split_abstract,
                           nondiff=True, family=FAMILY)
random_split_p.batch = _keys_batch(random_split_p)


def random_split(key, shape):
    """``prod(shape)`` new keys from each key: the words of counters 0, 1, ..."""
    return random_split_p.bind(key, shape=tuple(shape))


def _fold_in_impl(key, data):
    xp = array_module(key, data)
    keys = _flat_keys(xp, key)
    data = xp.ascontiguousarray(xp.asarray(data).reshape(-1))
    out = xp.empty((keys.shape[0], 2), np.uint32)
    if not _kernel_draw(xp, 32, keys, data, out, FOLD_IN):
        y0, y1 = threefry2x32(keys[:, 0], keys[:, 1], xp.zeros_like(data), data)
        out = xp.stack([y0, y1], axis=-1)
    return out.reshape(key.shape)


def _fold_in_abstract(key, data):
    _key_abstract(key)
    if data.dtype != np.uint32 or data.shape != key.shape[:-1]:
        raise TypeError(f"fold_in: the data must be uint32 of shape {key.shape[:-1]}, "
                        f"got {data}")
    return ShapedArray(key.shape, np.uint32)


random_fold_in_p = Primitive("random_fold_in", _fold_in_impl, _fold_in_abstract,
                             nondiff=True, family=FAMILY)
random_fold_in_p.batch = _keys_and_values_batch(random_fold_in_p)


def random_fold_in(key, data):
    """A new key per key, from the pair of words ``(0, data)`` (uint32 data,
    shaped like the keys' leading axes)."""
    return random_fold_in_p.bind(key, data)


# ---------------------------------------------------------------------------
# Gamma: rejection rounds, and the implicit reparameterization gradient
# ---------------------------------------------------------------------------

# a round's acceptance is at least 0.95 (Marsaglia and Tsang), so every
# element is accepted long before this many rounds; a shape parameter that is
# not a positive number gives nan instead of looping
_MAX_ROUNDS = 1000


def _split_in_two(xp, keys):
    """Two ``(k, 2)`` arrays of keys split from ``keys``."""
    both = _split_impl(keys, (2,))
    return xp.ascontiguousarray(both[:, 0]), xp.ascontiguousarray(both[:, 1])


def _round_draws(xp, keys, r, n, kinds):
    """Round ``r``'s draws: one array ``(k, n)`` per kind, each from its own
    key folded from ``keys`` (``(k, 2)``)."""
    folded = _fold_in_impl(keys, xp.full(keys.shape[0], r, np.uint32))
    subkeys = _split_impl(folded, (len(kinds),))
    return [_draw(xp, xp.ascontiguousarray(subkeys[:, j]), n, kind, np.dtype(np.float64))
            for j, kind in enumerate(kinds)]


def _standard_gamma(xp, keys, a):
    """Marsaglia and Tsang's method ("A simple method for generating gamma
    variables", 2000) for ``a`` of shape ``(k, n)``, in rounds over the whole
    array: element ``i`` takes the first round whose normal and uniform at
    counter ``i`` are accepted, so it depends on its key, ``i`` and ``a_i``
    alone. ``a < 1`` draws ``Gamma(a + 1) * U ** (1 / a)``."""
    n = a.shape[1]
    rounds_key, boost_key = _split_in_two(xp, keys)
    valid = (a > 0) & (a < np.inf)
    boosted = a < 1
    shape = xp.where(valid, xp.where(boosted, a + 1, a), 1.0)
    d = shape - 1.0 / 3.0
    c = (1.0 / 3.0) / xp.sqrt(d)
    x = xp.full(a.shape, np.nan)
    done = ~valid
    r = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        while not bool(done.all()) and r < _MAX_ROUNDS:
            z, u = _round_draws(xp, rounds_key, r, n, (NORMAL, UNIFORM))
            v = 1.0 + c * z
            v = v * v * v
            positive = v > 0
            ok = positive & (xp.log(u) < 0.5 * z * z + d - d * v
                             + d * xp.log(xp.where(positive, v, 1.0)))
            x = xp.where(ok & ~done, d * v, x)
            done = done | ok
            r += 1
        if bool(boosted.any()):
            (u,) = _round_draws(xp, boost_key, 0, n, (UNIFORM,))
            x = xp.where(boosted & valid, x * u ** (1.0 / a), x)
    return xp.where(a == np.inf, np.inf, x)


def _gamma_impl(key, a):
    xp = array_module(key, a)
    keys = _flat_keys(xp, key)
    flat = a.reshape(keys.shape[0], -1).astype(np.float64)
    return _standard_gamma(xp, keys, flat).astype(a.dtype).reshape(a.shape)


def _gamma_abstract(key, a):
    _key_abstract(key)
    if a.shape[:len(key.shape) - 1] != key.shape[:-1]:
        raise TypeError(f"random_gamma: the shape parameter's leading axes must be the "
                        f"keys' {key.shape[:-1]}, got {a}")
    return ShapedArray(a.shape, a.dtype)


random_gamma_p = Primitive("random_gamma", _gamma_impl, _gamma_abstract, family=FAMILY)
random_gamma_p.batch = _keys_and_values_batch(random_gamma_p)
# the sample moves with its shape parameter along the gamma distribution's
# quantile at fixed probability: dx/da = -(dF/da) / p, `random_gamma_grad`
random_gamma_p.def_vjp(None, lambda ct, ans, key, a: ct * random_gamma_grad(a, ans),
                       reads=[set(), {1, "ans"}])
random_gamma_p.def_jvp(None, lambda a_dot, ans, key, a: a_dot * random_gamma_grad(a, ans))


def random_gamma(key, a):
    """Standard gamma samples of shape parameter ``a`` (float, shaped
    ``(*lead, ...)`` for keys ``(*lead, 2)``), differentiable in ``a``."""
    return random_gamma_p.bind(key, a)


# -- d x / d a for x ~ Gamma(a): the incomplete gamma function's derivative -------


_EPS = float(np.finfo(np.float64).eps)


def _digamma(xp, a):
    """psi(a) for a > 0: the recurrence up to 10, then the asymptotic series."""
    shift = xp.zeros_like(a)
    for _ in range(10):
        small = a < 10.0
        shift = shift - xp.where(small, 1.0 / a, 0.0)
        a = xp.where(small, a + 1.0, a)
    inv2 = 1.0 / (a * a)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (
        1 / 240 - inv2 * (1 / 132)))))
    return shift + xp.log(a) - 0.5 / a - series


def _lower_series(xp, a, x, active):
    """``(S, dS/da)`` of P(a, x) = x^a e^-x S / Gamma(a), S = sum_k x^k /
    (a (a+1) ... (a+k)); for x < a + 1, where its terms shrink from the start."""
    term = 1.0 / a
    h = -1.0 / a                       # d log(term) / da
    total, total_a = term, term * h
    k = 0
    while bool(active.any()):
        k += 1
        term = term * x / (a + k)
        h = h - 1.0 / (a + k)
        total, total_a = total + term, total_a + term * h
        active = active & ((term > _EPS * total) | (abs(term * h) > _EPS * abs(total_a)))
    return total, total_a


def _upper_fraction(xp, a, x, active):
    """``(C, dC/da)`` of Q(a, x) = x^a e^-x C / Gamma(a), C Legendre's continued
    fraction by the modified Lentz method, its derivative carried along; for
    x >= a + 1."""
    b = x + 1.0 - a
    c, c_a = xp.full_like(x, 1e300), xp.zeros_like(x)
    d = 1.0 / b
    d_a = d * d                         # d(1/b)/da with db/da = -1
    h, h_a = d, d_a
    i = 0
    while bool(active.any()):
        i += 1
        an, an_a = -i * (i - a), float(i)
        b = b + 2.0
        denominator = an * d + b
        d_next = 1.0 / denominator
        d_next_a = -(an_a * d + an * d_a - 1.0) * d_next * d_next
        c_next = b + an / c
        c_next_a = -1.0 + an_a / c - an * c_a / (c * c)
        delta = d_next * c_next
        delta_a = d_next_a * c_next + d_next * c_next_a
        h, h_a = h * delta, h_a * delta + h * delta_a
        d, d_a, c, c_a = d_next, d_next_a, c_next, c_next_a
        active = active & ((abs(delta - 1.0) > _EPS) | (abs(h * delta_a) > _EPS * abs(h_a)))
    return h, h_a


def _gamma_grad_impl(a, x):
    xp = array_module(a, x)
    dtype = np.result_type(a.dtype, x.dtype)
    a, x = (xp.broadcast_to(v, broadcast_shapes(a, x)).astype(np.float64) for v in (a, x))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        finite = (a > 0) & (x > 0) & xp.isfinite(a) & xp.isfinite(x)
        lower = x < a + 1.0
        # with p(x) the density, -(dP/da) / p = -x (S (log x - psi(a)) + dS/da)
        # and (dQ/da) / p = x (C (log x - psi(a)) + dC/da)
        s, s_a = _lower_series(xp, a, x, finite & lower)
        f, f_a = _upper_fraction(xp, a, x, finite & ~lower)
        log_ratio = xp.log(x) - _digamma(xp, a)
        grad = xp.where(lower, -x * (s * log_ratio + s_a), x * (f * log_ratio + f_a))
        grad = xp.where(finite, grad, xp.where(x == 0, 0.0, np.nan))
    return grad.astype(dtype)


def _float_abstract(*avals):
    dtype = np.result_type(*(dummy(v) for v in avals))
    return ShapedArray(broadcast_shapes(*avals),
                       dtype if dtype.kind == "f" else np.dtype(np.float64))


def _second_derivative(*_):
    raise MissingRuleError(
        "random_gamma_grad (the derivative of a gamma sample in its shape parameter) "
        "has no derivative of its own: second derivatives of fgrad.random.gamma, "
        "beta, dirichlet or t in their shape parameters are not implemented "
        "(primitives/random.py). Differentiate once, or supply a rule with "
        "fgrad.custom_vjp / fgrad.custom_jvp.")


random_gamma_grad_p = Primitive("random_gamma_grad", _gamma_grad_impl, _float_abstract,
                                family=FAMILY)
random_gamma_grad_p.batch = broadcasting_batch_rule(random_gamma_grad_p)
random_gamma_grad_p.def_vjp(_second_derivative, _second_derivative)
random_gamma_grad_p.def_jvp(_second_derivative, _second_derivative)


def random_gamma_grad(a, x):
    """``dx/da`` at a sample ``x`` of Gamma(``a``): ``-(dP/da)(a, x) / p(x; a)``,
    P the regularized lower incomplete gamma function and p the density.

    >>> float(random_gamma_grad(np.array(1.0), np.array(1.0)))  # exponential
    1.17356302722...
    """
    return random_gamma_grad_p.bind(a, x)


# ---------------------------------------------------------------------------
# Poisson: Knuth's product of uniforms below 10, Hormann's PTRS above
# ---------------------------------------------------------------------------

_KNUTH_BELOW = 10.0


def _log_factorial(xp, k):
    """log(k!) for k >= 0: shifted up to 7, then Stirling's series."""
    z = k + 1.0
    shift = xp.zeros_like(z)
    for _ in range(7):
        small = z < 7.0
        shift = shift - xp.where(small, xp.log(z), 0.0)
        z = xp.where(small, z + 1.0, z)
    inv2 = 1.0 / (z * z)
    series = (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 / 1680))) / z
    return shift + (z - 0.5) * xp.log(z) - z + 0.5 * math.log(2 * math.pi) + series


def _poisson_knuth(xp, keys, lam, active):
    """Count uniforms until their product falls below exp(-lam)."""
    count = xp.zeros(lam.shape)
    log_product = xp.zeros(lam.shape)
    r = 0
    while bool(active.any()):
        (u,) = _round_draws(xp, keys, r, lam.shape[1], (UNIFORM,))
        log_product = log_product + xp.log(u)
        stop = active & (log_product < -lam)
        count = xp.where(active & ~stop, count + 1.0, count)
        active = active & ~stop
        r += 1
    return count


def _poisson_ptrs(xp, keys, lam, active):
    """Hormann's transformed rejection with squeeze ("The transformed rejection
    method for generating Poisson random variables", 1993)."""
    lam = xp.where(active, lam, _KNUTH_BELOW)
    slam, loglam = xp.sqrt(lam), xp.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_inv_alpha = xp.log(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2.0)
    k = xp.zeros(lam.shape)
    r = 0
    while bool(active.any()):
        u, v = _round_draws(xp, keys, r, lam.shape[1], (UNIFORM, UNIFORM))
        u = u - 0.5
        us = 0.5 - abs(u)
        candidate = xp.floor((2.0 * a / us + b) * u + lam + 0.43)
        quick = (us >= 0.07) & (v <= vr)
        rejected = (candidate < 0) | ((us < 0.013) & (v > us))
        candidate_ok = xp.where(candidate < 0, 0.0, candidate)
        slow = ~rejected & (xp.log(v) + log_inv_alpha - xp.log(a / (us * us) + b)
                            <= -lam + candidate_ok * loglam
                            - _log_factorial(xp, candidate_ok))
        accepted = active & (quick | slow)
        k = xp.where(accepted, candidate, k)
        active = active & ~accepted
        r += 1
    return k


def _poisson_impl(key, lam, dtype):
    xp = array_module(key, lam)
    keys = _flat_keys(xp, key)
    flat = lam.reshape(keys.shape[0], -1).astype(np.float64)
    small_key, large_key = _split_in_two(xp, keys)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        valid = (flat >= 0) & xp.isfinite(flat)
        small = valid & (flat < _KNUTH_BELOW)
        counts = xp.where(small, _poisson_knuth(xp, small_key, flat, small),
                          _poisson_ptrs(xp, large_key, flat, valid & ~small))
    # a rate that is negative, nan or infinite draws -1
    return xp.where(valid, counts, -1.0).astype(dtype).reshape(lam.shape)


def _poisson_abstract(key, lam, dtype):
    _gamma_abstract(key, lam)
    return ShapedArray(lam.shape, dtype)


random_poisson_p = Primitive("random_poisson", _poisson_impl, _poisson_abstract,
                             nondiff=True, family=FAMILY)
random_poisson_p.batch = _keys_and_values_batch(random_poisson_p)


def random_poisson(key, lam, dtype):
    """Poisson counts of rate ``lam`` (float, shaped ``(*lead, ...)`` for keys
    ``(*lead, 2)``) as ``dtype``; -1 where the rate is negative or not finite."""
    return random_poisson_p.bind(key, lam, dtype=np.dtype(dtype))
