"""Sparse workloads: gradients through a sparse product and a sparse solve.

  sparse-matvec-grad   gradient of sum(tanh(A x)) w.r.t. A's stored values and x,
                       A the 5-point Laplacian of a 316 x 316 grid (99,856 unknowns,
                       498,016 stored values), CSR
  spsolve-grad         gradient of 0.5 |A^-1 b|^2 w.r.t. A's stored values and b,
                       the same A (SuperLU, MMD_AT_PLUS_A ordering)

- the floor: the adjoint written by hand with SciPy (A @ x and A.T @ ct; one
  `splu`, a solve and the transposed solve; the values' gradient gathered at the
  stored entries).
- fgrad: `fgrad.grad` over `fgrad.sparse.csr_array` and
  `fgrad.scipy.sparse.linalg.splu`, eager.
- jax: `jax.experimental.sparse.BCSR` under `jax.jit(jax.grad)` for the product;
  for the solve, `jax.experimental.sparse.linalg.spsolve` (its row shows the error
  where JAX cannot differentiate it on the CPU).
- torch: no row. torch.sparse (2.13, CPU) differentiates a sparse matrix's values
  through a dense m x n gradient: for a CSR tensor it asks for 80 GB here, and a
  COO tensor through `torch.sparse.mm` takes 38 s at 20,000 unknowns already. It
  has no sparse solve on the CPU.
"""

from __future__ import annotations

import numpy as np

from .harness import Workload

SIDE = 316
ORDERING = "MMD_AT_PLUS_A"


def laplacian():
    """The 5-point Laplacian of a SIDE x SIDE grid (Dirichlet), CSR with sorted indices."""
    import scipy.sparse as sp
    second = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(SIDE, SIDE))
    eye = sp.eye_array(SIDE)
    A = (sp.kron(second, eye) + sp.kron(eye, second)).tocsr()
    A.sort_indices()
    return A


def _parts():
    A = laplacian()
    rng = np.random.default_rng(0)
    # values to differentiate: the off-diagonal ones scaled at random, so the
    # matrix stays diagonally dominant and SuperLU keeps its diagonal pivots
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    data = np.where(rows == A.indices, A.data, A.data * rng.uniform(0.5, 1.0, A.nnz))
    indices, indptr = A.indices.copy(), A.indptr.copy()
    indices.flags.writeable = indptr.flags.writeable = False
    return A.shape, data, indices, indptr, rows, rng


def _jax_grad(p, loss, data, dense, indices, indptr):
    """A call of ``jax.jit(jax.grad(loss, (0, 1)))`` on the values and the dense
    operand. The index arrays are arguments too: closed over, XLA would spend a
    minute constant-folding them."""
    jax, jnp = p.module, p.np
    g = jax.jit(jax.grad(loss, (0, 1)))
    args = tuple(map(jnp.asarray, (data, dense, indices, indptr)))
    return lambda: jax.block_until_ready(g(*args))


# --- y = A x ------------------------------------------------------------------------------

def matvec_workload() -> Workload:
    import scipy.sparse as sp
    shape, data, indices, indptr, rows, rng = _parts()
    x = rng.standard_normal(shape[1])

    def floor():
        A = sp.csr_array((data, indices, indptr), shape=shape)
        ct = 1.0 - np.tanh(A @ x) ** 2
        return ct[rows] * x[indices], A.T @ ct

    def fgrad_(p):
        fgrad, fnp = p.module, p.np
        import fgrad.sparse

        def loss(d, x):
            return fnp.sum(fnp.tanh(fgrad.sparse.csr_array((d, indices, indptr), shape=shape)
                                    @ x))
        g = fgrad.grad(loss, (0, 1))
        return lambda: g(data, x)

    def jax_(p):
        from jax.experimental import sparse as jsparse
        jnp = p.np

        def loss(d, x, idx, ptr):
            return jnp.sum(jnp.tanh(jsparse.BCSR((d, idx, ptr), shape=shape) @ x))
        return _jax_grad(p, loss, data, x, indices, indptr)

    return Workload(
        "sparse-matvec-grad",
        f"grad of sum(tanh(A x)) w.r.t. A's {len(data)} stored values and x, A the "
        f"5-point Laplacian of a {SIDE}x{SIDE} grid ({shape[0]} unknowns), CSR",
        floor, {"fgrad": fgrad_, "jax": jax_},
        input_nbytes=data.nbytes + x.nbytes)


# --- x = A^-1 b -----------------------------------------------------------------------------

def spsolve_workload() -> Workload:
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla
    shape, data, indices, indptr, rows, rng = _parts()
    b = rng.standard_normal(shape[0])

    def floor():
        # SuperLU wants CSC: the transpose of this CSR matrix is one, on the same
        # arrays, so factorize it and solve the transposed systems
        lu = spla.splu(sp.csr_array((data, indices, indptr), shape=shape).T,
                       permc_spec=ORDERING)
        x = lu.solve(b, trans="T")
        lam = lu.solve(x)                         # A^-T x, with the same factor
        return -lam[rows] * x[indices], lam

    def fgrad_(p):
        fgrad, fnp = p.module, p.np
        import fgrad.sparse
        from fgrad.scipy.sparse.linalg import splu

        def loss(d, b):
            A = fgrad.sparse.csr_array((d, indices, indptr), shape=shape)
            return 0.5 * fnp.sum(splu(A, permc_spec=ORDERING).solve(b) ** 2)
        g = fgrad.grad(loss, (0, 1))
        return lambda: g(data, b)

    def jax_(p):
        from jax.experimental.sparse.linalg import spsolve

        def loss(d, b, idx, ptr):
            return 0.5 * p.np.sum(spsolve(d, idx, ptr, b) ** 2)
        return _jax_grad(p, loss, data, b, indices, indptr)

    return Workload(
        "spsolve-grad",
        f"grad of 0.5 |A^-1 b|^2 w.r.t. A's {len(data)} stored values and b, the same "
        f"Laplacian; SuperLU ({ORDERING}), one factorization per call",
        floor, {"fgrad": fgrad_, "jax": jax_},
        input_nbytes=data.nbytes + b.nbytes)


WORKLOADS = {"sparse-matvec-grad": matvec_workload, "spsolve-grad": spsolve_workload}
