"""fgrad: grad, vjp, jvp and friends over immutable NumPy and CuPy arrays.

>>> import numpy as np, fgrad, fgrad.numpy as fnp
>>> fgrad.grad(lambda w: fnp.sum(fnp.tanh(w) ** 2))(np.zeros(3))
array([0., 0., 0.])
"""
def _primitives_of_a_source_checkout():
    """Make ``fgrad.primitives`` importable from a source checkout.

    Installed, ``primitives/`` is the subpackage ``fgrad/primitives``; in the
    repository it sits beside ``fgrad/`` (so every rule lives in one visible
    place), which is what Python finds when it runs from the checkout's root
    (``python -m fgrad.demo``, ``python -m pytest``). Load it from there under
    its package name.
    """
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.join(os.path.dirname(here), "primitives")
    if "fgrad.primitives" in sys.modules or os.path.isdir(os.path.join(here, "primitives")) \
            or not os.path.isfile(os.path.join(source, "__init__.py")):
        return
    spec = importlib.util.spec_from_file_location(
        "fgrad.primitives", os.path.join(source, "__init__.py"),
        submodule_search_locations=[source])
    module = importlib.util.module_from_spec(spec)
    sys.modules["fgrad.primitives"] = module
    globals()["primitives"] = module         # what a regular import would bind
    spec.loader.exec_module(module)


_primitives_of_a_source_checkout()
from . import primitives as _primitives  # noqa: E402,F401  (fills the dispatch table)
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
