"""The exceptions fgrad raises for misuse.

Each misuse has its own class, so callers can catch exactly what they mean to, and
each message says what went wrong and how to fix it. All derive from `FgradError`;
most also derive from the builtin that best describes the misuse (TypeError,
ValueError), so generic handlers keep working.
"""
import numpy as np


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
    """An in-place update of a traced array (``x[idx] = v``, ``x += y``) that fgrad
    cannot carry out as NumPy would: a write through a view it cannot follow
    (``y = x.T; y[0] = 1``), a dtype NumPy would refuse to store, or an update
    of an enclosing transformation's value inside an inner one. Updates fgrad
    can follow rebind the tracer to a new value and write no array's data."""


class MemoryLayoutError(FgradError, TypeError):
    """A traced array was asked about its memory (``strides``, ``flags``,
    ``ctypes``, ``data``) or to reinterpret it (``view(dtype)``, ``byteswap``):
    a traced value has none of its own."""


class TracerLeakError(FgradError, RuntimeError):
    """A tracer was used after the transformation that made it had returned."""


class CustomRuleError(FgradError, ValueError):
    """A user-supplied rule (custom_vjp bwd, custom_jvp rule) returned bad output."""


class NumpyFunctionError(FgradError, TypeError):
    """A NumPy function was called on a traced array and fgrad cannot route it."""


class BatchAxisError(FgradError, ValueError):
    """`vmap` was given axes that do not fit its arguments or outputs.

    >>> fgrad.vmap(f, in_axes=(0, 0))(np.ones(3), np.ones(4))   # doctest: +SKIP
    BatchAxisError: vmap got inconsistent batch sizes: argument 0 has size 3 ...

    Fix: make every mapped axis the same length, give ``in_axes`` one entry per
    positional argument (a pytree prefix of the arguments), and keep each axis
    within its array's rank.
    """


class BatchedConversionError(FgradError, TypeError):
    """``bool()``, ``float()`` or ``if`` on a value batched by `vmap`.

    A batched value holds one value per example, so Python cannot branch on it.
    Fix: select per example with ``fgrad.numpy.where(cond, a, b)``, or use
    ``fgrad.lax.cond`` for control flow.
    """


class LoopBatchingWarning(UserWarning):
    """A primitive without a batching rule ran once per example under `vmap`."""


class ConcretizationError(FgradError, TypeError):
    """Python needed a concrete value from an array that jit only knows abstractly.

    >>> @fgrad.jit                                     # doctest: +SKIP
    ... def f(x):
    ...     if x.sum() > 0:                            # bool() of a staged value
    ...         return x
    ...     return -x
    ConcretizationError: ... use fgrad.lax.cond ... or static_argnums ...

    Fix: express value-dependent control flow with `fgrad.lax.cond`, `switch`,
    `while_loop`, `fori_loop` or `scan`; or mark the argument the decision
    depends on as static (``jit(f, static_argnums=...)``).
    """


class StaticArgumentError(FgradError, TypeError):
    """A static argument of a jitted function is not hashable (or out of range)."""


class TraceLimitError(FgradError, RuntimeError):
    """A jitted function was traced more often than its ``max_traces`` allows."""


class ControlFlowError(FgradError, ValueError):
    """Misuse of fgrad.lax control flow (mismatched branch outputs, reverse-mode
    of a staged while_loop)."""


class IndexUpdateError(FgradError, IndexError):
    """An ``fgrad.at(x)[idx]`` update that cannot be done as asked (for example
    ``.min`` / ``.max`` with repeated indices)."""


class DeviceError(FgradError, RuntimeError):
    """`device_put` was asked for a device that is not available.

    >>> fgrad.device_put(x, "gpu")      # doctest: +SKIP
    DeviceError: device_put(x, 'gpu') needs CuPy, which is not installed ...

    Fix: install CuPy (``pip install 'fgrad[cuda]'``) on a machine with an NVIDIA
    GPU, or keep the data on the host with ``device_put(x, "cpu")``.
    """


