"""Implicit Runge-Kutta solvers for stiff problems: ESDIRK methods, whose
stages are solved by Newton's method in the graph.

An ESDIRK method's first stage is explicit and every later stage solves

    z_i = y + dt * sum_{j<i} a_ij k_j + dt * gamma * f(t + c_i dt, z_i)

with the same ``gamma``, so one matrix ``I - dt gamma J`` (``J = df/dy`` at
the step's start, by `fgrad.jacfwd`) serves every stage and every Newton
iteration (the chord method). The iterations stop once converged, and are
never differentiated: each stage's derivative is implicit, from its equation
at the root, so the step differentiates in every mode (reverse mode under
`jit` included). A stage whose iterations do not converge, or diverge, makes
the step's error infinite, and the controller retries shorter. The last
stage is the solution (stiffly accurate), so it is L-stable.

>>> import numpy as np, fgrad.ode
>>> def robertson(t, y, args):
...     import fgrad.numpy as fnp
...     return fnp.stack([-0.04 * y[0] + 1e4 * y[1] * y[2],
...                       0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
...                       3e7 * y[1] ** 2])
>>> sol = fgrad.ode.solve(robertson, fgrad.ode.Kvaerno5(), 0.0, 100.0, 1e-4,
...                       np.array([1.0, 0.0, 0.0]),
...                       stepsize_controller=fgrad.ode.PIDController(1e-6, 1e-9))
>>> np.round(sol.ys[0], 4), int(sol.stats["num_steps"]) < 200
(array([0.6172, 0.    , 0.3828]), True)
"""
import numpy as np

from fgrad import numpy as fnp
from fgrad.lax import stop_gradient, while_loop
from fgrad.ode.solvers import AbstractRungeKutta, combine, tableau_rows, weighted_sum
from fgrad.transforms.custom import custom_jvp
from fgrad.transforms.differentiation import jacfwd, jvp
from fgrad.tree import tree_flatten, tree_map, tree_unflatten

__all__ = ["AbstractESDIRK", "Kvaerno3", "Kvaerno5"]


def _flat(tree):
    return fnp.concatenate([fnp.ravel(x) for x in tree_flatten(tree)[0]])


def _unflattener(like):
    leaves, structure = tree_flatten(like)
    shapes = [fnp.shape(x) for x in leaves]
    sizes = [int(np.prod(s)) for s in shapes]
    offsets = np.cumsum([0] + sizes)

    def unflat(v):
        return tree_unflatten(structure, [fnp.reshape(v[a:b], s)
                                          for a, b, s in zip(offsets[:-1], offsets[1:], shapes)])
    return unflat


def _scaled_size(delta, z, rtol, atol):
    return fnp.sqrt(fnp.mean((delta / (atol + rtol * fnp.abs(z))) ** 2))


def stage_solver(fun, unflat, gamma, max_iters, rtol, atol):
    """``solve(z0, base, h, t, args, matrix) -> (z, size)``: the root of
    ``z - base - h gamma f(t, z, args)`` by chord iterations from ``z0`` with
    ``matrix = I - h gamma J`` (diffrax's very-chord method): it stops once
    the correction, scaled by ``atol + rtol |z|``, is at most 1 in root mean
    square (``size``, the last one), or at ``max_iters``, or when the
    corrections grow (the rate ``|delta_k| / |delta_(k-1)|`` over 2: the
    iteration diverges, ``size`` is inf). The iterations are a `while_loop`
    that is never differentiated: the derivative is implicit, from the
    stage equation at the root, in every mode and order (`custom_jvp`)."""
    def field(t, v, args):
        return _flat(fun(t, unflat(v), args))

    @custom_jvp
    def solve(z0, base, h, t, args, matrix):
        def iterate(c):
            k, z, size, _ = c
            residual = z - base - (h * gamma) * field(t, z, args)
            delta = fnp.linalg.solve(matrix, -residual)
            new_size = _scaled_size(delta, z + delta, rtol, atol)
            diverged = fnp.logical_or(fnp.logical_and(k > 0, new_size > 2.0 * size),
                                      fnp.logical_not(fnp.isfinite(new_size)))
            return k + 1, z + delta, fnp.where(diverged, fnp.inf, new_size), diverged

        def more(c):
            k, _, size, diverged = c
            return fnp.logical_and(fnp.logical_and(k < max_iters, size > 1.0),
                                   fnp.logical_not(diverged))
        _, z, size, _ = while_loop(more, iterate, (0, z0, fnp.asarray(np.inf), False))
        return z, size

    @solve.defjvp
    def solve_jvp(primals, tangents):
        z0, base, h, t, args, matrix = primals
        _, base_dot, h_dot, t_dot, args_dot, _ = tangents
        z, size = solve(*primals)
        # at the root, (I - h gamma df/dz) z_dot = base_dot + d(h gamma f) in (h, t, args)
        _, pushed = jvp(lambda h, t, args: (h * gamma) * field(t, z, args), (h, t, args),
                        (h_dot, t_dot, args_dot))
        jac = jacfwd(lambda v: field(t, v, args))(z)
        at_root = fnp.eye(fnp.shape(z)[0]) - (h * gamma) * jac
        return (z, size), (fnp.linalg.solve(at_root, base_dot + pushed), fnp.zeros_like(size))
    return solve


