"""In-place updates of traced arrays: ``x[idx] = v``, ``x += y``, ``x.sort()``.

A tracer is a name for a value. An in-place update gives the tracer object a
new value (`Tracer.rebind`) and writes no array's data, so the caller's inputs
are never touched, and every holder of the tracer object sees the new value:
what NumPy means for the updated array.

NumPy's update also reaches the arrays that share memory with the one
updated. fgrad follows that for the views basic indexing makes (``y = x[0]``):
writing into ``y`` writes the new row into ``x``, and writing into ``x``
gives ``y`` the new row, through any chain of such views. A view it cannot
make again from a new value of its base (``reshape``, ``transpose``, ``.T``,
``broadcast_to``, ``.real``: whether NumPy's result is a view there depends on
memory layout a traced value does not have) is refused with
`ImmutableArrayError` when it is written into, or when its base is written
into while it is alive: never a silently different result.
"""
import sys as _sys

import numpy as _np

from fgrad.core.errors import ImmutableArrayError
from fgrad.core.trace import Tracer, get_aval, known_value
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import indexing as _indexing
from fgrad.primitives import shape as _shape


def _followable(link):
    """Whether the view ``link`` (a tracer's ``view_of``) is made again by
    indexing a new value of its base (basic indexing)."""
    return link[1] is _indexing.getitem_p


def _fixed_view_message(view_prim):
    return (f"an in-place update would write through a view made by "
            f"'{view_prim.name}' (reshape, transpose, .T, broadcast_to, .real) of a "
            "traced array: NumPy's update would reach the other array, which fgrad "
            "follows only for views made by basic indexing (x[0], x[1:, ::2]). "
            "Take a copy first (y = x.T.copy(); y[idx] = v), or update the array "
            "itself and then view it again (x[idx] = v; y = x.T).")


def _unreachable_base(link):
    """Whether nothing but the view's link holds its base, and that base is
    no view itself: then no one can see the base change, and the view is as
    free to update as a new array (the result of a function that reshapes a
    temporary, as NumPy's ``tile`` returns a new array). A base that is a
    view (``x[None].squeeze(0)``) passes the update on to its own base."""
    return _refs_of_base(link) <= _LINK_ONLY and \
        getattr(link[0], "view_of", None) is None


def _refs_of_base(link):
    base = link[0]
    return _sys.getrefcount(base)


# the count `_unreachable_base` sees for a base its link alone holds, measured
# the same way at import (interpreters count stack references differently)
_LINK_ONLY = _refs_of_base((object(),))


def _live_views(x):
    """``x``'s views that are still alive (dropping the dead links)."""
    refs = getattr(x, "views", None)
    if not refs:
        return []
    live = [v for v in (ref() for ref in refs) if v is not None]
    if len(live) < len(refs):
        refs[:] = [ref for ref in refs if ref() is not None]
    return live


def _check_views(x):
    for view in _live_views(x):
        link = view.view_of
        if link[0] is x:
            if not _followable(link):
                raise ImmutableArrayError(_fixed_view_message(link[1]))
            _check_views(view)


def _refresh_views(x):
    # each live view of x is made again from x's new value
    for view in _live_views(x):
        link = view.view_of
        if link[0] is x:
            view.rebind(_indexing.getitem_p.bind(x, **link[2]))
            _refresh_views(view)


def update(x, new):
    """Give the tracer ``x`` the whole new value ``new`` (same shape and
    dtype), and carry the update to the arrays that share its memory in NumPy:
    the bases ``x`` is a view of, and their live views."""
    root = x
    link = getattr(root, "view_of", None)
    while link is not None:
        if _unreachable_base(link):
            del root.view_of
            break
        if not _followable(link):
            raise ImmutableArrayError(_fixed_view_message(link[1]))
        base = link[0]
        new = _indexing.set_p.bind(base, new, **link[2])
        root, link = base, getattr(base, "view_of", None)
    _check_views(root)              # refuse before anything is rebound
    root.rebind(new)
    _refresh_views(root)


