"""Every primitive fgrad knows, one module per family, all rules beside each one.

Importing this package fills `fgrad.core.primitive_table`. Each module defines
``<name>_p`` primitives and, right under each, its impl, abstract, vjp and jvp
rules; the plain function of the same name (``sin(x)``) binds the primitive.
"""
from . import elementwise, reductions, shape, indexing, products, creation  # noqa: F401
from . import control  # noqa: F401
from . import nn  # noqa: F401
from . import einsum, fft, linalg, special  # noqa: F401,E402
