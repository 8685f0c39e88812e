from collections import OrderedDict, namedtuple

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fgrad.tree import (broadcast_prefix, register_pytree_node, tree_flatten,
                        tree_leaves, tree_map, tree_structure, tree_unflatten)

Point = namedtuple("Point", ["x", "y"])
Triple = namedtuple("Triple", ["a", "b", "c"])


def _namedtuples(children):
    return st.one_of(st.builds(Point, children, children),
                     st.builds(Triple, children, children, children))


leaf_values = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3))
pytrees = st.recursive(
    st.one_of(leaf_values, st.none()),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=3), children, max_size=4),
        st.dictionaries(st.text(max_size=3), children, max_size=4).map(
            lambda d: OrderedDict(reversed(list(d.items())))),
        _namedtuples(children),
    ),
    max_leaves=20,
)


# ---- round trips -------------------------------------------------------------------

@given(pytrees)
def test_round_trip(tree):
    leaves, treedef = tree_flatten(tree)
    rebuilt = tree_unflatten(treedef, leaves)
    assert rebuilt == tree
    assert tree_structure(rebuilt) == treedef
    assert all(a is b for a, b in zip(tree_leaves(rebuilt), leaves))
    assert treedef.num_leaves == len(leaves)


@given(pytrees)
def test_treedef_equal_and_hash_for_equal_structure(tree):
    other = tree_map(lambda x: object(), tree)
    assert tree_structure(other) == tree_structure(tree)
    assert hash(tree_structure(other)) == hash(tree_structure(tree))


def test_round_trip_with_arrays_keeps_identity():
    a, b = np.ones(3), np.zeros((2, 2))
    leaves, treedef = tree_flatten({"w": a, "b": (b, None)})
    assert leaves[0] is b and leaves[1] is a
    rebuilt = treedef.unflatten(leaves)
    assert rebuilt["w"] is a and rebuilt["b"][0] is b and rebuilt["b"][1] is None


def test_leaf_at_the_root():
    leaves, treedef = tree_flatten(3.0)
    assert leaves == [3.0] and treedef.num_leaves == 1
    assert tree_unflatten(treedef, ["x"]) == "x"
    assert repr(treedef) == "PyTreeDef(*)"


def test_none_and_empty_containers_have_no_leaves():
    for tree in (None, (), [], {}, [None, ()]):
        leaves, treedef = tree_flatten(tree)
        assert leaves == [] and treedef.num_leaves == 0
        assert tree_unflatten(treedef, []) == tree


def test_namedtuple_rebuilt_as_same_class():
    rebuilt = tree_map(lambda v: v + 1, Point(1, Triple(2, 3, 4)))
    assert type(rebuilt) is Point and type(rebuilt.y) is Triple
    assert rebuilt == Point(2, Triple(3, 4, 5))
    assert tree_structure(Point(1, 2)) != tree_structure((1, 2))


def test_other_objects_are_leaves():
    class Box:
        pass

    box, arr = Box(), np.arange(3)
    assert tree_leaves([box, arr, "s", 1j]) == [box, arr, "s", 1j]


# ---- dict ordering -----------------------------------------------------------------

def test_dict_leaves_follow_sorted_keys_and_values_stay_with_keys():
    tree = {"c": 3, "a": 1, "b": 2}
    leaves, treedef = tree_flatten(tree)
    assert leaves == [1, 2, 3]
    rebuilt = tree_unflatten(treedef, ["A", "B", "C"])
    assert rebuilt == {"a": "A", "b": "B", "c": "C"}


def test_dicts_differing_only_in_insertion_order_share_a_treedef():
    first, second = tree_structure({"a": 1, "b": 2}), tree_structure({"b": 2, "a": 1})
    assert first == second and hash(first) == hash(second)


def test_ordered_dict_keeps_insertion_order():
    tree = OrderedDict([("z", 1), ("a", 2)])
    leaves, treedef = tree_flatten(tree)
    assert leaves == [1, 2]
    rebuilt = treedef.unflatten(leaves)
    assert type(rebuilt) is OrderedDict and list(rebuilt) == ["z", "a"]
    assert treedef != tree_structure(OrderedDict([("a", 2), ("z", 1)]))
    assert treedef != tree_structure({"z": 1, "a": 2})


def test_dict_with_unorderable_keys_round_trips():
    tree = {1: "one", "a": "A"}
    leaves, treedef = tree_flatten(tree)
    assert treedef.unflatten(leaves) == tree


# ---- PyTreeDef ---------------------------------------------------------------------

def test_treedef_repr():
    treedef = tree_structure({"b": (1, 2), "a": 0})
    assert repr(treedef) == "PyTreeDef({'a': *, 'b': (*, *)})"
    assert repr(tree_structure([(1,), None, Point(1, 2)])) == \
        "PyTreeDef([(*,), None, Point(x=*, y=*)])"


def test_treedef_distinguishes_structures():
    defs = [tree_structure(t) for t in ((1, 2), [1, 2], (1, (2,)), {"a": 1, "b": 2},
                                        {"a": 1, "c": 2}, (1, None), (1, 2, 3))]
    assert len(set(defs)) == len(defs)
    assert tree_structure((1, 2)) != (1, 2)


def test_treedef_is_read_only_and_usable_as_cache_key():
    treedef = tree_structure((1, 2))
    with pytest.raises(AttributeError):
        treedef.num_leaves = 5
    with pytest.raises(AttributeError):
        treedef.extra = 1
    cache = {treedef: "hit"}
    assert cache[tree_structure(("a", "b"))] == "hit"