def _cast_for_update(value, dtype):
    # NumPy casts what is written into an array to the array's dtype
    if get_aval(value).dtype == dtype:
        return value
    return _ew.convert_element_type(value, dtype)


def _mask_update(x, index, value):
    """``where(mask, value, x)`` for ``x[mask] = value`` when ``value`` is one
    value per trailing position: the same result as NumPy's without the
    mask's count of True entries, so it also works under jit and vmap."""
    if isinstance(index, (Tracer, _np.ndarray, _np.bool_, bool)):
        mask = get_aval(index)
        x_aval, v_aval = get_aval(x), get_aval(value)
        if mask.dtype == _np.bool_ and mask.ndim == 0 and v_aval.ndim == x_aval.ndim + 1 \
                and v_aval.shape[0] in (0, 1):
            # x[True] = v and x[False] = v: v has a leading axis of one row or
            # none (what x[True] and x[False] read, as apply_where writes back)
            if v_aval.shape[0] == 0:
                return x
            value = _shape.reshape(value, v_aval.shape[1:])
            v_aval = get_aval(value)
        if mask.dtype == _np.bool_ and mask.ndim <= x_aval.ndim \
                and mask.shape == x_aval.shape[:mask.ndim] \
                and v_aval.ndim <= x_aval.ndim - mask.ndim:
            mask = _shape.reshape(index, mask.shape + (1,) * (x_aval.ndim - mask.ndim))
            return _ew.where(mask, _cast_for_update(value, x_aval.dtype), x)
    return None


def _whole_mask_update(x, index, value):
    """``value`` in ``x``'s shape for ``x[mask] = value`` where ``mask`` is known
    (a NumPy array, or a value of eager ``grad``) to select every position: the
    result does not read ``x``, so no cotangent flows back to it. Code that
    computes a value it cannot use (scikit-learn's variance update divides 0 by
    0 on a first batch) and replaces it whole this way keeps the NaN out of the
    derivative, as it keeps it out of the value."""
    mask = known_value(index) if isinstance(index, Tracer) else index
    if not (isinstance(mask, _np.ndarray) and mask.dtype == _np.bool_ and mask.ndim > 0
            and mask.shape == get_aval(x).shape[:mask.ndim] and mask.all()):
        return None
    aval = get_aval(x)
    value = _shape.broadcast_to(value, (mask.size,) + aval.shape[mask.ndim:])
    return _shape.reshape(_cast_for_update(value, aval.dtype), aval.shape)


def setitem(x, index, value):
    """``x[index] = value`` on a tracer: ``x`` (and what shares its memory in
    NumPy) takes the updated value."""
    new = _whole_mask_update(x, index, value)
    if new is None:
        new = _mask_update(x, index, value)
    if new is None:
        new = _indexing.set_at(x, index, _cast_for_update(value, get_aval(x).dtype))
    update(x, new)


def inplace_operator(fn, symbol):
    """The method of ``x <symbol>= y``: ``x`` takes the value of ``fn(x, y)``,
    cast to ``x``'s dtype as NumPy's in-place operators cast (``same_kind``)."""
    def method(self, other):
        new = fn(self, other)
        aval, new_aval = get_aval(self), get_aval(new)
        if new_aval.shape != aval.shape:
            raise ImmutableArrayError(
                f"x {symbol}= y would change x's shape from {aval.shape} to "
                f"{new_aval.shape}: an in-place operator keeps the shape of its left "
                f"operand, as in NumPy. Write x = x {symbol} y to make a new array.")
        if new_aval.dtype != aval.dtype:
            if not _np.can_cast(new_aval.dtype, aval.dtype, "same_kind"):
                raise ImmutableArrayError(
                    f"x {symbol}= y would store a {new_aval.dtype} result in x, a "
                    f"{aval.dtype} array, which NumPy refuses (casting rule "
                    f"'same_kind'). Write x = x {symbol} y for a {new_aval.dtype} "
                    "result, or convert y first.")
            new = _ew.convert_element_type(new, aval.dtype)
        update(self, new)
        return self
    method.__name__ = f"__i{fn.__name__}__"
    return method
