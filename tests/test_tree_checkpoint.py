"""fgrad.tree.save / load: round trips of parameters and optimizer state, node
types restored with like=, and the errors a mismatched or foreign file raises."""
import os

import numpy as np
import pytest

import fgrad
from fgrad import optim
from fgrad.errors import CheckpointError, CheckpointMismatchError
from fgrad.tree import load, save, tree_leaves, tree_structure

PARAMS = {"dense": [{"w": np.arange(6.0).reshape(2, 3), "b": np.zeros(3, np.float32)}],
          "scale": np.array(2, np.int64), "extra": (None, np.array([True, False])),
          3: np.array(1.5 + 2j)}


def _same(a, b):
    assert tree_structure(a) == tree_structure(b)
    for x, y in zip(tree_leaves(a), tree_leaves(b), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(x, y)


def test_plain_containers_round_trip_without_like(tmp_path):
    path = tmp_path / "params.npz"
    save(path, PARAMS)
    _same(load(path), PARAMS)
    assert not os.path.exists(f"{path}.tmp")


def test_a_scalar_and_an_empty_tree(tmp_path):
    save(tmp_path / "a.npz", 1.5)
    assert load(tmp_path / "a.npz") == 1.5 and load(tmp_path / "a.npz", like=0.0) == 1.5
    assert type(load(tmp_path / "a.npz", like=0.0)) is float
    save(tmp_path / "b.npz", {"x": None, "y": []})
    assert load(tmp_path / "b.npz") == {"x": None, "y": []}


@pytest.mark.parametrize("opt", [
    optim.adam(0.1), optim.chain(optim.clip_by_global_norm(1.0), optim.sgd(0.1, 0.9)),
    optim.inject_hyperparams(optim.adamw)(optim.cosine_decay_schedule(0.1, 10)),
    optim.MultiSteps(optim.lion(0.1), 2).gradient_transformation(),
    optim.multi_transform({"a": optim.adam(0.1), "s": optim.sgd(0.1)},
                          {"dense": "a", "extra": "s", "scale": "s", 3: "s"}),
])
def test_optimizer_state_round_trips_with_like(tmp_path, opt):
    params = {"dense": PARAMS["dense"], "extra": (None, np.ones(2)), "scale": np.ones(()),
              3: np.zeros(2)}
    state = opt.init(params)
    grads = fgrad.tree.tree_map(np.ones_like, params)
    _, state = opt.update(grads, state, params)
    save(tmp_path / "state.npz", {"params": params, "opt": state})
    loaded = load(tmp_path / "state.npz", like={"params": params, "opt": opt.init(params)})
    _same(loaded, {"params": params, "opt": state})
    # the restored state drives the optimizer as the original does
    _same(opt.update(grads, loaded["opt"], params), opt.update(grads, state, params))


def test_without_like_a_namedtuple_comes_back_a_tuple(tmp_path):
    state = optim.adam(0.1).init({"w": np.ones(2)})
    save(tmp_path / "s.npz", state)
    loaded = load(tmp_path / "s.npz")
    assert type(loaded[0]) is tuple and int(loaded[0][0]) == 0


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


fgrad.tree.register_pytree_node(Pair, lambda p: ((p.a, p.b), None),
                                lambda aux, kids: Pair(*kids))


def test_registered_nodes_are_restored_with_like(tmp_path):
    save(tmp_path / "p.npz", [Pair(np.ones(2), {"c": np.zeros(1)})])
    loaded = load(tmp_path / "p.npz", like=[Pair(np.zeros(2), {"c": np.ones(1)})])
    assert isinstance(loaded[0], Pair)
    np.testing.assert_array_equal(loaded[0].a, [1.0, 1.0])
    assert type(load(tmp_path / "p.npz")[0]) is tuple
    with pytest.raises(CheckpointMismatchError, match=r"at \[0\] the file holds a "
                       r"\S*test_tree_checkpoint.Pair of 2 children where like= has a tuple of 2"):
        load(tmp_path / "p.npz", like=[(np.zeros(2), {"c": np.ones(1)})])


@pytest.mark.parametrize("like, message", [
    ({**PARAMS, "scale": np.array(2, np.int32)},
     r"at \['scale'\] the file holds int64\[\] where like= has int32\[\]"),
    ({**PARAMS, "dense": [{"w": np.zeros((3, 2)), "b": np.zeros(3, np.float32)}]},
     r"at \['dense'\]\[0\]\['w'\] the file holds float64\[2, 3\] where like= has "
     r"float64\[3, 2\]"),
    ({**PARAMS, "dense": PARAMS["dense"] * 2},
     r"at \['dense'\] the file holds a list of 1 where like= has a list of 2"),
    ({k: v for k, v in PARAMS.items() if k != 3},
     r"at the root the file holds a dict with keys \['dense', 'scale', 'extra', 3\] "
     r"where like= has a dict with keys \['dense', 'extra', 'scale'\]"),
    ({**PARAMS, "extra": (np.zeros(1), np.array([True, False]))},
     r"at \['extra'\]\[0\] the file holds None where like= has float64\[1\]"),
    ({**PARAMS, "extra": optim.EmptyState()},
     r"at \['extra'\] the file holds a tuple of 2 where like= has a "
     r"fgrad.optim.base.EmptyState\(\)"),
])
def test_a_mismatch_names_the_place_and_both_sides(tmp_path, like, message):
    save(tmp_path / "params.npz", PARAMS)
    with pytest.raises(CheckpointMismatchError, match=r"fgrad.tree.load\(.*params.npz'\): "
                       + message):
        load(tmp_path / "params.npz", like=like)


def test_what_cannot_be_saved_or_loaded(tmp_path):
    with pytest.raises(CheckpointError, match=r"the leaf at \['f'\] \(function\) is not an "
                                              r"array of numbers"):
        save(tmp_path / "f.npz", {"f": lambda: 0})
    with pytest.raises(CheckpointError, match=r"has the key \(1, 2\); keys must be str"):
        save(tmp_path / "k.npz", {(1, 2): np.ones(1)})
    with pytest.raises(CheckpointError, match=r"the leaf at the root is a traced value; save "
                                              r"outside jit"):
        fgrad.grad(lambda x: save(tmp_path / "t.npz", x) or x)(1.0)
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(CheckpointError, match="was not written by fgrad.tree.save"):
        load(tmp_path / "plain.npz")
