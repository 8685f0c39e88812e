"""The gradient descent both ``particle`` and ``saddle`` use, as GradBench specifies it.

From ``x``, step against the gradient with a rate ``eta`` that halves after a
step that does not decrease the objective and doubles after ten that do; stop
when the gradient or the step is shorter than 1e-5.  Written as plain Python
over fgrad values, so an enclosing ``grad`` or ``jvp`` differentiates through
the iterations (the nested AD these evals test).

>>> import numpy as np
>>> x = argmin(lambda x: ((x - 3.0) ** 2)[0], forward_gradient, np.array([0.0]))
>>> round(float(x[0]), 3)
3.0
"""

import fgrad
import fgrad.numpy as fnp


def reverse_gradient(f, x):
    return fgrad.grad(f)(x)


def forward_gradient(f, x):
    """The gradient by one ``jvp`` per coordinate (forward mode)."""
    basis = fnp.eye(x.shape[0])
    return fnp.stack([fgrad.jvp(f, (x,), (basis[i],))[1] for i in range(x.shape[0])])


def argmin(f, gradient, x):
    fx, gx = f(x), gradient(f, x)
    eta, improved = 1e-5, 0
    while True:
        if fnp.sqrt(fnp.sum(gx * gx)) <= 1e-5:
            return x
        if improved == 10:
            eta, improved = eta * 2, 0
            continue
        x_new = x - eta * gx
        if fnp.sqrt(fnp.sum((x - x_new) ** 2)) <= 1e-5:
            return x
        f_new = f(x_new)
        if f_new < fx:
            x, fx, gx, improved = x_new, f_new, gradient(f, x_new), improved + 1
        else:
            eta, improved = eta / 2, 0


def argmax(f, gradient, x):
    return argmin(lambda y: -f(y), gradient, x)
