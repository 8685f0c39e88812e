"""The NumPy backend's random draws as numba kernels.

`fgrad.primitives.random` defines every draw with array code, which runs on
any backend; on NumPy that code makes some seventy passes over the data (the
cipher's rounds), several times slower than NumPy's own generator. The
kernels here compute the same words one block of 256 counters at a time, the
cipher's 20 rounds written out so that LLVM vectorises them, and turn them
into bits, uniforms or normals before the block leaves the cache: one pass.

Two kernels, compiled on first use through `fgrad.compiler.kernel_cache` (so
a second process loads them from disk): ``words32`` fills uint32 words (bits,
float32 uniforms, new keys), ``words64`` uint64 words (bits, float64
uniforms, float64 normals). Each repeats the array code's arithmetic
operation for operation, so both give the same bits; tests check it. Without
numba nothing is registered to run, and the array code draws.

Importing this module installs the kernels in `fgrad.primitives.random`
(`register_cpu_kernels`): the compiler layer owns numba code, and the
primitives below it receive it.
"""
import functools
import importlib.util

import numpy as np

from fgrad.compiler.kernel_cache import load_or_build
from fgrad.primitives import random as _random

BLOCK = 256


def _cipher_lines(indent):
    """The 20 rounds of Threefry-2x32 on ``x0, x1`` under ``k0, k1, k2``
    (uint32 scalars), written out as `fgrad.primitives.random.threefry2x32`
    loops over them."""
    pad = " " * indent
    keys = ("k0", "k1", "k2")
    lines = [f"{pad}x0 = np.uint32(x0 + k0)", f"{pad}x1 = np.uint32(x1 + k1)"]
    for group in range(5):
        for r in _random.ROTATIONS[group % 2]:
            lines += [f"{pad}x0 = np.uint32(x0 + x1)",
                      f"{pad}x1 = np.uint32(np.uint32(x1 << np.uint32({r})) "
                      f"| np.uint32(x1 >> np.uint32({32 - r})))",
                      f"{pad}x1 = np.uint32(x1 ^ x0)"]
        lines += [f"{pad}x0 = np.uint32(x0 + {keys[(group + 1) % 3]})",
                  f"{pad}x1 = np.uint32(x1 + np.uint32({keys[(group + 2) % 3]} "
                  f"+ np.uint32({group + 1})))"]
    return lines


def _block_lines(indent):
    """Words of counters ``start + t`` for ``t < BLOCK`` into ``y0``, ``y1``."""
    pad = " " * indent
    return [f"{pad}for t in range({BLOCK}):",
            f"{pad}    c = start + t",
            f"{pad}    x0 = np.uint32(c >> 32)",
            f"{pad}    x1 = np.uint32(c & 0xFFFFFFFF)",
            *_cipher_lines(indent + 4),
            f"{pad}    y0[t] = x0",
            f"{pad}    y1[t] = x1"]


def _key_lines():
    return ["        k0 = keys[kk, 0]",
            "        k1 = keys[kk, 1]",
            f"        k2 = np.uint32(k0 ^ k1 ^ np.uint32({_random.KEY_PARITY}))"]


def _source32():
    mode = {name: getattr(_random, name) for name in ("BITS", "UNIFORM", "SPLIT", "FOLD_IN")}
    return "\n".join([
        "def kernel(keys, data, out, mode):",
        f"    y0 = np.empty({BLOCK}, np.uint32)",
        f"    y1 = np.empty({BLOCK}, np.uint32)",
        "    floats = out.view(np.float32)",
        "    for kk in range(keys.shape[0]):",
        *_key_lines(),
        f"        if mode == {mode['FOLD_IN']}:",
        "            x0 = np.uint32(0)",
        "            x1 = data[kk]",
        *_cipher_lines(12),
        "            out[kk, 0] = x0",
        "            out[kk, 1] = x1",
        "            continue",
        f"        n = out.shape[1] // 2 if mode == {mode['SPLIT']} else out.shape[1]",
        f"        for start in range(0, n, {BLOCK}):",
        *_block_lines(12),
        f"            m = min({BLOCK}, n - start)",
        f"            if mode == {mode['SPLIT']}:",
        "                for t in range(m):",
        "                    out[kk, 2 * (start + t)] = y0[t]",
        "                    out[kk, 2 * (start + t) + 1] = y1[t]",
        f"            elif mode == {mode['BITS']}:",
        "                for t in range(m):",
        "                    out[kk, start + t] = y0[t] ^ y1[t]",
        "            else:",
        "                for t in range(m):",
        "                    floats[kk, start + t] = np.uint32(np.uint32(np.uint32(y0[t] ^ "
        "y1[t]) >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1.0)",
        ""])


