"""Testing derivatives and transformations of your own functions and rules.

Without extra dependencies:

- `check_grads`: forward and reverse mode, first and second order, against
  finite differences (and against each other);
- `check_jit` and `check_vmap`: jit against eager, vmap against a Python loop,
  for values and VJPs;
- `check_custom_vjp`: the usual mistakes in a `fgrad.custom_vjp` rule, by name.

With hypothesis (``pip install 'fgrad[testing]'``):

- `fgrad.testing.strategies`: arrays in a domain (``positive``,
  ``unit_interval``, ``spd``, ``well_conditioned``, ``away_from``), shapes that
  broadcast, pytrees and batches;
- `fgrad.testing.properties.given_check_grads`: every check above over many
  drawn inputs, shrinking a failure to a small printed example.

See docs/testing.md.

>>> import numpy as np, fgrad.numpy as fnp
>>> from fgrad.testing import check_grads
>>> check_grads(fnp.tanh, (np.array([0.5, -1.0]),), order=2)
"""
from fgrad.testing.consistency import check_jit as check_jit
from fgrad.testing.consistency import check_vmap as check_vmap
from fgrad.testing.custom_rules import CustomRuleMistake as CustomRuleMistake
from fgrad.testing.custom_rules import check_custom_vjp as check_custom_vjp
from fgrad.testing.gradients import GradientCheckError as GradientCheckError
from fgrad.testing.gradients import check_grads as check_grads

__all__ = ["check_grads", "check_jit", "check_vmap", "check_custom_vjp",
           "GradientCheckError", "CustomRuleMistake"]
