"""scipy functions over fgrad primitives (the optional extra ``fgrad[scipy]``).

``fgrad.scipy.special``, ``fgrad.scipy.stats``, ``fgrad.scipy.linalg`` and
``fgrad.scipy.integrate`` mirror
their scipy namesakes and differentiate in both modes to any order. Their
implementations call scipy, which runs on the CPU: CuPy arrays use
``cupyx.scipy`` where it has the function, and fail otherwise.
"""
from fgrad.scipy import integrate, linalg, special, stats  # noqa: F401
