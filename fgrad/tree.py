"""Pytrees: nested tuples, lists, dicts and registered containers of arrays.

The public face of `fgrad.core.tree`, and checkpoints: `save` writes a tree of
arrays to one ``.npz`` file and `load` reads it back.

>>> from fgrad.tree import tree_map
>>> tree_map(lambda x: x * 2, {"a": 1, "b": (2, 3)})
{'a': 2, 'b': (4, 6)}
"""
import json
import os

import numpy as np

from fgrad.core.backend import device_put
from fgrad.core.errors import CheckpointError, CheckpointMismatchError
from fgrad.core.trace import Tracer
from fgrad.core.tree import PyTreeDef as PyTreeDef
from fgrad.core.tree import broadcast_prefix as broadcast_prefix
from fgrad.core.tree import register_pytree_node as register_pytree_node
from fgrad.core.tree import tree_flatten as tree_flatten
from fgrad.core.tree import tree_leaves as tree_leaves
from fgrad.core.tree import tree_map as tree_map
from fgrad.core.tree import tree_structure as tree_structure
from fgrad.core.tree import tree_unflatten as tree_unflatten

__all__ = [
    "PyTreeDef",
    "tree_flatten",
    "tree_unflatten",
    "tree_leaves",
    "tree_structure",
    "tree_map",
    "broadcast_prefix",
    "register_pytree_node",
    "save",
    "load",
]


# ---------------------------------------------------------------------------
# Checkpoints: the leaves as arrays of an .npz file, the structure as JSON
# ---------------------------------------------------------------------------

_FORMAT = "fgrad.tree.save/1"
_STRUCTURE = "__fgrad_tree__"       # the .npz entry holding the structure


def _children(tree):
    """The direct children of a node, and the one-level treedef that rebuilds it."""
    return tree_flatten(tree, is_leaf=lambda child: child is not tree)


def _is_leaf(tree):
    leaves = tree_leaves(tree)
    return len(leaves) == 1 and leaves[0] is tree


def _type_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def _kind(tree):
    """How a node is written: its kind and what else identifies it."""
    if tree is None:
        return ["none"]
    if type(tree) in (dict, list):
        return [type(tree).__name__]
    if type(tree) is tuple:
        return ["tuple"]
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return ["namedtuple", _type_name(type(tree)), list(tree._fields)]
    return ["node", _type_name(type(tree))]


def _dict_keys(tree):
    # the keys in the order tree_flatten visits the values
    return _children({k: k for k in tree})[0]


def _entry(kind, key):
    if kind[0] == "dict":
        return f"[{key!r}]"
    return f".{key}" if kind[0] == "namedtuple" else f"[{key}]"


def _encode(tree, arrays, where):
    """The JSON structure of ``tree``; its leaves go, as NumPy arrays, to ``arrays``."""
    if isinstance(tree, Tracer):
        raise CheckpointError(f"fgrad.tree.save: the leaf at {where or 'the root'} is a "
                              "traced value; save outside jit, grad and vmap")
    if _is_leaf(tree):
        array = np.asarray(device_put(tree, "cpu"))
        if array.dtype == object:
            raise CheckpointError(f"fgrad.tree.save: the leaf at {where or 'the root'} "
                                  f"({type(tree).__name__}) is not an array of numbers; "
                                  "only arrays, scalars and strings are saved (no pickle)")
        arrays[f"leaf_{len(arrays)}"] = array
        return ["leaf", len(arrays) - 1]
    kind = _kind(tree)
    children, _ = _children(tree)
    keys = _dict_keys(tree) if kind[0] == "dict" else range(len(children))
    if kind[0] == "namedtuple":
        keys = kind[2]
    encoded = []
    for key, child in zip(keys, children):
        if kind[0] == "dict" and not isinstance(key, (str, int, float, bool)):
            raise CheckpointError(f"fgrad.tree.save: the dict at {where or 'the root'} has "
                                  f"the key {key!r}; keys must be str, int, float or bool")
        encoded.append(_encode(child, arrays, where + _entry(kind, key)))
    return kind + [list(keys) if kind[0] == "dict" else None, encoded]


def save(path, tree):
    """Write ``tree`` (dicts, lists, tuples, None, namedtuples, registered nodes,
    with arrays or scalars as leaves) to the ``.npz`` file ``path``, without
    pickle. The file is written next to ``path`` and then renamed, so a crash
    never leaves half a checkpoint. Read it back with `load`.

    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
    >>> save(path, {"w": np.ones(2), "b": (np.float32(0.5), None)})
    >>> load(path)
    {'b': (array(0.5, dtype=float32), None), 'w': array([1., 1.])}
    """
    arrays = {}
    structure = {"format": _FORMAT, "tree": _encode(tree, arrays, "")}
    arrays[_STRUCTURE] = np.array(json.dumps(structure))
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)