class AbstractESDIRK(AbstractRungeKutta):
    """An ESDIRK method: ``a`` holds each implicit stage's row of the
    strictly lower part, ``gamma`` the diagonal; ``b`` is the last row with
    ``gamma`` (stiffly accurate). Each stage is solved by at most
    ``newton_steps`` chord iterations, stopping once the correction is small
    against ``root_atol + root_rtol * |z|``; a stage whose iterations do not
    converge (or diverge) rejects the step, and the controller retries it
    shorter (`stage_solver`)."""
    gamma = 0.0

    def __init__(self, newton_steps=10, root_rtol=1e-7, root_atol=1e-10):
        self.newton_steps = int(newton_steps)
        self.root_rtol, self.root_atol = float(root_rtol), float(root_atol)

    def step(self, fun, t, y, f, dt, args):
        unflat = _unflattener(y)
        y_flat = _flat(y)
        n = fnp.shape(y_flat)[0]
        # dt is 0 only for an example vmap keeps stepping after it finished
        h = fnp.where(dt > 0, dt, 1.0)
        jac = jacfwd(lambda v: _flat(fun(t, unflat(v), args)))(y_flat)
        matrix = fnp.eye(n) - (h * self.gamma) * jac
        solve = stage_solver(fun, unflat, self.gamma, self.newton_steps, self.root_rtol,
                             self.root_atol)
        ks, converged = [f], fnp.asarray(True)
        for row, c in zip(self.a, self.c[1:]):
            base = _flat(combine(y, h, row, ks))
            # the first guess: the explicit part plus the last stage's slope
            z, size = solve(base + (h * self.gamma) * _flat(ks[-1]), base, h, t + c * h, args,
                            matrix)
            converged = fnp.logical_and(converged, stop_gradient(size) <= 1.0)
            ks.append(unflat((z - base) / (h * self.gamma)))
        y1, f1 = unflat(z), ks[-1]
        err = tree_map(lambda *k: fnp.where(converged, h * weighted_sum(self.b_error, k),
                                            fnp.inf), *ks)
        return y1, f1, err, ks


_G3 = 0.4358665215


class Kvaerno3(AbstractESDIRK):
    """Kvaerno's 3(2) ESDIRK method (2004): third order, four stages (three
    implicit), L-stable, an embedded second-order estimate.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -1e4 * (y - np.cos(t)), fgrad.ode.Kvaerno3(),
    ...                       0.0, 1.0, 0.1, np.zeros(1),
    ...                       stepsize_controller=fgrad.ode.PIDController(1e-6, 1e-8))
    >>> float(np.round(sol.ys[0, 0], 4))
    0.5404
    """
    gamma, order = _G3, 3
    a = tableau_rows([_G3],
              [(-4 * _G3 ** 2 + 6 * _G3 - 1) / (4 * _G3), (1 - 2 * _G3) / (4 * _G3)],
              [(6 * _G3 - 1) / (12 * _G3), -1 / ((24 * _G3 - 12) * _G3),
               (-6 * _G3 ** 2 + 6 * _G3 - 1) / (6 * _G3 - 3)])
    b = np.append(a[-1], _G3)
    c = np.array([0.0, 2 * _G3, 1.0, 1.0])
    b_error = b - np.append(a[1], [_G3, 0.0])


class Kvaerno5(AbstractESDIRK):
    """Kvaerno's 5(4) ESDIRK method (2004): fifth order, seven stages (six
    implicit), L-stable, an embedded fourth-order estimate. diffrax's choice
    for stiff problems at tight tolerances.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -1e4 * (y - np.cos(t)), fgrad.ode.Kvaerno5(),
    ...                       0.0, 1.0, 0.1, np.zeros(1),
    ...                       stepsize_controller=fgrad.ode.PIDController(1e-8, 1e-10))
    >>> float(np.round(sol.ys[0, 0], 6))
    0.540386
    """
    gamma, order = 0.26, 5
    a = tableau_rows(
        [0.26],
        [0.13, 0.84033320996790809],
        [0.22371961478320505, 0.47675532319799699, -0.06470895363112615],
        [0.16648564323248321, 0.10450018841591720, 0.03631482272098715,
         -0.13090704451073998],
        [0.13855640231268224, 0.0, -0.04245337201752043, 0.02446657898003141,
         0.61943039072480676],
        [0.13659751177640291, 0.0, -0.05496908796538376, -0.04118626728321046,
         0.62993304899016403, 0.06962479448202728])
    b = np.append(a[-1], 0.26)
    c = np.array([0.0, 0.52, 1.230333209967908, 0.8957659843500759, 0.43639360985864756,
                  1.0, 1.0])
    b_error = b - np.append(a[-2], [0.26, 0.0])
