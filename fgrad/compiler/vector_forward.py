"""sin, cos, exp and tanh of large arrays under eager grad, by the vector functions.

An eager gradient's backward pass on large arrays runs as compiled kernels
(`fgrad.interpreters.compiled_sweep`), which compute sin, cos, exp and tanh
with the SIMD functions of `fgrad.compiler.vector_math`; its forward pass is
NumPy's calls, one per operation, and NumPy computes these four (in float64,
on a CPU without AVX-512) one element at a time with the C library: 10-15 ns
an element for sin, cos and tanh, against about 1 ns in a kernel. On the
10**6-element gradient of ``sum(sin(x) * exp(-x*x/4) + x**2)`` that was
half the gradient's time.

`forward_impls` gives `fgrad.transforms.differentiation` the forward
functions the reverse trace (`fgrad.interpreters.reverse`) evaluates these
primitives with, in a gradient with respect to an array of at least
`MIN_BYTES` (the others skip even the lookup: the per-operation cost of small
gradients stays as it was): on a float64 or float32 NumPy array of that size,
a one-operation kernel (`fgrad.compiler.cpu_fusion.native_kernel`) once it is
compiled, else NumPy's function. The kernel is compiled on the compile thread
at the first such call (`fgrad.compiler.tiers.compile_as_configured`: at once
with ``FGRAD_JIT_COMPILE=sync``, never with ``never``), so no call waits for
it; it loads from the disk cache in later processes.

The values are the vector functions', within 2 units in the last place of
NumPy's. Where a value is nan or inf (an argument nan, inf or out of the
functions' range, an overflowing exp), the array is computed again by NumPy,
whose values and floating-point warnings (`numpy.errstate`) it then has.
Outside a gradient, and on arrays below `MIN_BYTES`, ``fgrad.numpy.sin`` and
kin are NumPy's, bit for bit.
"""
import functools
import threading

import numpy as np

from fgrad.compiler.cpu_fusion import native_kernel
from fgrad.compiler.kernel_ir import KernelSpec, Op
from fgrad.compiler.native import available as native_available
from fgrad.compiler.tiers import compile_as_configured
from fgrad.compiler.vector_math import VECTOR_FUNCTIONS
from fgrad.interpreters.compiled_sweep import FUSED_MIN_BYTES
from fgrad.primitives.elementwise import cos_p, exp_p, sin_p, tanh_p

# smallest array whose forward value a kernel computes: that of the fused
# compiled sweep, so that a gradient's forward and backward change over together
MIN_BYTES = FUSED_MIN_BYTES
_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


class _Kernels:
    """The one-operation kernels, compiled or being compiled: at most one
    per function and dtype (eight)."""

    def __init__(self):
        self._ready = {}
        self._asked = set()
        self._lock = threading.Lock()

    def get(self, name, dtype):
        """The kernel (a `fgrad.compiler.native.NativeFunction`, which keeps
        its machine code alive), or None while it is not compiled (asking
        for it the first time)."""
        key = (name, dtype)
        run = self._ready.get(key)
        if run is not None or key in self._asked:
            return run
        with self._lock:
            if key in self._asked:
                return self._ready.get(key)
            self._asked.add(key)
        compile_as_configured(lambda: self._build(key))
        return self._ready.get(key)

    def _build(self, key):
        name, dtype = key
        spec = KernelSpec([(dtype, "i")], None, [Op(name, [("x", 0)], [dtype], dtype,
                                                       vector=True)],
                          [], [0], False, True)
        self._ready[key] = native_kernel(spec)


def _vector_impl(prim, kernels):
    name, otherwise = prim.name, prim.impl

    def impl(x):
        if x.__class__ is np.ndarray and x.nbytes >= MIN_BYTES and x.dtype in _DTYPES:
            kernel = kernels.get(name, x.dtype)
            if kernel is not None:
                out = np.empty(x.shape, x.dtype)
                kernel.c_function(x.size, x.ravel(), x.size, out)
                # a nan or inf among the values (an argument nan, inf or out
                # of range; the sum of finite values overflowing, rarely):
                # NumPy's own, with the warnings (np.errstate) it gives
                if np.isfinite(out.sum()):
                    return out
        return otherwise(x)
    impl.__name__ = f"vector_{name}"
    return impl


@functools.lru_cache(maxsize=1)
def forward_impls():
    """``{primitive: impl}`` for sin, cos, exp and tanh (see the module's
    docstring), or ``{}`` where kernels cannot be compiled.

    >>> import numpy as np
    >>> impls = forward_impls()
    >>> sorted(p.name for p in impls) in ([], ["cos", "exp", "sin", "tanh"])
    True
    >>> [float(f(np.array([0.0]))[0]) for f in impls.values()] in ([], [1.0, 1.0, 0.0, 0.0])
    True
    """
    if not native_available():
        return {}
    kernels = _Kernels()
    return {p: _vector_impl(p, kernels) for p in (cos_p, exp_p, sin_p, tanh_p)
            if p.name in VECTOR_FUNCTIONS}
