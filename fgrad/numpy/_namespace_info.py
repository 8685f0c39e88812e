"""The Array API standard's inspection object: ``fnp.__array_namespace_info__()``.

Libraries written for the standard (scikit-learn, SciPy) ask it which dtypes
and devices the namespace has before they choose a working precision. The
answers are NumPy's: traced values carry NumPy's dtypes and live where their
data does. One capability differs: a traced value's shape may not depend on
its values under ``jit`` or ``vmap``, so data-dependent shapes are reported
as unsupported, which tells such libraries to take their static-shape path.
"""
import numpy as np


class ArrayNamespaceInfo(type(np.__array_namespace_info__())):
    """NumPy's answers, less data-dependent shapes (see the module docstring).

    >>> info = ArrayNamespaceInfo()
    >>> info.default_dtypes()["real floating"], info.capabilities()["boolean indexing"]
    (dtype('float64'), True)
    """

    def capabilities(self):
        return {**super().capabilities(), "data-dependent shapes": False}
