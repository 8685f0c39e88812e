"""Structured control flow that `jit` can stage: the public face of
`fgrad.transforms.lax`.

>>> import fgrad
>>> float(fgrad.lax.fori_loop(0, 3, lambda i, acc: acc + i, 0.0))
3.0
"""
from fgrad.transforms.lax import cond as cond
from fgrad.transforms.lax import fori_loop as fori_loop
from fgrad.transforms.lax import scan as scan
from fgrad.transforms.lax import switch as switch
from fgrad.transforms.lax import while_loop as while_loop

__all__ = [
    "cond",
    "switch",
    "while_loop",
    "fori_loop",
    "scan",
]
