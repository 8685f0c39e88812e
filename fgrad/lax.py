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
from fgrad.transforms.linear_solve import custom_linear_solve as custom_linear_solve
from fgrad.transforms.roots import custom_root as custom_root
from fgrad.transforms.roots import dense_solve as dense_solve
from fgrad.transforms.roots import fixed_point as fixed_point

__all__ = [
    "cond",
    "switch",
    "while_loop",
    "fori_loop",
    "scan",
    "custom_linear_solve",
    "custom_root",
    "fixed_point",
    "dense_solve",
]
