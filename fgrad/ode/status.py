"""How a solve ended, and the check that makes a failure loud.

A solve's status is an integer computed inside the solver's loop, so it is a
staged value under `jit` and one per example under `vmap`. `raise_if_failed`
binds ``ode_check``, an effectful primitive (the compiler never removes it)
whose implementation raises `fgrad.errors.IntegrationError` when the status is
not ``SUCCESSFUL`` (zero): eagerly at once, and under `jit` each time the
compiled code runs (a compiled program compares the status with zero and
calls back into Python only to raise).

>>> from fgrad.ode import RESULTS
>>> RESULTS.message(RESULTS.MAX_STEPS_REACHED)
'the solve took max_steps steps without reaching t1'
"""
import numpy as np

from fgrad.core.backend import device_put
from fgrad.core.errors import IntegrationError
from fgrad.core.trace import Primitive
from fgrad.primitives.batching import move_axis

__all__ = ["RESULTS", "raise_if_failed"]


class RESULTS:
    """The status codes of a solve (``Solution.result``), as diffrax's."""
    SUCCESSFUL = 0
    MAX_STEPS_REACHED = 1
    DT_UNDERFLOW = 2
    DT_MIN_REACHED = 3
    NONFINITE = 4

    _messages = {
        SUCCESSFUL: "the solve succeeded",
        MAX_STEPS_REACHED: "the solve took max_steps steps without reaching t1",
        DT_UNDERFLOW: "the step size underflowed (a step would not move t)",
        DT_MIN_REACHED: "the step size controller asked for a step under dtmin",
        NONFINITE: "the state or its derivative became NaN or infinite",
    }
    _advice = {
        MAX_STEPS_REACHED: "raise max_steps (odeint: mxstep), loosen rtol/atol, or use a "
                           "solver for stiff problems if the problem is stiff",
        DT_UNDERFLOW: "the solution may blow up before t1, or the problem is stiff or "
                      "discontinuous: check the right-hand side near the time reached",
        DT_MIN_REACHED: "lower dtmin, or pass force_dtmin=True to take steps of dtmin",
        NONFINITE: "check the right-hand side for a division by zero, a log or sqrt of "
                   "a negative number, or a solution that blows up",
    }

    @classmethod
    def message(cls, code):
        return cls._messages.get(int(code), f"unknown status {int(code)}")

    @classmethod
    def advice(cls, code):
        return cls._advice.get(int(code), "")


def _check_impl(status, t_reached, *, what):
    # a few numbers, read on the host: the check decides whether to raise
    status, t_reached = (np.asarray(v) for v in device_put((status, t_reached), "cpu"))
    failed = np.flatnonzero(status.ravel() != RESULTS.SUCCESSFUL)
    if failed.size:
        k = failed[0]
        code, t = int(status.ravel()[k]), float(t_reached.ravel()[k])
        where = f" (example {k} of the batch)" if status.ndim else ""
        raise IntegrationError(
            f"{what}: {RESULTS.message(code)}, at t = {t!r}{where}. "
            f"{RESULTS.advice(code).capitalize()}; or pass throw=False to get the status "
            "in Solution.result instead of this error.")
    return ()


ode_check_p = Primitive("ode_check", _check_impl, lambda *avals, what: (),
                        multiple_results=True, nondiff=True, family="fgrad/ode/status.py")
ode_check_p.effectful = True          # kept by the compiler, though nothing reads it
# raises where the status is nonzero, else nothing: a compiled program compares
# the status and calls back only to raise (`fgrad.compiler.program_checks`)
ode_check_p.raises_if_nonzero = True


def _check_batch(args, dims, *, what):
    moved = [x if d is None else move_axis(x, d, 0) for x, d in zip(args, dims)]
    return ode_check_p.bind(*moved, what=what), ()


ode_check_p.batch = _check_batch


def raise_if_failed(status, t_reached, what):
    """Raise `fgrad.errors.IntegrationError` if ``status`` is not SUCCESSFUL
    (when the value exists: at once eagerly, at run time under jit)."""
    ode_check_p.bind(status, t_reached, what=what)