class NNArgumentError(FgradError, ValueError):
    """An `fgrad.nn` or `fgrad.optim` function got arguments it cannot use:
    shapes that do not fit together, an unknown reduction, a missing random
    generator. The message names the argument and what it should be."""


class LinalgDerivativeError(FgradError, NotImplementedError):
    """A linear-algebra derivative that is undefined or not implemented here.

    No built-in rule raises it today (the decompositions differentiate complex
    and rectangular inputs); it is kept for user-defined linear-algebra
    primitives, which should raise it with a message that says what to do
    instead.
    """


class CallbackError(FgradError, ValueError):
    """A `fgrad.pure_callback` callback returned something other than what its
    ``result_shape_dtypes`` declared: another number of arrays, another shape,
    or a dtype that does not cast safely. Fix the declaration or the callback;
    the message names the offending output."""


class CallbackDerivativeError(FgradError, TypeError):
    """`fgrad.pure_callback` was differentiated. A host callback is opaque, so it
    has no derivative of its own: wrap the function that calls it in
    `fgrad.custom_jvp` or `fgrad.custom_vjp` and give the rule there."""


class ConvergenceError(FgradError, RuntimeError):
    """A solver stopped without converging (SciPy reported failure, or an
    iteration reached its limit), so its result is not the solution whose
    derivative fgrad would compute. The message carries the solver's own
    report; raise the iteration limit, loosen the tolerance, or start closer."""


class ImplicitSolveError(FgradError, ArithmeticError):
    """The linear system of an implicit derivative could not be solved
    reliably: the Jacobian (or Hessian) at the solution is singular or badly
    conditioned, or its iterative solve did not converge. The solution is then
    not a smooth function of the parameters (a degenerate optimum, a root of
    multiplicity two), and no derivative is returned rather than a wrong one."""


class TapError(FgradError, ValueError):
    """A `fgrad.tap` / `fgrad.tap_forward` callback returned a value of the wrong shape."""


class NonFiniteError(FgradError, FloatingPointError):
    """Under `fgrad.debug_nans`, an equation produced a NaN or an infinity.

    The message names the primitive, the pass (forward, tangent or reverse),
    the line of user code that recorded the equation and the input shapes.
    """


class NumpyArgumentError(FgradError, ValueError):
    """An `fgrad.numpy` function got arguments it cannot use together, or an
    option that NumPy has and fgrad does not implement.

    >>> fnp.clip(x, 0.0, 1.0, min=0.0)                  # doctest: +SKIP
    NumpyArgumentError: clip: pass the bounds either as a_min/a_max or as min/max ...

    Fix: follow the message; it names the argument and the values it accepts.
    """


class DerivativeConversionError(FgradError, TypeError):
    """``float()``, ``int()``, ``complex()``, ``.item()`` or ``.tolist()`` of a
    value that fgrad is differentiating: the plain Python number would drop its
    derivative silently, so fgrad refuses (as JAX does).

    >>> fgrad.grad(lambda a: float(fnp.sum(a)))(x)     # doctest: +SKIP
    DerivativeConversionError: float() of an array that is being differentiated ...

    Fix: keep the value an array (``fnp.sum(a)``, not ``float(fnp.sum(a))``), or
    call ``fgrad.stop_gradient`` on it first if it is meant to be a constant.
    """


class ArrayNamespaceError(FgradError, TypeError):
    """Array API code (scikit-learn, SciPy) asked for the one namespace of a
    traced array and a NumPy array: an array made without ``device=`` is a
    NumPy array, and a NumPy array cannot hold a traced value.

    For example, ``scipy.signal.wiener(x)`` of a traced ``x`` (SciPy makes
    ``xp.ones(mysize)`` without ``device=``) raises ``ArrayNamespaceError:
    .../_signaltools.py:237: `xp = array_namespace(in1, in2)` ...``.

    Fix: make your own constants on the traced value's device,
    ``fnp.asarray(c, device=x.device)``; where the library makes the array
    itself, the function cannot run on traced values (docs/array-api.md lists
    such functions).
    """


