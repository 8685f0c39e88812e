"""Neural-net workload: one LeNet-style training step (gradient of the loss).

  lenet-grad   gradient of a LeNet-5-style conv net's cross-entropy, batch 64 of
               1x28x28, w.r.t. its 10 parameter arrays (float64)

LeNet here: conv 5x5 (1->6, padding 2) -> relu -> max-pool 2 -> conv 5x5 (6->16)
-> relu -> max-pool 2 -> dense 400->120 -> relu -> dense 120->84 -> relu ->
dense 84->10 -> softmax cross-entropy over integer labels.

- fgrad: `fgrad.jit(fgrad.grad(loss))` where fgrad has `jit`, else eager
  `fgrad.grad`; the row's note says which. Built on fgrad.nn (conv2d, max_pool2d,
  cross_entropy).
- torch: eager `torch.autograd.grad` over `torch.nn.functional` (conv2d, max_pool2d,
  cross_entropy), one thread.
- autograd: the same network in autograd.numpy; autograd has no convolution
  primitive suited to NCHW batches, so the convolution is written the way an
  autograd user would: a sum over the 25 kernel offsets of shifted slices
  contracted with einsum.
- the floor: the gradient by hand in NumPy (im2col by strided views, einsum).
"""

from __future__ import annotations

import numpy as np

from .harness import Workload

RNG_SEED = 0
BATCH = 64


def lenet_params(rng):
    def dense(n_in, n_out):
        return rng.standard_normal((n_in, n_out)) * np.sqrt(2 / n_in), np.zeros(n_out)
    w1 = rng.standard_normal((6, 1, 5, 5)) * np.sqrt(2 / 25)
    w2 = rng.standard_normal((16, 6, 5, 5)) * np.sqrt(2 / 150)
    return (w1, 0.01 * rng.standard_normal(6), w2, 0.01 * rng.standard_normal(16),
            *dense(400, 120), *dense(120, 84), *dense(84, 10))


# --- the floor: forward and backward by hand ----------------------------------------

def _windows(x, k):
    """(N, C, OH, OW, k, k) view of every k x k window (stride 1)."""
    return np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))


