"""The gradient descent both ``particle`` and ``saddle`` use, as GradBench specifies it.

From ``x``, step against the gradient with a rate ``eta`` that halves after a
step that does not decrease the objective and doubles after ten that do; stop
when the gradient or the step is shorter than 1e-5.

The descent is written once, over a ``control`` namespace with `lax`'s
``while_loop``, ``cond`` and ``switch``:

- ``control=fgrad.lax`` stages it, so that ``jit`` compiles the whole descent,
  nested descents and their forward-mode derivatives included, into one
  program. Reverse mode through a staged ``while_loop`` is not defined (its
  trip count is unknown while staging, as in JAX), so this is for descents
  differentiated by `forward_gradient` only;
- ``control=EAGER`` (the default) runs the same steps as Python loops on
  values, so that an enclosing ``grad`` or ``jvp`` differentiates through the
  iterations in either mode, each derivative traced anew (the nested AD these
  evals test).

>>> import numpy as np
>>> x = argmin(lambda x: ((x - 3.0) ** 2)[0], forward_gradient, np.array([0.0]))
>>> round(float(x[0]), 3)
3.0
>>> staged = fgrad.jit(lambda x: argmin(lambda x: ((x - 3.0) ** 2)[0], forward_gradient, x,
...                                     control=fgrad.lax))
>>> round(float(staged(np.array([0.0]))[0]), 3)
3.0
"""

import types

import fgrad
import fgrad.numpy as fnp

TOLERANCE = 1e-5


def reverse_gradient(f, x):
    return fgrad.grad(f)(x)


def forward_gradient(f, x):
    """The gradient by one ``jvp`` per coordinate (forward mode)."""
    basis = fnp.eye(x.shape[0])
    return fnp.stack([fgrad.jvp(f, (x,), (basis[i],))[1] for i in range(x.shape[0])])


def _while_loop(cond_fun, body_fun, state):
    while cond_fun(state):
        state = body_fun(state)
    return state


def _cond(pred, true_fun, false_fun, *operands):
    return true_fun(*operands) if pred else false_fun(*operands)


def _switch(index, branches, *operands):
    return branches[int(index)](*operands)


# `lax`'s control flow as Python statements on values
EAGER = types.SimpleNamespace(while_loop=_while_loop, cond=_cond, switch=_switch)


def _norm(v):
    return fnp.sqrt(fnp.sum(v * v))


def argmin(f, gradient, x, control=EAGER):
    """GradBench's descent from ``x`` on ``f``, its gradient by ``gradient(f, x)``."""
    # the state: (x, f(x), its gradient, eta, steps improved in a row, done)
    def finish(state):
        return state[:5] + (True,)

    def speed_up(state):
        x, fx, gx, eta, _, done = state
        return x, fx, gx, eta * 2, 0, done

    def descend(state):
        x, fx, gx, eta, improved, done = state
        x_new = x - eta * gx

        def attempt(state):
            f_new = f(x_new)
            return control.cond(
                f_new < fx,
                lambda state: (x_new, f_new, gradient(f, x_new), eta, improved + 1, done),
                lambda state: (x, fx, gx, eta / 2, 0, done), state)

        return control.cond(_norm(x - x_new) <= TOLERANCE, finish, attempt, state)

    def step(state):
        which = fnp.where(_norm(state[2]) <= TOLERANCE, 0, fnp.where(state[4] == 10, 1, 2))
        return control.switch(which, [finish, speed_up, descend], state)

    start = (x, f(x), gradient(f, x), 1e-5, 0, False)
    return control.while_loop(lambda state: ~fnp.asarray(state[5]), step, start)[0]


def argmax(f, gradient, x, control=EAGER):
    return argmin(lambda y: -f(y), gradient, x, control)