class RetracingWarning(UserWarning):
    """A jitted function was traced again and again (a new shape, dtype or static
    value on many calls): each trace stages and compiles it anew."""


class ArraySubclassError(FgradError, TypeError):
    """An array subclass fgrad cannot convert without changing its meaning (a
    masked array: converting it would drop the mask)."""


class DaskArgumentError(FgradError, ValueError):
    """`fgrad.dask` got arguments it cannot split into row chunks.

    >>> fgrad.dask.grad(loss)(params, X, y_numpy)        # doctest: +SKIP
    DaskArgumentError: fgrad.dask.grad: argument 2 is a numpy.ndarray ...

    Raised before any task is submitted: batch arguments that are not Dask
    arrays, chunked along an axis other than the rows or with row chunks that
    differ between arguments, an unknown ``reduce``, parameters that are Dask
    arrays. Fix: follow the message; it names the argument and the call to make
    (``da.from_array``, ``rechunk``, ``compute``).
    """


class OptionalDependencyError(FgradError, ModuleNotFoundError):
    """A feature needs a package that is not installed (the message names the
    extra to install, e.g. ``pip install 'fgrad[dask]'``). A
    ``ModuleNotFoundError``, as Python's own import would raise."""


class CheckpointError(FgradError, ValueError):
    """`fgrad.tree.save` got a tree it cannot write without pickle (an object
    array, a traced value, a dict key JSON cannot hold), or `fgrad.tree.load` a
    file `fgrad.tree.save` did not write. The message names the place in the
    tree and what to change."""


class CheckpointMismatchError(CheckpointError):
    """`fgrad.tree.load(path, like=tree)` read a file that does not match
    ``like``: another structure (keys, lengths, node types) or a leaf of
    another shape or dtype.

    >>> fgrad.tree.load("ckpt.npz", like=params)            # doctest: +SKIP
    CheckpointMismatchError: fgrad.tree.load('ckpt.npz'): at ['w'] the file holds
    float64[3, 2] where like= has float64[3, 4] ...

    Fix: load with the ``like`` the file was saved from (the same model and
    optimizer settings), or without ``like`` to see what the file holds.
    """


class IntegrationError(ConvergenceError):
    """An ODE solve failed (a `ConvergenceError`, so one ``except`` catches
    every solver's failure). In `fgrad.scipy.integrate`: SciPy's integrator
    reported failure (a status below zero: the step size underflowed, too much
    work), or the right-hand side or its vector-Jacobian product returned NaN,
    in the forward solve or in the adjoint pass of its derivative; the message
    says which pass, the time reached and SciPy's own message. In `fgrad.ode`:
    the solve took ``max_steps`` steps, its step size underflowed or fell
    under ``dtmin``, or the state became NaN or infinite, eagerly or when the
    compiled code runs; the message says which and what to change
    (``throw=False`` returns the status instead)."""


class OdeArgumentError(FgradError, ValueError):
    """An `fgrad.ode` solve was set up in a way it cannot run: a fixed-step
    solver under an adaptive controller, no ``dt0`` for a constant step,
    output times outside ``[t0, t1]`` or not sorted, an unknown adjoint. The
    message says what to pass instead."""


class RandomKeyError(FgradError, TypeError):
    """A `fgrad.random` function got something other than a key: a key is a
    uint32 array of shape ``(2,)`` (a batch of keys ``(n, 2)``).

    >>> fgrad.random.normal(0, (3,))                     # doctest: +SKIP
    RandomKeyError: fgrad.random.normal: key must be a uint32 array of shape (2,) ...

    Fix: make one with ``fgrad.random.key(seed)``; to draw with each of a batch
    of keys, `fgrad.vmap` over them.
    """


