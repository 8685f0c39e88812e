"""Recover a conductivity field from noisy potentials: a PDE-constrained inverse problem.

The forward model is the steady diffusion equation -div(kappa grad u) = f on the
unit square, u = 0 on its boundary, discretised by finite volumes on an n x n
grid of cells (a 5-point stencil: n^2 unknowns, 90,000 for n = 300). Each face
conducts with the mean of its two cells' kappa, so the stiffness matrix's values
are a fixed linear map Q of kappa: ``data = Q @ exp(m)``, on a fixed structure.

Four sources are switched on one at a time and the potential is observed, with
1% noise, on a coarse lattice of cells. The unknown is the log-conductivity m;
the loss is the misfit plus a smoothness penalty. fgrad differentiates through
``spsolve``: one SuperLU factorization serves the four solves and the adjoint
solves of the gradient. L-BFGS (SciPy) takes the value and gradient.

    python examples/inverse_conductivity.py            # n = 300, saves the figure
    python examples/inverse_conductivity.py --n 60     # a quick look
"""
import argparse
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy.optimize
import scipy.sparse as sp

import fgrad
import fgrad.numpy as fnp
import fgrad.sparse
from fgrad.scipy.sparse.linalg import splu

FIGURE = Path(__file__).resolve().parents[1] / "docs" / "img" / "inverse_conductivity.png"


