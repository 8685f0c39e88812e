"""GradBench's ``lstm`` eval (from ADBench): the loss of a character-level LSTM with
diagonal weights over a text, and its gradient in the weights.

``main_params`` holds, per layer, a row of weights and a row of biases, each
four gates of ``b`` values (forget, input, output, change); ``extra_params`` the
input weight, output weight and output bias; ``state`` per layer a hidden and a
cell row.  ADBench's normalisation adds 2 inside the log-sum-exp.
"""

import numpy as np

import fgrad
import fgrad.numpy as fnp
from fgrad import lax

from benchmarks.gradbench.tool import timed


def make_loss(xp, lax):
    """The loss written against NumPy-like namespace ``xp`` and ``lax`` (fgrad's,
    or JAX's: benchmarks/bench_loops.py times both)."""
    def sigmoid(x):
        return 1 / (1 + xp.exp(-x))

    def loss(main_params, extra_params, state, sequence):
        layers, b = state.shape[0] // 2, state.shape[1]
        gates = main_params.reshape(layers, 2, 4, b)        # layer, weight/bias, gate, unit
        weight, bias = gates[:, 0], gates[:, 1]
        in_weight, out_weight, out_bias = extra_params[0], extra_params[1], extra_params[2]

        def step(state, pair):
            x, target = pair
            value = x * in_weight
            rows = []
            for i in range(layers):
                hidden, cell = state[2 * i], state[2 * i + 1]
                forget = sigmoid(value * weight[i, 0] + bias[i, 0])
                ingate = sigmoid(hidden * weight[i, 1] + bias[i, 1])
                outgate = sigmoid(value * weight[i, 2] + bias[i, 2])
                change = xp.tanh(hidden * weight[i, 3] + bias[i, 3])
                cell = cell * forget + ingate * change
                hidden = outgate * xp.tanh(cell)
                rows += [hidden, cell]
                value = hidden
            prediction = value * out_weight + out_bias
            normalized = prediction - xp.log(xp.sum(xp.exp(prediction)) + 2)
            return xp.stack(rows), xp.sum(target * normalized)

        _, totals = lax.scan(step, state, (sequence[:-1], sequence[1:]))
        return -xp.sum(totals) / ((sequence.shape[0] - 1) * b)
    return loss


loss = make_loss(fnp, lax)


def _prepare(raw):
    return tuple(np.asarray(raw[name], dtype=np.float64)
                 for name in ("main_params", "extra_params", "state", "sequence"))


def _flat_gradient(main_params, extra_params, state, sequence):
    d_main, d_extra = fgrad.grad(loss, argnums=(0, 1))(main_params, extra_params, state,
                                                       sequence)
    return fnp.concatenate([d_main.ravel(), d_extra.ravel()])


_objective = fgrad.jit(loss, compile="sync")
_jacobian = fgrad.jit(_flat_gradient, compile="sync")

objective = timed(prepare=_prepare, output=float)(lambda args: _objective(*args))
jacobian = timed(prepare=_prepare, output=lambda g: g.tolist())(lambda args: _jacobian(*args))