class RandomArgumentError(FgradError, ValueError):
    """A `fgrad.random` sampler got a shape, dtype or parameter it cannot use:
    a non-float dtype for a continuous distribution, parameters that do not
    broadcast to the requested shape, more draws without replacement than
    there are items. The message names the argument and what it should be."""


class StatefulRandomnessError(FgradError, TypeError):
    """A NumPy random generator (``np.random.Generator``, ``RandomState``) met
    `jit` or `vmap`. Both run the function once for many calls or many
    examples, so the generator would be drawn from once, while tracing, and
    every call and every example would silently get the same numbers.

    >>> fgrad.jit(lambda x, rng: nn.dropout(x, 0.5, rng))(x, rng)  # doctest: +SKIP
    StatefulRandomnessError: jit(<lambda>)'s argument 'rng' is a NumPy Generator ...

    Fix: pass a `fgrad.random` key, split it for each call
    (``key, sub = fgrad.random.split(key)``) and draw with it.
    """


NUMPY_GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)


def check_not_numpy_generator(value, where):
    """Raise `StatefulRandomnessError` if ``value`` is a NumPy random generator
    that ``where`` (e.g. ``"jit(f)'s argument 'rng'"``) would draw from while
    tracing.

    >>> check_not_numpy_generator(np.ones(2), "an argument")
    """
    if isinstance(value, NUMPY_GENERATORS):
        raise StatefulRandomnessError(
            f"{where} is a NumPy {type(value).__name__}: under jit and vmap a function "
            "runs once for many calls or many examples, so a NumPy generator is drawn "
            "from once, while tracing, and every call and every example would get the "
            "same numbers. Pass a fgrad.random key instead: key = fgrad.random.key(0), "
            "then key, sub = fgrad.random.split(key) for each call, and draw with "
            "fgrad.random.normal(sub, shape) (fgrad.nn.dropout and the initializers "
            "take the key in place of the generator).")


class LaxArgumentError(FgradError, ValueError):
    """An `fgrad.lax` array operation got arguments it cannot use, where JAX
    refuses them too: window sizes that do not fit the array or a start index
    per axis missing, ``top_k``'s ``k`` or ``sort``'s ``num_keys`` out of range,
    a negative ``unroll``, or ``fori_loop``'s ``unroll`` with traced bounds.
    The message names the argument and the range it must be in."""


class SparseShapeError(FgradError, ValueError):
    """A dense operand whose shape does not fit a sparse matrix (``A @ x`` with
    ``len(x) != A.shape[1]``, a right-hand side of the wrong length).

    >>> fgrad.sparse.csr_array(A) @ np.ones(A.shape[1] + 1)   # doctest: +SKIP
    SparseShapeError: sparse matmul: a 4x4 sparse matrix multiplies ...

    Fix: the message gives the shape the operand must have.
    """


class SparseStructureError(FgradError, ValueError):
    """Sparse index arrays that do not describe a matrix, values that do not
    fit the structure, or two sparse arrays with different structures where
    an operation (``A + B``) needs the same one.

    Fix: build both from the same index arrays, or convert one explicitly
    (``.todense()``); the message names the arrays and lengths involved.
    """


class SingularMatrixError(FgradError, ValueError):
    """A sparse direct solve (`spsolve`, `splu`) met an exactly singular matrix.

    Fix: check the matrix (a boundary condition missing, a zero row); a
    least-squares solve (``lsqr``) suits a matrix that is singular on purpose.
    """


# Users meet these as fgrad.errors.X (the public module re-exports them): name
# them so in tracebacks and reprs, and so pickling finds them there.
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, (FgradError, Warning)) \
            and _cls.__module__ == __name__:
        _cls.__module__ = "fgrad.errors"
del _cls


class ScipyArgumentError(FgradError, ValueError):
    """An `fgrad.scipy` function got arguments SciPy would refuse too: a
    covariance that is not positive semidefinite, or a singular one without
    ``allow_singular=True``. The message says which and what to pass instead."""

