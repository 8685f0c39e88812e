"""Pytrees: nested containers of arrays, flattened to a list of leaves and a treedef.

Every transformation flattens its arguments on entry and unflattens its results on
exit, so `tree_flatten` of a small tuple sits on the hot path of every `grad` call.
A treedef is a nested tuple of ``(node, aux_data, children)`` records with ``None``
for a leaf: hashing and ``==`` then run as C tuple operations, which matters because
`jit` keys its cache on treedefs.
"""

from collections import OrderedDict

__all__ = [
    "PyTreeDef", "broadcast_prefix", "register_pytree_node", "tree_flatten",
    "tree_leaves", "tree_map", "tree_structure", "tree_unflatten",
]


class _Node:
    """How one container type is taken apart, rebuilt, printed and addressed."""

    __slots__ = ("type", "flatten", "unflatten", "show", "entry")

    def __init__(self, type_, flatten, unflatten, show=None, entry=None):
        self.type, self.flatten, self.unflatten = type_, flatten, unflatten
        self.show = show or (lambda aux, kids: _show_custom(type_, aux, kids))
        self.entry = entry or (lambda aux, i: f"[{i}]")


def _show_custom(type_, aux, kids):
    return type_.__name__ + ("" if aux is None else f"[{aux!r}]") + f"({', '.join(kids)})"


def _flatten_dict(d):
    try:
        keys = sorted(d)
    except TypeError:
        # Keys of mixed, unorderable types: insertion order is the only order left.
        keys = list(d)
    return [d[k] for k in keys], tuple(keys)


def _show_items(keys, kids):
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(keys, kids)) + "}"


def _show_tuple(aux, kids):
    return f"({kids[0]},)" if len(kids) == 1 else f"({', '.join(kids)})"


def _show_namedtuple(cls, kids):
    return f"{cls.__name__}({', '.join(f'{f}={k}' for f, k in zip(cls._fields, kids))})"


# The only module-level state: registered node types, keyed by exact type so the
# lookup is one dict probe. Subclasses are leaves unless registered themselves.
_registry = {
    tuple: _Node(tuple, lambda t: (t, None), lambda aux, kids: tuple(kids), _show_tuple),
    list: _Node(list, lambda t: (t, None), lambda aux, kids: list(kids),
                lambda aux, kids: f"[{', '.join(kids)}]"),
    dict: _Node(dict, _flatten_dict, lambda keys, kids: dict(zip(keys, kids)),
                _show_items, lambda keys, i: f"[{keys[i]!r}]"),
    OrderedDict: _Node(OrderedDict, lambda d: (list(d.values()), tuple(d)),
                       lambda keys, kids: OrderedDict(zip(keys, kids)),
                       lambda keys, kids: f"OrderedDict({_show_items(keys, kids)})",
                       lambda keys, i: f"[{keys[i]!r}]"),
    type(None): _Node(type(None), lambda n: ((), None), lambda aux, kids: None,
                      lambda aux, kids: "None"),
}

# Namedtuples are recognised structurally (a tuple subclass with `_fields`) rather
# than registered one class at a time; the class itself is the aux data.
_NAMEDTUPLE = _Node(tuple, lambda t: (t, type(t)), lambda cls, kids: cls(*kids),
                    _show_namedtuple, lambda cls, i: f".{cls._fields[i]}")


def _flatten_node(node, x, is_leaf, leaves):
    children, aux = node.flatten(x)
    records = []
    # Leaf children are handled inline rather than by recursion: most children are
    # arrays, and a Python call per leaf would dominate the cost of small trees.
    for c in children:
        if is_leaf is not None and is_leaf(c):
            leaves.append(c)
            records.append(None)
            continue
        sub = _registry.get(type(c))
        if sub is None and isinstance(c, tuple) and hasattr(c, "_fields"):
            sub = _NAMEDTUPLE
        if sub is None:
            leaves.append(c)
            records.append(None)
        else:
            records.append(_flatten_node(sub, c, is_leaf, leaves))
    return (node, aux, tuple(records))


def _unflatten(record, leaves):
    node, aux, kids = record
    return node.unflatten(aux, [next(leaves) if k is None else _unflatten(k, leaves) for k in kids])


def _show(record):
    if record is None:
        return "*"
    node, aux, kids = record
    return node.show(aux, [_show(k) for k in kids])


class _Mismatch(Exception):
    """Internal: where and how a tree departs from a treedef; callers word the error."""