def _source64():
    r = _random
    lg1, lg2, lg3, lg4, lg5, lg6, lg7 = map(repr, r.LOG_COEFFICIENTS)
    s1, s2, s3, s4, s5, s6 = map(repr, r.SIN_COEFFICIENTS)
    c1, c2, c3, c4, c5, c6 = map(repr, r.COS_COEFFICIENTS)
    one = f"np.uint64({r.ONE_BITS})"
    unit = f"np.uint64(np.uint64(y0[t]) << np.uint64(20)) | np.uint64(y1[t] >> " \
           f"np.uint32(12)) | {one}"
    return "\n".join([
        "def kernel(keys, data, out, mode):",
        f"    y0 = np.empty({BLOCK}, np.uint32)",
        f"    y1 = np.empty({BLOCK}, np.uint32)",
        f"    u = np.empty({BLOCK}, np.uint64)",
        f"    v = np.empty({BLOCK}, np.uint64)",
        f"    e = np.empty({BLOCK}, np.uint64)",
        f"    radius = np.empty({BLOCK})",
        "    uf = u.view(np.float64)",
        "    vf = v.view(np.float64)",
        "    ef = e.view(np.float64)",
        "    floats = out.view(np.float64)",
        "    for kk in range(keys.shape[0]):",
        *_key_lines(),
        "        n = out.shape[1]",
        f"        if mode != {r.NORMAL}:",
        f"            for start in range(0, n, {BLOCK}):",
        *_block_lines(16),
        f"                m = min({BLOCK}, n - start)",
        f"                if mode == {r.BITS}:",
        "                    for t in range(m):",
        "                        out[kk, start + t] = np.uint64(np.uint64(y0[t]) << "
        "np.uint64(32)) | np.uint64(y1[t])",
        "                else:",
        "                    for t in range(m):",
        f"                        floats[kk, start + t] = np.uint64({unit}).view(np.float64) - 1.0",
        "            continue",
        # Box-Muller: pair j from counters j (radius) and pairs + j (angle)
        "        pairs = (n + 1) // 2",
        f"        for first in range(0, pairs, {BLOCK}):",
        "            start = first",
        *_block_lines(12),
        f"            for t in range({BLOCK}):",
        f"                u[t] = {unit}",
        "            start = pairs + first",
        *_block_lines(12),
        f"            for t in range({BLOCK}):",
        f"                v[t] = {unit}",
        # log(y), y = 2 - u in (0, 1]: exponent and mantissa from its bits
        f"            for t in range({BLOCK}):",
        "                uf[t] = 2.0 - uf[t]",
        f"            for t in range({BLOCK}):",
        "                bits = u[t]",
        f"                e[t] = (bits >> np.uint64(52)) | np.uint64({r.EXPONENT_MAGIC})",
        f"                u[t] = (bits & np.uint64({r.MANTISSA_MASK})) | {one}",
        f"            for t in range({BLOCK}):",
        "                m_ = uf[t]",
        "                ex = ef[t] - (4503599627370496.0 + 1023.0)",
        f"                big = m_ > {r.SQRT_TWO!r}",
        "                m_ = m_ * 0.5 if big else m_",
        "                ex = ex + 1.0 if big else ex",
        "                f = m_ - 1.0",
        "                s = f / (2.0 + f)",
        "                z = s * s",
        "                w = z * z",
        f"                rr = z * ({lg1} + w * ({lg3} + w * ({lg5} + w * {lg7}))) "
        f"+ w * ({lg2} + w * ({lg4} + w * {lg6}))",
        "                hfsq = 0.5 * f * f",
        f"                lg = ex * {r.LN2_HI!r} - ((hfsq - (s * (hfsq + rr) + ex * "
        f"{r.LN2_LO!r})) - f)",
        f"                radius[t] = np.sqrt(-2.0 * lg) * {r.SQRT_HALF!r}",
        f"            m = min({BLOCK}, pairs - first)",
        "            m2 = min(m, n - pairs - first)",
        f"            for t in range({BLOCK}):",
        "                turn = (vf[t] - 1.0) * 4.0",
        "                quarter = np.floor(turn)",
        f"                a = (turn - quarter - 0.5) * {np.pi / 2!r}",
        "                z = a * a",
        f"                sin_a = a + a * z * ({s1} + z * ({s2} + z * ({s3} + z * ({s4} "
        f"+ z * ({s5} + z * {s6})))))",
        f"                cos_a = 1.0 - 0.5 * z + z * z * ({c1} + z * ({c2} + z * ({c3} "
        f"+ z * ({c4} + z * ({c5} + z * {c6})))))",
        "                sy = 1.0 if quarter < 2.0 else -1.0",
        "                sx = 1.0 if abs(quarter - 1.5) > 1.0 else -1.0",
        "                uf[t] = radius[t] * (sx * cos_a - sy * sin_a)",
        "                ef[t] = radius[t] * (sy * cos_a + sx * sin_a)",
        "            for t in range(m):",
        "                floats[kk, first + t] = uf[t]",
        "            for t in range(m2):",
        "                floats[kk, pairs + first + t] = ef[t]",
        ""])


@functools.lru_cache(maxsize=None)
def _kernel(width):
    """The compiled kernel for words of ``width`` bits, or None without numba."""
    if importlib.util.find_spec("numba") is None:
        return None
    import numba
    readonly = numba.types.Array(numba.uint32, 2, "C", readonly=True)
    data = numba.types.Array(numba.uint32, 1, "C", readonly=True)
    words = numba.uint32 if width == 32 else numba.uint64
    signature = numba.void(readonly, data, words[:, ::1], numba.int64)
    return load_or_build(_source32() if width == 32 else _source64(), signature)


def _runner(width):
    def run(keys, data, out, mode):
        kernel = _kernel(width)
        if kernel is None:
            return False
        kernel(keys, data, out, mode)
        return True
    run.__name__ = f"words{width}"
    return run


words32 = _runner(32)
words64 = _runner(64)
_random.register_cpu_kernels(words32, words64)
