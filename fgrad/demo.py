"""Fit a small model by gradient descent with fgrad.grad and print the loss falling.

Run with ``python -m fgrad.demo``. A two-layer tanh network learns y = sin(3x) on
[-1, 1] from 128 noisy samples; every step is one `fgrad.value_and_grad` call
over a dict of parameters.
"""
import argparse
import time

import numpy as np

import fgrad
import fgrad.numpy as fnp


def init_params(rng, hidden=32):
    return {"w1": rng.normal(0, 1.0, (1, hidden)), "b1": np.zeros(hidden),
            "w2": rng.normal(0, 1.0 / np.sqrt(hidden), (hidden, 1)), "b2": np.zeros(1)}


def predict(params, x):
    h = fnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss(params, x, y):
    return fnp.mean((predict(params, x) - y) ** 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (128, 1))
    y = np.sin(3 * x) + rng.normal(0, 0.05, x.shape)
    params = init_params(rng)
    step = fgrad.value_and_grad(loss)

    start = time.perf_counter()
    history = []
    for i in range(args.steps + 1):
        value, grads = step(params, x, y)
        params = fgrad.tree.tree_map(lambda p, g: p - args.lr * g, params, grads)
        history.append(float(value))
        if i % max(args.steps // 10, 1) == 0:
            print(f"step {i:5d}  loss {float(value):.5f}")
    elapsed = time.perf_counter() - start
    print(f"loss fell from {history[0]:.4f} to {history[-1]:.4f} in {args.steps} steps "
          f"({1e3 * elapsed / max(args.steps, 1):.2f} ms per step)")
    return history


if __name__ == "__main__":
    main()
