"""GradBench's ``hello`` eval: ``square`` and its derivative ``double``."""

import fgrad

from benchmarks.gradbench.tool import timed


def _square(x):
    return x * x


square = timed(prepare=float, output=float)(_square)
double = timed(prepare=float, output=float)(fgrad.grad(_square))
