"""fgrad: grad, vjp, jvp and friends over immutable NumPy and CuPy arrays.

>>> import numpy as np, fgrad, fgrad.numpy as fnp
>>> fgrad.grad(lambda w: fnp.sum(fnp.tanh(w) ** 2))(np.zeros(3))
array([0., 0., 0.])
"""
import importlib.util as _importlib_util
import os as _os
import sys as _sys


def _primitives_of_a_source_checkout():
    """Make ``fgrad.primitives`` importable from a source checkout.

    Installed, ``primitives/`` is the subpackage ``fgrad/primitives``; in the
    repository it sits beside ``fgrad/`` (so every rule lives in one visible
    place), which is what Python finds when it runs from the checkout's root
    (``python -m fgrad.demo``, ``python -m pytest``). Load it from there under
    its package name.
    """
    here = _os.path.dirname(_os.path.abspath(__file__))
    source = _os.path.join(_os.path.dirname(here), "primitives")
    if "fgrad.primitives" in _sys.modules or _os.path.isdir(_os.path.join(here, "primitives")) \
            or not _os.path.isfile(_os.path.join(source, "__init__.py")):
        return
    spec = _importlib_util.spec_from_file_location(
        "fgrad.primitives", _os.path.join(source, "__init__.py"),
        submodule_search_locations=[source])
    module = _importlib_util.module_from_spec(spec)
    _sys.modules["fgrad.primitives"] = module
    globals()["primitives"] = module         # what a regular import would bind
    spec.loader.exec_module(module)


_primitives_of_a_source_checkout()
# The layers, bottom to top (docs/architecture.md): importing each fills in the
# dispatch table and the callbacks the layers below it need.
from fgrad import primitives as _primitives  # noqa: E402,F401
from fgrad import transforms as _transforms  # noqa: E402,F401

from fgrad import errors as errors  # noqa: E402
from fgrad import tree as tree  # noqa: E402
from fgrad import backend as backend  # noqa: E402
from fgrad import numpy as numpy  # noqa: E402
from fgrad import random as random  # noqa: E402
from fgrad import sparse as sparse  # noqa: E402
from fgrad import nn as nn  # noqa: E402
from fgrad import optim as optim  # noqa: E402
from fgrad import lax as lax  # noqa: E402
from fgrad import ode as ode  # noqa: E402
from fgrad import debug as debug  # noqa: E402
from fgrad.at import at as at  # noqa: E402
from fgrad.backend import device_put as device_put  # noqa: E402
from fgrad.debug import debug_nans as debug_nans  # noqa: E402
from fgrad.debug import tap as tap  # noqa: E402
from fgrad.debug import tap_forward as tap_forward  # noqa: E402
from fgrad.inspection import graph_summary as graph_summary  # noqa: E402
from fgrad.inspection import residuals as residuals  # noqa: E402
from fgrad.core.trace import ShapedArray as ShapeDtypeStruct  # noqa: E402
from fgrad.primitives.callback import pure_callback as pure_callback  # noqa: E402
from fgrad.primitives.creation import stop_gradient as stop_gradient  # noqa: E402
from fgrad.transforms.custom import custom_jvp as custom_jvp  # noqa: E402
from fgrad.transforms.custom import custom_vjp as custom_vjp  # noqa: E402
from fgrad.transforms.differentiation import grad as grad  # noqa: E402
from fgrad.transforms.differentiation import hessian as hessian  # noqa: E402
from fgrad.transforms.differentiation import jacfwd as jacfwd  # noqa: E402
from fgrad.transforms.differentiation import jacrev as jacrev  # noqa: E402
from fgrad.transforms.differentiation import jvp as jvp  # noqa: E402
from fgrad.transforms.differentiation import linearize as linearize  # noqa: E402
from fgrad.transforms.differentiation import value_and_grad as value_and_grad  # noqa: E402
from fgrad.transforms.differentiation import vjp as vjp  # noqa: E402
from fgrad.transforms.extend import defbatch as defbatch  # noqa: E402
from fgrad.transforms.extend import defjvp as defjvp  # noqa: E402
from fgrad.transforms.extend import defvjp as defvjp  # noqa: E402
from fgrad.transforms.extend import primitive as primitive  # noqa: E402
from fgrad.transforms.jit import checkpoint as checkpoint  # noqa: E402
from fgrad.transforms.jit import jit as jit  # noqa: E402
from fgrad.transforms.jit import make_graph as make_graph  # noqa: E402
from fgrad.transforms.vmap import vmap as vmap  # noqa: E402

__version__ = "0.1.0"
