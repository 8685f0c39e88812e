"""Functional indexed updates: ``fgrad.at(x)[idx].set(v)`` returns a new array."""
from .primitives import indexing


class at:
    """Index ``x`` to update it without mutation (JAX's ``x.at[idx]``).

    >>> import numpy as np, fgrad
    >>> x = np.zeros(3)
    >>> fgrad.at(x)[1].set(5.0)
    array([0., 5., 0.])
    >>> fgrad.at(x)[[0, 0]].add(1.0)          # repeated indices accumulate
    array([2., 0., 0.])
    >>> x                                     # the input is untouched
    array([0., 0., 0.])
    """

    __slots__ = ("_x",)

    def __init__(self, x):
        self._x = x

    def __getitem__(self, index):
        return _IndexedUpdate(self._x, index)


class _IndexedUpdate:
    __slots__ = ("_x", "_index")

    def __init__(self, x, index):
        self._x, self._index = x, index

    def set(self, value):
        """A copy of ``x`` with ``x[idx]`` replaced by ``value``."""
        return indexing.set_at(self._x, self._index, value)

    def add(self, value):
        """A copy of ``x`` with ``value`` added at ``idx`` (repeats accumulate)."""
        return indexing.add_at(self._x, self._index, value)

    def multiply(self, value):
        """A copy of ``x`` with ``x[idx]`` multiplied by ``value``."""
        from .primitives.creation import ones_like
        return self._x * indexing.set_at(ones_like(self._x), self._index, value)

    def min(self, value):
        """A copy of ``x`` with ``x[idx]`` replaced by ``minimum(x[idx], value)``.

        Differentiable in ``x`` and ``value`` (ties split the derivative evenly).
        Indices must not repeat.

        >>> import numpy as np, fgrad
        >>> fgrad.at(np.array([1.0, 5.0]))[1].min(2.0)
        array([1., 2.])
        """
        return self._extremum(value, "min")

    def max(self, value):
        """A copy of ``x`` with ``x[idx]`` replaced by ``maximum(x[idx], value)``.

        >>> import numpy as np, fgrad
        >>> fgrad.at(np.array([1.0, 5.0]))[0].max(2.0)
        array([2., 5.])
        """
        return self._extremum(value, "max")

    def _extremum(self, value, which):
        from .primitives import elementwise
        _check_unique(self._index, which)
        current = indexing.getitem(self._x, self._index)
        combine = elementwise.minimum if which == "min" else elementwise.maximum
        return indexing.set_at(self._x, self._index, combine(current, value))


def _check_unique(index, which):
    import numpy as np
    from .core import full_lower
    from .errors import IndexUpdateError
    _, arrays = indexing.parse_index(index)
    if not arrays:
        return
    columns = [np.ravel(c) for c in np.broadcast_arrays(*(np.asarray(full_lower(a))
                                                          for a in arrays))]
    keys = np.stack(columns, axis=1)
    if len(np.unique(keys, axis=0)) < len(keys):
        raise IndexUpdateError(
            f"fgrad.at(x)[idx].{which}(v) got an index that repeats a position; "
            f"repeated positions are not supported by .{which}. Remove the "
            "duplicates (e.g. with numpy.unique), or combine the values for one "
            f"position first with fgrad.numpy.{which}.")
