"""fgrad: grad, vjp, jvp and friends over immutable NumPy and CuPy arrays.

>>> import numpy as np, fgrad, fgrad.numpy as fnp
>>> fgrad.grad(lambda w: fnp.sum(fnp.tanh(w) ** 2))(np.zeros(3))
array([0., 0., 0.])
"""
from . import primitives as _primitives  # noqa: F401  (fills the dispatch table)
from . import numpy as numpy
from . import tree as tree
from . import nn as nn
from . import optim as optim
from .api import grad as grad
from .api import hessian as hessian
from .api import jacfwd as jacfwd
from .api import jacrev as jacrev
from .api import jvp as jvp
from .api import linearize as linearize
from .api import value_and_grad as value_and_grad
from .api import vjp as vjp
from .api import vmap as vmap
from .at import at as at
from ._jit import checkpoint as checkpoint
from ._jit import jit as jit
from ._jit import make_graph as make_graph
from . import lax as lax
from . import debug as debug
from .debug import tap as tap
from .debug import tap_forward as tap_forward
from ._nans import debug_nans as debug_nans
from ._inspect import graph_summary as graph_summary
from ._inspect import residuals as residuals
from .backend import device_put as device_put
from .custom import custom_jvp as custom_jvp
from .custom import custom_vjp as custom_vjp
from .extend import defbatch as defbatch
from .extend import defjvp as defjvp
from .extend import defvjp as defvjp
from .extend import primitive as primitive
from .primitives.creation import stop_gradient as stop_gradient
from . import errors as errors

__version__ = "0.1.0"
