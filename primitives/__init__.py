"""Every primitive fgrad knows, one module per family, all rules beside each one.

Importing this package fills `fgrad.core.trace.primitive_table`. Each module
defines ``<name>_p`` primitives and, right under each, its impl, abstract, vjp,
jvp and batch rules; the plain function of the same name (``sin(x)``) binds the
primitive.

The families depend on each other: a rule of one is written with another's
primitives (the VJP of ``reshape`` reshapes, the VJP of ``sum`` broadcasts, the
VJP of ``broadcast_to`` sums). Those cycles are inherent to rules written with
primitives, so they are allowed inside this package only, and resolved by each
module importing the others at its end, after its own primitives exist. Nothing
here imports from a layer above the core; control-flow primitives, whose rules
stage and transform whole graphs, live with the transformations
(`fgrad.transforms.control_flow`).
"""
from fgrad.primitives import creation, elementwise, indexing, products  # noqa: F401
from fgrad.primitives import reductions, shape  # noqa: F401
from fgrad.primitives import nn  # noqa: F401
from fgrad.primitives import einsum, fft, linalg, special  # noqa: F401
from fgrad.primitives import bessel, eig, float_steps, search  # noqa: F401
from fgrad.primitives import scipy_linalg, scipy_special, sparse  # noqa: F401
from fgrad.primitives import callback  # noqa: F401
from fgrad.primitives import random  # noqa: F401
