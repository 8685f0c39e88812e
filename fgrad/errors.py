"""The exceptions fgrad raises for misuse.

Each misuse has its own class, so callers can catch exactly what they mean to, and
each message says what went wrong and how to fix it. All derive from `FgradError`;
most also derive from the builtin that best describes the misuse (TypeError,
ValueError), so generic handlers keep working.
"""


class FgradError(Exception):
    """Base class of every error fgrad raises on purpose."""


class NonScalarOutputError(FgradError, TypeError):
    """`grad` of a function whose output is not a real scalar.

    >>> fgrad.grad(lambda x: x * 2)(np.ones(3))      # doctest: +SKIP
    NonScalarOutputError: grad requires a scalar output, got shape (3,) ...

    Fix: reduce the output (``.sum()``), or use `fgrad.vjp` / `fgrad.jacrev`.
    """


class InvalidInputError(FgradError, TypeError):
    """A differentiated input that is not a floating-point (or complex) array."""


class CotangentError(FgradError, ValueError):
    """A cotangent (or tangent) whose structure, shape or dtype does not match."""


class MissingRuleError(FgradError, NotImplementedError):
    """A primitive has no rule for the requested transformation."""


class BackendMismatchError(FgradError, TypeError):
    """Arrays from different backends (NumPy and CuPy) were mixed in one call."""


class ArgnumError(FgradError, ValueError):
    """`argnums` / `argnames` names an argument the function was not given."""


class ImmutableArrayError(FgradError, TypeError):
    """In-place assignment on a traced array; use ``fgrad.at(x)[idx].set(v)``."""


class TracerLeakError(FgradError, RuntimeError):
    """A tracer was used after the transformation that made it had returned."""


class CustomRuleError(FgradError, ValueError):
    """A user-supplied rule (custom_vjp bwd, custom_jvp rule) returned bad output."""


class NumpyFunctionError(FgradError, TypeError):
    """A NumPy function was called on a traced array and fgrad cannot route it."""


class LinalgDerivativeError(FgradError, NotImplementedError):
    """A linear-algebra derivative that is undefined or not implemented here.

    >>> fgrad.grad(lambda a: fnp.linalg.svd(a)[1].sum())(np.ones((3, 2)))  # doctest: +SKIP
    LinalgDerivativeError: svd with full_matrices=True has no derivative ...

    Fix: follow the message (pass ``full_matrices=False``, use a real input, ...).
    """