def _describe_file(node, arrays):
    kind = node[0]
    if kind == "leaf":
        return _describe_array(arrays[f"leaf_{node[1]}"])
    if kind == "none":
        return "None"
    if kind == "dict":
        return f"a dict with keys {node[1]}"
    if kind == "namedtuple":
        return f"a {node[1]}({', '.join(node[2])})"
    if kind == "node":
        return f"a {node[1]} of {len(node[-1])} children"
    return f"a {kind} of {len(node[-1])}"


def _describe_like(tree):
    if _is_leaf(tree):
        return _describe_array(np.asarray(device_put(tree, "cpu")))
    kind = _kind(tree)
    children, _ = _children(tree)
    if kind[0] == "dict":
        return f"a dict with keys {list(_dict_keys(tree))}"
    return _describe_file(kind + [None, children], {})


def _describe_array(array):
    return f"{array.dtype}{list(array.shape)}"


def _decode(node, arrays):
    kind, children = node[0], node[-1]
    if kind == "leaf":
        return arrays[f"leaf_{children}"]
    if kind == "none":
        return None
    values = [_decode(child, arrays) for child in children]
    if kind == "dict":
        return dict(zip(node[1], values))
    return values if kind == "list" else tuple(values)


def _restore(node, like, arrays, where, fname):
    def mismatch(what):
        return CheckpointMismatchError(f"{fname}: at {where or 'the root'} the file holds "
                                       f"{what} where like= has {_describe_like(like)}")
    if _is_leaf(like):
        if node[0] != "leaf":
            raise mismatch(_describe_file(node, arrays))
        array = arrays[f"leaf_{node[1]}"]
        expected = np.asarray(device_put(like, "cpu"))
        if array.shape != expected.shape or array.dtype != expected.dtype:
            raise mismatch(_describe_array(array))
        # a Python number comes back a Python number, an array an array
        return type(like)(array) if isinstance(like, (bool, int, float, complex)) else array
    kind = _kind(like)
    children, one_level = _children(like)
    keys = list(_dict_keys(like)) if kind[0] == "dict" else None
    if node[:len(kind)] != kind or len(node[-1]) != len(children) or \
            (keys is not None and node[1] != keys):
        raise mismatch(_describe_file(node, arrays))
    names = keys if keys is not None else (kind[2] if kind[0] == "namedtuple"
                                           else range(len(children)))
    restored = [_restore(n, c, arrays, where + _entry(kind, key), fname)
                for n, c, key in zip(node[-1], children, names)]
    return one_level.unflatten(restored)


def load(path, like=None):
    """Read a tree written by `save`. Without ``like``, dicts, lists and None come
    back as they were and every other node (a namedtuple, a registered type) as
    a tuple of its children. With ``like`` (a tree of the expected structure,
    such as freshly initialised parameters and optimizer state), the result has
    ``like``'s node types, and `CheckpointMismatchError` names the first place
    where the file's structure, shapes or dtypes differ from it.

    >>> import numpy as np, tempfile, os, fgrad
    >>> path = os.path.join(tempfile.mkdtemp(), "opt.npz")
    >>> opt = fgrad.optim.adam(0.1)
    >>> state = opt.init({"w": np.zeros(2)})
    >>> save(path, state)
    >>> type(load(path, like=state)[0]).__name__
    'ScaleByAdamState'
    >>> load(path, like=opt.init({"w": np.zeros(3)}))
    Traceback (most recent call last):
    ...
    fgrad.errors.CheckpointMismatchError: fgrad.tree.load(...): at [0].mu['w']
    the file holds float64[2] where like= has float64[3]
    """
    fname = f"fgrad.tree.load({os.fspath(path)!r})"
    with np.load(path, allow_pickle=False) as data:
        if _STRUCTURE not in data.files:
            raise CheckpointError(f"{fname}: the file was not written by fgrad.tree.save "
                                  f"(no {_STRUCTURE!r} entry)")
        structure = json.loads(str(data[_STRUCTURE]))
        arrays = {name: data[name] for name in data.files if name != _STRUCTURE}
    if structure.get("format") != _FORMAT:
        raise CheckpointError(f"{fname}: the file has the format {structure.get('format')!r}; "
                              f"this fgrad reads {_FORMAT!r}")
    if like is None:
        return _decode(structure["tree"], arrays)
    return _restore(structure["tree"], like, arrays, "", fname)