def _pool_forward(r):
    n, c, h, w = r.shape
    blocks = r.reshape(n, c, h // 2, 2, w // 2, 2)
    out = blocks.max(axis=(3, 5))
    return out, blocks


def _pool_backward(d_out, blocks, out):
    hit = blocks == out[:, :, :, None, :, None]
    # ties share equally; behind a relu they only occur among zeros, whose
    # gradient the relu discards, so any tie rule gives the same result
    share = hit / hit.sum(axis=(3, 5), keepdims=True)
    d = share * d_out[:, :, :, None, :, None]
    n, c = d.shape[:2]
    return d.reshape(n, c, blocks.shape[2] * 2, blocks.shape[4] * 2)


def floor_grad(params, x, labels):
    w1, b1, w2, b2, w3, b3, w4, b4, w5, b5 = params
    n = x.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    cols1 = _windows(xp, 5)                                        # (N,1,28,28,5,5)
    z1 = np.einsum("nchwij,ocij->nohw", cols1, w1, optimize=True) + b1[:, None, None]
    r1 = np.maximum(z1, 0)
    p1, blocks1 = _pool_forward(r1)                                # (N,6,14,14)
    cols2 = _windows(p1, 5)                                        # (N,6,10,10,5,5)
    z2 = np.einsum("nchwij,ocij->nohw", cols2, w2, optimize=True) + b2[:, None, None]
    r2 = np.maximum(z2, 0)
    p2, blocks2 = _pool_forward(r2)                                # (N,16,5,5)
    f = p2.reshape(n, -1)
    h3 = np.maximum(f @ w3 + b3, 0)
    h4 = np.maximum(h3 @ w4 + b4, 0)
    z = h4 @ w5 + b5
    e = np.exp(z - z.max(axis=1, keepdims=True))
    dz = e / e.sum(axis=1, keepdims=True)
    dz[np.arange(n), labels] -= 1
    dz /= n
    dw5, db5 = h4.T @ dz, dz.sum(0)
    dh4 = (dz @ w5.T) * (h4 > 0)
    dw4, db4 = h3.T @ dh4, dh4.sum(0)
    dh3 = (dh4 @ w4.T) * (h3 > 0)
    dw3, db3 = f.T @ dh3, dh3.sum(0)
    dp2 = (dh3 @ w3.T).reshape(p2.shape)
    dz2 = _pool_backward(dp2, blocks2, p2) * (z2 > 0)
    dw2 = np.einsum("nohw,nchwij->ocij", dz2, cols2, optimize=True)
    db2 = dz2.sum((0, 2, 3))
    dp1 = np.zeros_like(p1)
    for i in range(5):
        for j in range(5):
            dp1[:, :, i:i + 10, j:j + 10] += np.einsum("nohw,oc->nchw", dz2, w2[:, :, i, j],
                                                       optimize=True)
    dz1 = _pool_backward(dp1, blocks1, p1) * (z1 > 0)
    dw1 = np.einsum("nohw,nchwij->ocij", dz1, cols1, optimize=True)
    db1 = dz1.sum((0, 2, 3))
    return (dw1, db1, dw2, db2, dw3, db3, dw4, db4, dw5, db5)


# --- the libraries -----------------------------------------------------------------------

def fgrad_loss(fgrad):
    nn, fnp = fgrad.nn, fgrad.numpy

    def loss(params, x, labels):
        w1, b1, w2, b2, w3, b3, w4, b4, w5, b5 = params
        h = nn.max_pool2d(nn.relu(nn.conv2d(x, w1, b1, padding=2)), 2)
        h = nn.max_pool2d(nn.relu(nn.conv2d(h, w2, b2)), 2)
        h = fnp.reshape(h, (h.shape[0], -1))
        h = nn.relu(h @ w3 + b3)
        h = nn.relu(h @ w4 + b4)
        return nn.cross_entropy(h @ w5 + b5, labels)
    return loss


def autograd_loss(anp):
    def conv(x, w, b):
        o, c, k, _ = w.shape
        oh, ow = x.shape[2] - k + 1, x.shape[3] - k + 1
        out = 0.0
        for i in range(k):
            for j in range(k):
                out = out + anp.einsum("nchw,oc->nohw", x[:, :, i:i + oh, j:j + ow],
                                       w[:, :, i, j])
        return out + b[None, :, None, None]

    def pool(r):
        n, c, h, w = r.shape
        return anp.max(anp.reshape(r, (n, c, h // 2, 2, w // 2, 2)), axis=(3, 5))

    def loss(params, x, labels):
        w1, b1, w2, b2, w3, b3, w4, b4, w5, b5 = params
        xp = anp.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)), mode="constant")
        h = pool(anp.maximum(conv(xp, w1, b1), 0))
        h = pool(anp.maximum(conv(h, w2, b2), 0))
        h = anp.reshape(h, (h.shape[0], -1))
        h = anp.maximum(h @ w3 + b3, 0)
        h = anp.maximum(h @ w4 + b4, 0)
        z = h @ w5 + b5
        m = anp.max(z, axis=1, keepdims=True)
        logp = z - m - anp.log(anp.sum(anp.exp(z - m), axis=1, keepdims=True))
        return -anp.mean(logp[anp.arange(z.shape[0]), labels])
    return loss


def torch_loss(torch):
    F = torch.nn.functional

    def loss(params, x, labels):
        w1, b1, w2, b2, w3, b3, w4, b4, w5, b5 = params
        h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=2)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, w2, b2)), 2)
        h = h.reshape(h.shape[0], -1)
        h = F.relu(h @ w3 + b3)
        h = F.relu(h @ w4 + b4)
        return F.cross_entropy(h @ w5 + b5, labels)
    return loss


def lenet_workload() -> Workload:
    rng = np.random.default_rng(RNG_SEED)
    params = lenet_params(rng)
    x = rng.standard_normal((BATCH, 1, 28, 28))
    labels = rng.integers(0, 10, BATCH)

    def floor():
        return floor_grad(params, x, labels)

    def fgrad_(p):
        fgrad = p.module
        g = fgrad.grad(fgrad_loss(fgrad))
        if hasattr(fgrad, "jit"):
            g = fgrad.jit(g)
        return lambda: g(params, x, labels)

    def autograd_(p):
        g = p.module.grad(autograd_loss(p.np))
        return lambda: g(params, x, labels)

    def torch_(p):
        torch = p.module
        loss = torch_loss(torch)
        xt, yt = torch.from_numpy(x), torch.from_numpy(labels)
        leaves = tuple(torch.from_numpy(a).requires_grad_(True) for a in params)

        def call():
            return torch.autograd.grad(loss(leaves, xt, yt), leaves)
        return call

    return Workload(
        "lenet-grad",
        f"grad of a LeNet-5-style conv net (2 conv 5x5 + max-pool, 3 dense), "
        f"cross-entropy, batch {BATCH} of 1x28x28, w.r.t. 10 params; fgrad uses "
        "jit(grad) where fgrad.jit exists, else eager grad",
        floor, {"fgrad": fgrad_, "autograd": autograd_, "torch": torch_},
        input_nbytes=sum(a.nbytes for a in params))


WORKLOADS = {"lenet-grad": lenet_workload}