class Problem:
    """The grid, its operators and synthetic data for an ``n x n`` inversion."""

    def __init__(self, n, noise=0.01, spacing=6, smoothing=3e-2, seed=0):
        self.n = n
        cells = np.arange(n * n).reshape(n, n)
        # faces: interior ones join two cells; a boundary face joins a cell to
        # the boundary (u = 0) at half a cell, so it conducts twice as well
        left = np.concatenate([cells[:, :-1].ravel(), cells[:-1, :].ravel()])
        right = np.concatenate([cells[:, 1:].ravel(), cells[1:, :].ravel()])
        border = np.concatenate([cells[0], cells[-1], cells[:, 0], cells[:, -1]])
        interior, faces = len(left), len(left) + len(border)
        # kappa on each face from kappa on the cells: the mean, or twice the cell's
        face = np.r_[np.arange(interior), np.arange(interior), interior + np.arange(len(border))]
        face_kappa = sp.csr_array((np.r_[np.full(2 * interior, 0.5), np.full(len(border), 2.0)],
                                   (face, np.r_[left, right, border])), shape=(faces, n * n))
        # G: the difference across each face (u outside the boundary is 0)
        gradient = sp.csr_array((np.r_[np.ones(interior), -np.ones(interior),
                                       np.ones(len(border))], (face, np.r_[left, right, border])),
                                shape=(faces, n * n))
        # A = G^T diag(kappa_f) G has the structure of G^T G, and its value at a
        # stored (r, c) is the sum over faces of G[f, r] G[f, c] kappa_f: a
        # fixed linear map of the face conductivities
        pattern = (gradient.T @ gradient).tocsr()
        pattern.sort_indices()
        # read-only copies: fgrad.sparse then reuses them, and the structure made
        # from them, on every evaluation instead of copying them again
        self.indices, self.indptr = (np.array(a) for a in (pattern.indices, pattern.indptr))
        self.indices.flags.writeable = self.indptr.flags.writeable = False
        rows = np.repeat(np.arange(n * n), np.diff(pattern.indptr))
        by_column = gradient.tocsc()
        to_values = by_column[:, rows].multiply(by_column[:, pattern.indices]).T.tocsr()
        # a constant used on every evaluation: converted to fgrad once, so its
        # index arrays are not copied again on each call (1/h^2 = n^2)
        self.Q = fgrad.sparse.csr_array((to_values @ face_kappa).tocsr() * float(n * n))
        self.smooth = gradient[:interior]
        self.smoothing = smoothing
        # four Gaussian sources near the corners, one per column
        x = (np.arange(n) + 0.5) / n
        X, Y = np.meshgrid(x, x, indexing="ij")
        centres = [(0.25, 0.25), (0.25, 0.75), (0.75, 0.25), (0.75, 0.75)]
        self.F = np.stack([np.exp(-((X - cx) ** 2 + (Y - cy) ** 2) / 0.005).ravel()
                           for cx, cy in centres], 1)
        self.observed = cells[spacing // 2::spacing, spacing // 2::spacing].ravel()
        # the truth: a conducting and an insulating inclusion on a background of 1
        self.m_true = (1.0 * np.exp(-((X - 0.35) ** 2 + (Y - 0.6) ** 2) / 0.02)
                       - 0.8 * np.exp(-((X - 0.7) ** 2 + (Y - 0.35) ** 2) / 0.01)).ravel()
        clean = self.potentials(self.m_true)[self.observed]
        self.sigma = noise * np.abs(clean).max()
        self.data = clean + self.sigma * np.random.default_rng(seed).standard_normal(clean.shape)

    def matrix(self, m):
        """The stiffness matrix for log-conductivity ``m``: its values are Q exp(m)."""
        return fgrad.sparse.csr_array((self.Q @ fnp.exp(m), self.indices, self.indptr),
                                      shape=(self.n ** 2, self.n ** 2))

    def potentials(self, m):
        """The four potentials, one factorization for all of them."""
        return splu(self.matrix(m), permc_spec="MMD_AT_PLUS_A").solve(self.F)

    def loss(self, m):
        """Misfit to the observations (in noise units) plus the smoothness penalty."""
        misfit = (self.potentials(m)[self.observed] - self.data) / self.sigma
        # sum((m_i - m_j)^2) over interior faces approximates the integral of |grad m|^2
        return 0.5 * fnp.mean(misfit ** 2) + 0.5 * self.smoothing * fnp.sum(
            (self.smooth @ m) ** 2)


def recover(problem, maxiter):
    """L-BFGS from m = 0, with fgrad's value and gradient; returns SciPy's result
    (``result.x`` is m).

    L-BFGS works on z = m / n: its steps are then those of the L2 inner product
    of fields, and the iterations needed stay about the same as the grid refines.
    """
    value_and_grad = fgrad.value_and_grad(lambda z: problem.loss(problem.n * z))
    result = scipy.optimize.minimize(lambda z: tuple(map(np.asarray, value_and_grad(z))),
                                     np.zeros(problem.n ** 2), jac=True, method="L-BFGS-B",
                                     options={"maxiter": maxiter})
    result.x = problem.n * result.x
    return result


def measure(problem):
    """Seconds for the forward solve alone and for value and gradient, and the
    peak of tracemalloc's memory over the matrix's own storage, for one m."""
    m = 0.3 * problem.m_true
    forward = min(_seconds(lambda: problem.potentials(m)) for _ in range(2))
    both = min(_seconds(lambda: fgrad.value_and_grad(problem.loss)(m)) for _ in range(2))
    A = sp.csr_array((np.asarray(problem.Q @ np.exp(m)), problem.indices, problem.indptr))
    storage = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes
    tracemalloc.start()
    fgrad.value_and_grad(problem.loss)(m)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return forward, both, peak / storage


def _seconds(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def figure(problem, m, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = problem.n
    fig, axes = plt.subplots(1, 2, figsize=(9, 4), constrained_layout=True)
    limits = dict(vmin=problem.m_true.min(), vmax=problem.m_true.max(), cmap="viridis",
                  origin="lower", extent=(0, 1, 0, 1))
    for ax, field, title in ((axes[0], problem.m_true, "truth"),
                             (axes[1], m, "recovered")):
        image = ax.imshow(field.reshape(n, n).T, **limits)
        ax.set_title(f"log conductivity: {title}")
    rows, cols = np.divmod(problem.observed, n)
    axes[1].plot((rows + 0.5) / n, (cols + 0.5) / n, ".", color="white", ms=1)
    fig.colorbar(image, ax=axes, shrink=0.8)
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="cells per side (default 300)")
    parser.add_argument("--maxiter", type=int, default=30, help="L-BFGS iterations")
    parser.add_argument("--no-figure", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    problem = Problem(args.n)
    print(f"{args.n}x{args.n} grid: {args.n ** 2} unknowns, {len(problem.indices)} stored "
          f"entries, {len(problem.observed)} observation points x 4 sources")
    forward, both, memory = measure(problem)
    print(f"forward solve {forward:.2f} s, value and gradient {both:.2f} s "
          f"({both / forward:.2f}x); peak traced memory {memory:.2f}x the matrix's storage")
    result = recover(problem, args.maxiter)
    error = np.linalg.norm(result.x - problem.m_true) / np.linalg.norm(problem.m_true)
    print(f"L-BFGS: {result.nit} iterations, {result.nfev} evaluations, loss "
          f"{result.fun:.3g}, relative error of m {error:.2f}; "
          f"{time.perf_counter() - start:.0f} s in all")
    if not args.no_figure:
        figure(problem, result.x, FIGURE)
        print(f"wrote {FIGURE}")


if __name__ == "__main__":
    main()
