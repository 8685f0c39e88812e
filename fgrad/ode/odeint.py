"""`odeint`: `jax.experimental.ode.odeint`'s signature, defaults and
derivative, so that porting is an import change.

>>> import numpy as np, fgrad, fgrad.ode
>>> ys = fgrad.ode.odeint(lambda y, t, k: -k * y, np.ones(1), np.array([0.0, 1.0]), 2.0)
>>> np.round(ys[:, 0], 7)
array([1.       , 0.1353353])
"""
import numpy as np

from fgrad import numpy as fnp
from fgrad.errors import OdeArgumentError
from fgrad.ode.adjoint import solve_at_times
from fgrad.ode.controllers import JaxOdeintController
from fgrad.ode.solvers import Dopri5

__all__ = ["odeint"]


def odeint(func, y0, t, *args, rtol=1.4e-8, atol=1.4e-8, mxstep=np.inf, hmax=np.inf):
    """The solution of ``dy/dt = func(y, t, *args)``, ``y(t[0]) = y0``, at the
    increasing times ``t``: ``y0``'s pytree with a leading axis of ``len(t)``.

    As JAX's: Dormand-Prince 5(4) with its dense output, steps sized by the
    scaled error's root mean square (``atol + rtol * |y|``), ``mxstep`` steps
    at most between two output times and steps at most ``hmax``; reverse-mode
    derivatives in ``y0``, ``t`` and ``args`` by the continuous adjoint
    (`BacksolveAdjoint`). Unlike JAX's, a solve that reaches ``mxstep`` or
    whose step size underflows, or whose state becomes NaN, raises
    `fgrad.errors.IntegrationError` (JAX returns what it has). Runs eagerly,
    under `jit` (compiled with the caller) and under `vmap`.

    >>> import numpy as np, fgrad, fgrad.ode
    >>> def final(k):
    ...     return fgrad.ode.odeint(lambda y, t, k: -k * y, np.ones(1),
    ...                             np.array([0.0, 1.0]), k)[-1, 0]
    >>> float(np.round(fgrad.grad(final)(2.0), 6))          # -t exp(-k t)
    -0.135335
    """
    t = fnp.asarray(t)
    if t.dtype.kind != "f":
        raise OdeArgumentError(f"odeint: t must be an array of floats, got dtype {t.dtype}.")
    if fnp.ndim(t) != 1 or fnp.shape(t)[0] < 1:
        raise OdeArgumentError(f"odeint: t must be a 1-d array of times, got shape "
                               f"{fnp.shape(t)}.")
    mxstep = None if not np.isfinite(mxstep) else int(mxstep)

    def field(time, y, args):
        return func(y, time, *args)
    return solve_at_times(field, Dopri5(), JaxOdeintController(rtol, atol, hmax), y0, t,
                          tuple(args), max_steps=None, interval_steps=mxstep,
                          what="fgrad.ode.odeint")