def _node_of(x):
    node = _registry.get(type(x))
    if node is None and isinstance(x, tuple) and hasattr(x, "_fields"):
        node = _NAMEDTUPLE
    return node


def _flatten_up_to(record, tree, out, path):
    if record is None:
        out.append(tree)
        return
    node, aux, kids = record
    where = "".join(path) or "the root"
    actual = _node_of(tree)
    if actual is not node:
        got = "a leaf" if actual is None else "a node"
        raise _Mismatch(f"at {where}: expected {_show(record)}, got {got} of type "
                        f"{type(tree).__name__}")
    children, tree_aux = node.flatten(tree)
    children = list(children)
    if tree_aux != aux or len(children) != len(kids):
        raise _Mismatch(f"at {where}: expected {_show(record)}, got "
                        f"{_show((node, tree_aux, (None,) * len(children)))}")
    for i, (k, c) in enumerate(zip(kids, children)):
        _flatten_up_to(k, c, out, path + [node.entry(aux, i)])


def _subtrees(treedef, tree):
    out = []
    _flatten_up_to(treedef._record, tree, out, [])
    return out


class PyTreeDef:
    """The structure of a pytree, without its leaves: immutable, hashable, comparable.

    >>> leaves, treedef = tree_flatten({"a": 1, "b": (2, 3)})
    >>> treedef
    PyTreeDef({'a': *, 'b': (*, *)})
    >>> treedef.num_leaves
    3
    >>> treedef.unflatten([10, 20, 30])
    {'a': 10, 'b': (20, 30)}
    """

    # Read-only by convention of the underscore and by `num_leaves` being a property:
    # a __setattr__ guard would cost a slow object.__setattr__ on every flatten.
    __slots__ = ("_record", "_num_leaves", "_hash")

    def __init__(self, record, num_leaves):
        self._record = record
        self._num_leaves = num_leaves
        self._hash = None

    @property
    def num_leaves(self):
        return self._num_leaves

    def __eq__(self, other):
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return self._num_leaves == other._num_leaves and self._record == other._record

    def __hash__(self):
        if self._hash is None:
            try:
                self._hash = hash(self._record)
            except TypeError as e:
                raise TypeError(
                    f"{self!r} is not hashable because a node's aux_data is not; make the "
                    "flatten_fn given to register_pytree_node return hashable aux_data "
                    "(a tuple rather than a list, for example)") from e
        return self._hash

    def __repr__(self):
        return f"PyTreeDef({_show(self._record)})"

    def unflatten(self, leaves):
        """Build a tree of this structure from `leaves` (see `tree_unflatten`).

        >>> tree_structure([1, (2, 3)]).unflatten("abc")
        ['a', ('b', 'c')]
        """
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"{self!r} expects {self.num_leaves} leaves, got {len(leaves)}")
        if self._record is None:
            return leaves[0]
        return _unflatten(self._record, iter(leaves))

    def flatten_up_to(self, tree):
        """The subtrees of `tree` sitting where this structure has leaves.

        Raises ValueError if `tree` does not have this structure down to those leaves.

        >>> tree_structure((1, 2)).flatten_up_to(([3, 4], {"a": 5}))
        [[3, 4], {'a': 5}]
        """
        try:
            return _subtrees(self, tree)
        except _Mismatch as e:
            raise ValueError(f"{tree_structure(tree)!r} does not match {self!r}: {e}") from None


def tree_flatten(tree, is_leaf=None):
    """Split `tree` into a list of leaves and the `PyTreeDef` that rebuilds it.

    Leaves come in a fixed order: sequences in order, dicts by sorted key. `is_leaf`,
    if given, is called on every subtree; where it returns True that subtree is a leaf.

    >>> tree_flatten({"b": [1, 2], "a": None, "c": 3})
    ([1, 2, 3], PyTreeDef({'a': None, 'b': [*, *], 'c': *}))
    >>> tree_flatten([(1, 2), 3], is_leaf=lambda x: isinstance(x, tuple))
    ([(1, 2), 3], PyTreeDef([*, *]))
    """
    leaves = []
    if is_leaf is not None and is_leaf(tree):
        node = None
    else:
        node = _node_of(tree)
    if node is None:
        return [tree], PyTreeDef(None, 1)
    record = _flatten_node(node, tree, is_leaf, leaves)
    return leaves, PyTreeDef(record, len(leaves))


