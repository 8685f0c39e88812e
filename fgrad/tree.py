"""Pytrees: nested tuples, lists, dicts and registered containers of arrays.

The public face of `fgrad.core.tree`.

>>> from fgrad.tree import tree_map
>>> tree_map(lambda x: x * 2, {"a": 1, "b": (2, 3)})
{'a': 2, 'b': (4, 6)}
"""
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
]
