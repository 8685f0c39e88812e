"""scipy functions over fgrad primitives (the optional extra ``fgrad[scipy]``).

``fgrad.scipy.special``, ``fgrad.scipy.stats`` and ``fgrad.scipy.linalg`` mirror
their scipy namesakes and differentiate in both modes to any order. Their
implementations call scipy, which runs on the CPU: CuPy arrays use
``cupyx.scipy`` where it has the function, and fail otherwise.
"""
from fgrad.scipy import linalg, special, stats  # noqa: F401
