"""Array backends (NumPy, CuPy, registered others): the public face of
`fgrad.core.backend`.

>>> import numpy as np
>>> from fgrad.backend import array_module
>>> array_module(np.ones(2)) is np
True
"""
from fgrad.core.backend import array_module as array_module
from fgrad.core.backend import asarray_on as asarray_on
from fgrad.core.backend import backend_name as backend_name
from fgrad.core.backend import check_same_backend as check_same_backend
from fgrad.core.backend import device_put as device_put
from fgrad.core.backend import elementwise_kernel_maker as elementwise_kernel_maker
from fgrad.core.backend import foreign_backends_active as foreign_backends_active
from fgrad.core.backend import module_of_leaves as module_of_leaves
from fgrad.core.backend import register_backend as register_backend
from fgrad.core.backend import scipy_module as scipy_module
from fgrad.core.backend import unregister_backend as unregister_backend

__all__ = [
    "register_backend",
    "elementwise_kernel_maker",
    "unregister_backend",
    "foreign_backends_active",
    "backend_name",
    "array_module",
    "check_same_backend",
    "scipy_module",
    "module_of_leaves",
    "asarray_on",
    "device_put",
]
