"""Layer 5, the transformations users call.

- `differentiation`: grad, value_and_grad, vjp, jvp, linearize, jacfwd, jacrev,
  hessian, on the interpreters of layer 3.
- `vmap`, `jit` (with `make_graph` and `checkpoint`), `custom` (custom_vjp,
  custom_jvp), `extend` (user primitives: primitive, defvjp, defjvp, defbatch).
- `control_flow` (the cond, while and scan primitives) and `lax` (the functions
  that stage them).

Importing this package registers the transformations that lower layers call
back into (`fgrad.interpreters.callbacks`).
"""
from fgrad.interpreters import callbacks as _callbacks
from fgrad.transforms import control_flow, custom, extend, jit, lax  # noqa: F401
from fgrad.transforms import linear_solve, roots  # noqa: F401
from fgrad.transforms.differentiation import vjp as _vjp
from fgrad.transforms.vmap import vmap as _vmap

_callbacks.register(vjp=_vjp, vmap=_vmap)
