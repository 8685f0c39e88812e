"""Train a small convolutional network on handwritten digits with fgrad.

Run with ``python -m fgrad.demo`` (``pip install '.[demo]'`` first). The data are
scikit-learn's bundled 8x8 digits (1797 images, no download). A two-layer
convolutional network (conv 3x3 -> relu -> max-pool, twice, then dropout and a
dense layer) is trained with Adam on `fgrad.value_and_grad` of a cross-entropy
loss, with a progress bar showing the running loss; its random numbers (initial
weights, batches, dropout masks) come from one `fgrad.random` key. At the end
it prints the test accuracy, the time per training step of eager ``grad`` and
of ``jit(grad)`` (where `fgrad.jit` exists), and writes the loss curve to a
PNG.

``--quick`` (or ``--steps N``) makes a short run for CI.
"""
import argparse
import contextlib
import time

import numpy as np

import fgrad
import fgrad.numpy as fnp
from fgrad import nn, optim, random


def load_data(seed=0, test_fraction=0.25):
    """(x_train, y_train, x_test, y_test): NCHW float32 images in [0, 1]."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]      # (1797, 1, 8, 8)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


DROPOUT = 0.1


def init_params(key, c1=16, c2=32, classes=10):
    """He and Glorot initial weights from a `fgrad.random` key (a NumPy
    Generator works too, eagerly)."""
    keys = (key,) * 3 if isinstance(key, np.random.Generator) else random.split(key, 3)
    return {
        "conv1": {"w": nn.he_normal(keys[0], (c1, 1, 3, 3)), "b": np.zeros(c1, np.float32)},
        "conv2": {"w": nn.he_normal(keys[1], (c2, c1, 3, 3)), "b": np.zeros(c2, np.float32)},
        "dense": {"w": nn.glorot_normal(keys[2], (c2 * 2 * 2, classes)),
                  "b": np.zeros(classes, np.float32)},
    }


def forward(params, x, key=None):
    """Logits of a batch of (N, 1, 8, 8) images; with a key, dropout (rate
    `DROPOUT`) on the dense layer's inputs, as in training."""
    h = nn.relu(nn.conv2d(x, params["conv1"]["w"], params["conv1"]["b"], padding="same"))
    h = nn.max_pool2d(h, 2)                                       # (N, c1, 4, 4)
    h = nn.relu(nn.conv2d(h, params["conv2"]["w"], params["conv2"]["b"], padding="same"))
    h = nn.max_pool2d(h, 2)                                       # (N, c2, 2, 2)
    h = fnp.reshape(h, (h.shape[0], -1))
    h = nn.dropout(h, DROPOUT, key, deterministic=key is None)
    return h @ params["dense"]["w"] + params["dense"]["b"]


def loss_fn(params, x, y, key=None):
    return nn.cross_entropy(forward(params, x, key), y)


def accuracy(params, x, y):
    return float(np.mean(np.argmax(forward(params, x), axis=-1) == y))


def time_per_step(step, params, x, y, key, repeats):
    step(params, x, y, key)                 # first call: jit stages and compiles here
    start = time.perf_counter()
    for i in range(repeats):
        step(params, x, y, random.fold_in(key, i))
    return (time.perf_counter() - start) / repeats


def save_loss_curve(history, path):
    import matplotlib
    matplotlib.use("Agg")                  # no display needed
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = np.arange(1, len(history) + 1)
    ax.plot(steps, history, lw=0.8, alpha=0.4, label="batch loss")
    window = max(len(history) // 20, 1)
    smooth = np.convolve(history, np.ones(window) / window, mode="valid")
    ax.plot(steps[window - 1:], smooth, lw=2, label=f"mean of {window}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_yscale("log")
    ax.set_title("fgrad conv net on 8x8 digits")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _one_blas_thread():
    """A context limiting BLAS to one thread: these matrices are small, and a
    multi-threaded BLAS on a busy 2-core machine spends its time spinning."""
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def main(argv=None):
    with _one_blas_thread():
        return _run(argv)


def _run(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="training steps")
    parser.add_argument("--quick", action="store_true",
                        help="a short run (60 steps, fewer timing repeats) for CI")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="fgrad_demo_loss.png",
                        help="where to write the loss curve (PNG)")
    args = parser.parse_args(argv)
    steps = min(args.steps, 60) if args.quick else args.steps

    try:
        import matplotlib  # noqa: F401
        import sklearn  # noqa: F401
        from tqdm import tqdm
    except ImportError as err:
        raise SystemExit(f"the demo needs its extra dependencies ({err.name} is "
                         "missing): pip install 'fgrad[demo]' (from a checkout: "
                         "pip install '.[demo]')") from None

    x_train, y_train, x_test, y_test = load_data(args.seed)
    # every random number of the run comes from this key: split, never reused
    init_key, batch_key, dropout_key = random.split(random.key(args.seed), 3)
    params = init_params(init_key)
    opt = optim.adam(optim.warmup_cosine_decay_schedule(0.0, args.lr, min(50, steps // 10),
                                                        steps, args.lr * 0.05))
    state = opt.init(params)

    eager_step = fgrad.value_and_grad(loss_fn)
    has_jit = hasattr(fgrad, "jit")
    step = fgrad.jit(eager_step) if has_jit else eager_step

    history = []
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="training", unit="step", mininterval=0.25)
    for i in bar:
        idx = random.randint(random.fold_in(batch_key, i), (args.batch,), 0, len(y_train))
        # a fresh key per step: jit draws each step's dropout mask from it
        value, grads = step(params, x_train[idx], y_train[idx], random.fold_in(dropout_key, i))
        updates, state = opt.update(grads, state, params)
        params = optim.apply_updates(params, updates)
        history.append(float(value))
        if i % 10 == 0 or i == steps - 1:
            bar.set_postfix(loss=f"{np.mean(history[-20:]):.4f}")
    bar.close()
    train_seconds = time.perf_counter() - start

    acc = accuracy(params, x_test, y_test)
    print(f"test accuracy: {acc:.2%} on {len(y_test)} held-out digits "
          f"({steps} steps, {train_seconds:.1f} s)")

    xb, yb = x_train[:args.batch], y_train[:args.batch]
    repeats = 5 if args.quick else 20
    eager = time_per_step(eager_step, params, xb, yb, dropout_key, repeats)
    print(f"time per step, eager grad:    {eager * 1e3:7.2f} ms")
    if has_jit:
        jitted = time_per_step(step, params, xb, yb, dropout_key, repeats)
        print(f"time per step, jit(grad):     {jitted * 1e3:7.2f} ms "
              f"(speed-up over eager: {eager / jitted:.2f}x)")
    else:
        print("time per step, jit(grad):     n/a (this fgrad has no jit yet)")

    save_loss_curve(history, args.out)
    print(f"loss curve written to {args.out}")
    return {"accuracy": acc, "history": history, "png": args.out}


if __name__ == "__main__":
    main()
