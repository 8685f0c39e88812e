"""The demo, in its short configuration: it trains, beats chance, and writes a
PNG that matplotlib reads back."""
import numpy as np
import pytest

import fgrad
from fgrad.tree import tree_leaves

pytest.importorskip("sklearn")
pytest.importorskip("tqdm")
matplotlib = pytest.importorskip("matplotlib")

from fgrad import demo  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_quick_demo_learns_and_writes_a_png(tmp_path, capsys):
    out = tmp_path / "loss.png"
    result = demo.main(["--quick", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "test accuracy" in printed and "time per step, eager grad" in printed
    assert result["accuracy"] > 0.3, "ten classes: chance is 0.1"
    history = result["history"]
    assert len(history) == 60
    assert sum(history[-10:]) < sum(history[:10])        # the loss fell
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    import matplotlib.image
    image = matplotlib.image.imread(str(out))
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_demo_steps_flag(tmp_path):
    result = demo.main(["--steps", "5", "--out", str(tmp_path / "l.png")])
    assert len(result["history"]) == 5


def test_the_jitted_training_step_equals_the_eager_one():
    # conv, pooling and relu layers: their backward passes hand fused kernels
    # buffers of every layout (transposed, strided), which the kernels may
    # write into only when contiguous
    x, y = demo.load_data(0)[:2]
    params = demo.init_params(np.random.default_rng(0))
    eager = fgrad.value_and_grad(demo.loss_fn)
    jitted = fgrad.jit(eager)
    for batch in range(3):
        xb, yb = x[batch * 32:(batch + 1) * 32], y[batch * 32:(batch + 1) * 32]
        (v1, g1), (v2, g2) = eager(params, xb, yb), jitted(params, xb, yb)
        np.testing.assert_allclose(v2, v1, rtol=1e-5)
        for a, b in zip(tree_leaves(g2), tree_leaves(g1)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