def test_unflatten_wrong_leaf_count():
    treedef = tree_structure({"a": 1, "b": (2, 3)})
    with pytest.raises(ValueError, match=r"expects 3 leaves, got 2"):
        tree_unflatten(treedef, [1, 2])
    with pytest.raises(ValueError, match=r"expects 3 leaves, got 4"):
        treedef.unflatten([1, 2, 3, 4])


def test_unflatten_with_swapped_arguments():
    with pytest.raises(TypeError, match="argument order"):
        tree_unflatten([1, 2], tree_structure((1, 2)))


# ---- tree_map ----------------------------------------------------------------------

def test_tree_map_multiple_trees():
    out = tree_map(lambda x, y, z: x + y * z, {"a": 1, "b": [2]}, {"a": 10, "b": [20]},
                   {"b": [3], "a": 2})
    assert out == {"a": 21, "b": [62]}


def test_tree_map_mismatched_structure_names_both():
    with pytest.raises(ValueError, match=r"PyTreeDef\(\(\*, \*\)\).*PyTreeDef\(\(\*, \*, \*\)\)"):
        tree_map(lambda x, y: x, (1, 2), (1, 2, 3))
    with pytest.raises(ValueError, match=r"at \['b'\]: expected \(\*, \*\)"):
        tree_map(lambda x, y: x, {"a": 1, "b": (1, 2)}, {"a": 1, "b": [1, 2]})
    with pytest.raises(ValueError, match=r"\{'a': \*, 'c': \*\}"):
        tree_map(lambda x, y: x, {"a": 1, "b": 2}, {"a": 1, "c": 2})


def test_tree_map_rest_may_hold_subtrees_at_leaves():
    assert tree_map(lambda x, sub: (x, sub), [1], [{"k": 2}]) == [(1, {"k": 2})]


def test_tree_map_is_leaf():
    out = tree_map(lambda x: len(x), [(1, 2), [(3,)]], is_leaf=lambda x: isinstance(x, tuple))
    assert out == [2, [1]]


@given(pytrees)
def test_tree_map_identity(tree):
    assert tree_map(lambda x: x, tree) == tree


# ---- registered user classes -------------------------------------------------------

class Affine:
    def __init__(self, weight, bias, name):
        self.weight, self.bias, self.name = weight, bias, name

    def __eq__(self, other):
        return (type(other) is Affine and (self.weight, self.bias, self.name)
                == (other.weight, other.bias, other.name))


register_pytree_node(Affine, lambda m: ((m.weight, m.bias), m.name),
                     lambda name, kids: Affine(*kids, name))


def test_registered_class_round_trip_and_map():
    model = {"layer": Affine(1.0, [2.0, 3.0], "fc")}
    leaves, treedef = tree_flatten(model)
    assert leaves == [1.0, 2.0, 3.0]
    assert treedef.unflatten(leaves) == model
    assert tree_map(lambda v: v * 2, model) == {"layer": Affine(2.0, [4.0, 6.0], "fc")}
    assert repr(treedef) == "PyTreeDef({'layer': Affine['fc'](*, [*, *])})"


def test_registered_class_aux_data_is_part_of_structure():
    assert tree_structure(Affine(1, 2, "a")) != tree_structure(Affine(1, 2, "b"))
    with pytest.raises(ValueError, match="Affine"):
        tree_map(lambda x, y: x, Affine(1, 2, "a"), Affine(1, 2, "b"))


def test_unhashable_aux_data_error():
    class Holder:
        def __init__(self, x, meta):
            self.x, self.meta = x, meta

    register_pytree_node(Holder, lambda h: ((h.x,), h.meta), lambda meta, kids: Holder(*kids, meta))
    with pytest.raises(TypeError, match="hashable aux_data"):
        hash(tree_structure(Holder(1, ["list", "meta"])))


def test_duplicate_registration():
    with pytest.raises(ValueError, match="Affine is already registered"):
        register_pytree_node(Affine, lambda m: ((), None), lambda aux, kids: None)
    with pytest.raises(ValueError, match="tuple is already registered"):
        register_pytree_node(tuple, lambda t: (t, None), lambda aux, kids: tuple(kids))


def test_register_requires_a_class():
    with pytest.raises(TypeError, match="takes a class"):
        register_pytree_node("Affine", lambda m: ((), None), lambda aux, kids: None)


# ---- broadcast_prefix --------------------------------------------------------------

def test_broadcast_prefix_vmap_style():
    args = (np.ones(3), {"w": np.ones(2), "b": np.ones(1)}, [1, 2, 3])
    assert broadcast_prefix((None, 0, 1), args) == [None, 0, 0, 1, 1, 1]
    assert broadcast_prefix((None, {"w": 0, "b": None}, 1), args) == [None, None, 0, 1, 1, 1]
    assert broadcast_prefix(0, args) == [0] * 6


def test_broadcast_prefix_full_tree_is_its_own_prefix():
    tree = {"a": [1, 2], "b": (3,)}
    assert broadcast_prefix(tree, tree) == tree_leaves(tree)


def test_broadcast_prefix_not_a_prefix():
    with pytest.raises(ValueError, match=r"PyTreeDef\(\(\*, \*\)\) is not a prefix of "
                                         r"PyTreeDef\(\(\*, \*, \*\)\)"):
        broadcast_prefix((0, 0), (1, 2, 3))
    with pytest.raises(ValueError, match=r"at \[1\]: expected \[\*, \*\], got a leaf"):
        broadcast_prefix((0, [0, 1]), (1, 2))


@given(pytrees)
def test_broadcast_prefix_of_root_leaf_repeats(tree):
    assert broadcast_prefix(7, tree) == [7] * len(tree_leaves(tree))