def tree_unflatten(treedef, leaves):
    """Rebuild a tree from its structure and an iterable of leaves.

    >>> _, treedef = tree_flatten({"x": 0, "y": [0, 0]})
    >>> tree_unflatten(treedef, [1, 2, 3])
    {'x': 1, 'y': [2, 3]}
    """
    if not isinstance(treedef, PyTreeDef):
        raise TypeError(f"tree_unflatten(treedef, leaves) takes a PyTreeDef first, got "
                        f"{type(treedef).__name__}; check the argument order")
    return treedef.unflatten(leaves)


def tree_leaves(tree, is_leaf=None):
    """The leaves of `tree`, in flattening order.

    >>> tree_leaves([1, {"b": 3, "a": 2}, None])
    [1, 2, 3]
    """
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    """The `PyTreeDef` of `tree`.

    >>> tree_structure((1, [2, 3]))
    PyTreeDef((*, [*, *]))
    """
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f, tree, *rest, is_leaf=None):
    """Apply `f` leafwise to `tree` and the matching leaves of every tree in `rest`.

    Each tree in `rest` must have the structure of `tree` (it may hold a whole subtree
    where `tree` has a leaf; `f` then receives that subtree). `is_leaf` applies to
    `tree` only. The result has the structure of `tree`.

    >>> tree_map(lambda x: x * 10, {"a": 1, "b": (2, 3)})
    {'a': 10, 'b': (20, 30)}
    >>> tree_map(lambda x, y: x + y, [1, 2], [10, 20])
    [11, 22]
    """
    leaves, treedef = tree_flatten(tree, is_leaf)
    if not rest:
        return treedef.unflatten([f(x) for x in leaves])
    others = []
    for i, other in enumerate(rest, 1):
        try:
            others.append(_subtrees(treedef, other))
        except _Mismatch as e:
            raise ValueError(f"tree_map: the first tree has structure {treedef!r} but "
                             f"extra tree {i} has structure {tree_structure(other)!r} "
                             f"({e})") from None
    return treedef.unflatten([f(*xs) for xs in zip(leaves, *others)])


def broadcast_prefix(prefix_tree, full_tree, is_leaf=None):
    """For each leaf of `full_tree`, the leaf of `prefix_tree` that covers it.

    `prefix_tree` must match the top of `full_tree`; each of its leaves is repeated
    once per leaf of the subtree it covers. ``None`` in `prefix_tree` counts as a leaf
    (not as an empty node), so that ``in_axes=(None, 0)`` can mean "not mapped".

    >>> broadcast_prefix((None, 0), ([1, 2], {"a": 3, "b": 4}))
    [None, None, 0, 0]
    """
    def prefix_leaf(x):
        return x is None or (is_leaf is not None and is_leaf(x))

    prefix_leaves, prefix_def = tree_flatten(prefix_tree, prefix_leaf)
    try:
        subtrees = _subtrees(prefix_def, full_tree)
    except _Mismatch as e:
        raise ValueError(f"broadcast_prefix: {prefix_def!r} is not a prefix of "
                         f"{tree_structure(full_tree)!r} ({e})") from None
    result = []
    for p, sub in zip(prefix_leaves, subtrees):
        result.extend([p] * len(tree_leaves(sub)))
    return result


def register_pytree_node(nodetype, flatten_fn, unflatten_fn):
    """Make instances of exactly `nodetype` pytree nodes rather than leaves.

    ``flatten_fn(x)`` returns ``(children, aux_data)``: an iterable of child trees
    and hashable, ``==``-comparable data that rebuilds `x` together with the
    children; ``unflatten_fn(aux_data, children)`` returns the rebuilt object.
    Subclasses of `nodetype` are not covered; register them separately.

    >>> class Pair:
    ...     def __init__(self, a, b):
    ...         self.a, self.b = a, b
    >>> register_pytree_node(Pair, lambda p: ((p.a, p.b), None),
    ...                      lambda aux, kids: Pair(*kids))
    >>> tree_leaves(Pair(1, [2, 3]))
    [1, 2, 3]
    """
    if not isinstance(nodetype, type):
        raise TypeError(f"register_pytree_node takes a class, got {nodetype!r}")
    if not (callable(flatten_fn) and callable(unflatten_fn)):
        raise TypeError("register_pytree_node needs callable flatten_fn and unflatten_fn")
    if nodetype in _registry:
        raise ValueError(f"{nodetype.__module__}.{nodetype.__qualname__} is already "
                         "registered as a pytree node; register each type only once")
    _registry[nodetype] = _Node(nodetype, flatten_fn, unflatten_fn)
