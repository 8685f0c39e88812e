"""ODE solvers written with `fgrad.lax`: they stage into the caller's graph,
compile with it under `jit`, batch under `vmap` and differentiate in every
mode (docs/odes.md).

Two entry points: `odeint`, `jax.experimental.ode.odeint`'s signature and
semantics (porting is an import change), and `solve`, diffrax's
``diffeqsolve`` (solver, ``t0``/``t1``/``dt0``, `SaveAt`, a step-size
controller, pytree states and arguments, ``max_steps``, the adjoint).

>>> import numpy as np, fgrad.ode
>>> np.round(fgrad.ode.odeint(lambda y, t: -y, np.ones(1), np.array([0.0, 1.0]))[-1], 7)
array([0.3678794])
"""
from fgrad.ode.adjoint import BacksolveAdjoint as BacksolveAdjoint
from fgrad.ode.adjoint import DirectAdjoint as DirectAdjoint
from fgrad.ode.adjoint import RecursiveCheckpointAdjoint as RecursiveCheckpointAdjoint
from fgrad.ode.controllers import ConstantStepSize as ConstantStepSize
from fgrad.ode.controllers import PIDController as PIDController
from fgrad.ode.controllers import max_norm as max_norm
from fgrad.ode.controllers import rms_norm as rms_norm
from fgrad.ode.implicit import AbstractESDIRK as AbstractESDIRK
from fgrad.ode.implicit import Kvaerno3 as Kvaerno3
from fgrad.ode.implicit import Kvaerno5 as Kvaerno5
from fgrad.ode.odeint import odeint as odeint
from fgrad.ode.solve import ODETerm as ODETerm
from fgrad.ode.solve import SaveAt as SaveAt
from fgrad.ode.solve import Solution as Solution
from fgrad.ode.solve import solve as solve
from fgrad.ode.solvers import RK4 as RK4
from fgrad.ode.solvers import AbstractRungeKutta as AbstractRungeKutta
from fgrad.ode.solvers import Dopri5 as Dopri5
from fgrad.ode.solvers import Dopri8 as Dopri8
from fgrad.ode.solvers import Euler as Euler
from fgrad.ode.solvers import Heun as Heun
from fgrad.ode.solvers import Midpoint as Midpoint
from fgrad.ode.solvers import Tsit5 as Tsit5
from fgrad.ode.status import RESULTS as RESULTS

__all__ = [
    "odeint", "solve", "ODETerm", "SaveAt", "Solution", "RESULTS",
    "Euler", "Heun", "Midpoint", "RK4", "Dopri5", "Tsit5", "Dopri8", "AbstractRungeKutta",
    "Kvaerno3", "Kvaerno5", "AbstractESDIRK",
    "ConstantStepSize", "PIDController", "rms_norm", "max_norm",
    "DirectAdjoint", "RecursiveCheckpointAdjoint", "BacksolveAdjoint",
]
