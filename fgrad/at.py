"""Functional indexed updates: ``fgrad.at(x)[idx].set(v)`` returns a new array."""
from fgrad.primitives import indexing
from fgrad.primitives.creation import ones_like


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
        return self._x * indexing.set_at(ones_like(self._x), self._index, value)

    def min(self, value):
        """A copy of ``x`` with ``x[idx]`` replaced by ``minimum(x[idx], value)``.

        A position the index repeats takes the minimum of all its values, as
        ``numpy.minimum.at`` does. Differentiable in ``x`` and ``value``: the
        derivative at a position is split evenly among ``x``'s entry and the
        values that equal the result there (ties share, as in `fgrad.numpy.min`).

        >>> import numpy as np, fgrad
        >>> fgrad.at(np.array([1.0, 5.0]))[1].min(2.0)
        array([1., 2.])
        >>> fgrad.at(np.array([1.0, 5.0]))[[1, 1]].min(np.array([4.0, 3.0]))
        array([1., 3.])
        """
        return indexing.extremum_at(self._x, self._index, value, "min")

    def max(self, value):
        """A copy of ``x`` with ``x[idx]`` replaced by ``maximum(x[idx], value)``
        (repeated positions and derivatives as in `min`).

        >>> import numpy as np, fgrad
        >>> fgrad.at(np.array([1.0, 5.0]))[0].max(2.0)
        array([2., 5.])
        """
        return indexing.extremum_at(self._x, self._index, value, "max")
