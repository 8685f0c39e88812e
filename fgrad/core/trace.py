"""Primitives, abstract values, tracers, and the trace stack.

A `Primitive` is one row of the dispatch table: its columns are the array
implementation (``impl``), the shape/dtype rule (``abstract``), the reverse rule
(``vjp``), the forward rule (``jvp``) and the batching rule (``batch``). Every
transformation is an interpreter (a `Trace`) that reads one column of that row.

`Primitive.bind` is the single entry point: with no tracer among the arguments it
calls ``impl`` directly (the eager fast path); otherwise it hands the call to the
trace with the highest level among its arguments. Traces nest by level, so
``grad(grad(f))`` and ``jvp(grad(f))`` are just two interpreters stacked, the inner
one binding on the outer one's tracers.
"""
import contextlib
import os
import sys
import threading
import weakref

import numpy as np

from fgrad.core.errors import (
    ArraySubclassError,
    BatchedConversionError,
    ConcretizationError,
    DerivativeConversionError,
    ImmutableArrayError,
    MissingRuleError,
    NumpyFunctionError,
    TracerLeakError,
)

# ---------------------------------------------------------------------------
# Abstract values
# ---------------------------------------------------------------------------


class ShapedArray:
    """The abstract value of an array: its shape and dtype.

    ``weak_type`` marks Python scalars, which follow NumPy 2's promotion rule of
    taking the other operand's precision (``float32_array * 2.0`` stays float32).

    >>> ShapedArray((2, 3), np.float32)
    f32[2,3]
    """

    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape, dtype, weak_type=False):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = weak_type

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __eq__(self, other):
        return (isinstance(other, ShapedArray) and self.shape == other.shape
                and self.dtype == other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        return f"{short_dtype(self.dtype)}[{','.join(map(str, self.shape))}]"

    def strip_weak(self):
        return ShapedArray(self.shape, self.dtype)


_DTYPE_SHORT = {"float": "f", "int": "i", "uint": "u", "complex": "c", "bool": "bool"}


def short_dtype(dtype):
    """``float32`` -> ``f32``, as in graph listings."""
    name = np.dtype(dtype).name
    for long, short in _DTYPE_SHORT.items():
        if name.startswith(long):
            return name.replace(long, short)
    return name


_PY_SCALAR_DTYPES = {bool: np.bool_, int: np.int64, float: np.float64,
                     complex: np.complex128}


def _fast_aval(shape, dtype):
    # get_aval runs for every residual reverse mode drops: skip __init__'s
    # conversions, which arrays' own shape tuples and dtypes do not need
    aval = _new_shaped_array(ShapedArray)
    aval.shape = shape
    aval.dtype = dtype
    aval.weak_type = False
    return aval


_new_shaped_array = object.__new__


def get_aval(x):
    """The `ShapedArray` of an array, a tracer or a Python scalar."""
    if isinstance(x, Tracer):
        return x.aval
    if type(x) is ShapedArray:
        return x
    dtype = getattr(x, "dtype", None)
    if dtype is not None:
        shape = x.shape
        return _fast_aval(shape if type(shape) is tuple else tuple(shape),
                          dtype if isinstance(dtype, np.dtype) else np.dtype(dtype))
    scalar_dtype = _PY_SCALAR_DTYPES.get(type(x))
    if scalar_dtype is not None:
        return ShapedArray((), scalar_dtype, weak_type=True)
    arr = np.asarray(x)
    return ShapedArray(arr.shape, arr.dtype)


def is_float_dtype(dtype):
    """True for the dtypes that carry derivatives: floating and complex."""
    return dtype.kind in "fc"


class Zero:
    """A symbolic zero tangent or cotangent of abstract value ``aval``.

    Rules receive `Zero` where a derivative is known to be zero and skip the work;
    nothing ever allocates an array of zeros just to add it.
    """

    __slots__ = ("_aval", "_of")

    def __init__(self, aval):
        self._aval = aval
        self._of = None

    @classmethod
    def like(cls, value):
        """The zero tangent of ``value``, its aval computed only if a rule asks.

        Forward mode makes one for every constant operand of every primitive;
        most rules only test ``type(t) is Zero``.
        """
        zero = cls(None)
        zero._of = value
        return zero

    @property
    def aval(self):
        if self._aval is None:
            self._aval = get_aval(self._of)
            self._of = None
        return self._aval

    def __repr__(self):
        return f"Zero({self.aval})"


def is_zero(x):
    return x is None or type(x) is Zero


# ---------------------------------------------------------------------------
# Primitives: the dispatch table
# ---------------------------------------------------------------------------

# name -> Primitive.  Written when a module defining primitives is imported (like
# a registry of classes), never during a computation.
primitive_table = {}


class Primitive:
    """A pure array function and its row of transformation rules.

    Columns (each ``None`` until registered):

    - ``impl(*args, **params)``: the computation on backend arrays;
    - ``abstract(*avals, **params)``: output `ShapedArray` (tuple if several);
    - ``vjp(ct, ans, needed, *args, **params)``: a tuple with one cotangent per
      argument (``None`` for zero or not needed), written with fgrad primitives;
    - ``jvp(tangents, ans, *args, **params)``: the output tangent, ``tangents``
      holding a `Zero` for every argument without one;
    - ``batch``: filled in by vmap.

    ``nondiff=True`` declares that the output has no derivative (comparisons,
    ``floor``): its derivative is zero by definition, not by a missing rule.

    >>> double_p = Primitive("double", impl=lambda x: 2 * x)
    >>> double_p.bind(np.float64(3.0))
    np.float64(6.0)
    """

    # whether NumPy's version of it returns a view of its first operand (basic
    # indexing, reshape, transpose): `bind` then links the result to that
    # operand, so an in-place update of either reaches the other as it does in
    # NumPy (`fgrad.numpy`'s ``__setitem__`` reads the links)
    makes_view = False

    def __init__(self, name, impl=None, abstract=None, *, multiple_results=False,
                 nondiff=False, family=None, register=True):
        self.name = name
        self.impl = impl
        self.abstract = abstract
        self.vjp = None
        self.jvp = None
        self.batch = None
        # lowering(xp, **params) -> a callable of the operands alone: the
        # backend's own function, resolved once when jit compiles a graph, so
        # compiled code skips impl's per-call backend lookup. Optional.
        self.lowering = None
        self.multiple_results = multiple_results
        self.nondiff = nondiff
        # What the VJP rules read as values (see def_vjp); None = everything.
        self.vjp_reads = None
        self._residual_cache = {}
        # where its rules live, for error messages: "primitives/elementwise.py"
        self.family = family
        if register:
            if name in primitive_table:
                raise ValueError(f"a primitive named {name!r} is already registered")
            primitive_table[name] = self

    def __repr__(self):
        return self.name

    def bind(self, *args, **params):
        """Apply the primitive: eagerly, or through the innermost active trace."""
        top = None
        for a in args:
            if isinstance(a, Tracer):
                trace = a.owner
                if top is None or trace.level > top.level:
                    top = trace
            elif type(a) is not np.ndarray and isinstance(a, REINTERPRETED):
                args = tuple(map(plain_array, args))    # np.matrix, masked
        if top is None:
            return self.impl(*args, **params)
        if not top.active:
            raise TracerLeakError(_leak_message(self))
        if self.makes_view:
            return note_view(top.process(self, args, params), args[0], self, len(args),
                             params)
        return top.process(self, args, params)

    def residuals(self, needed):
        """``(argument positions, keep ans)`` the VJP reads when ``needed``.

        Derived from the static ``vjp_reads`` declaration and memoised per
        pattern of needed arguments (there are few: usually one or two).
        """
        kept = self._residual_cache.get(needed)
        if kept is None:
            reads = self.vjp_reads
            union = set()
            for i, need in enumerate(needed):
                if need:
                    union |= reads[min(i, len(reads) - 1)] \
                        if isinstance(reads, (list, tuple)) else reads
            kept = (frozenset(k for k in union if k != "ans"), "ans" in union)
            self._residual_cache[needed] = kept
        return kept

    # -- registering rules ---------------------------------------------------

    def def_vjp(self, *rules, reads=None):
        """Register one VJP rule per positional argument.

        ``rule(ct, ans, *args, **params) -> ct_arg``; ``None`` in place of a rule
        marks an argument with no derivative (an integer index, a mask).

        ``reads`` declares, per argument, which values its rule reads: a set of
        argument positions and/or ``"ans"`` (one set for all arguments is also
        accepted). Reverse mode keeps only those arrays alive until the sweep;
        every other floating-point array is replaced by its `ShapedArray`, which
        still answers ``.shape`` and ``.dtype``. ``None`` keeps everything.
        """
        self.vjp_reads = reads
        if len(rules) == 1 and rules[0] is not None:
            only = rules[0]

            def vjp_unary(ct, ans, needed, *args, **params):
                return (only(ct, ans, *args, **params),)
            self.vjp = vjp_unary
            return vjp_unary

        if len(rules) == 2 and None not in rules:
            first, second = rules

            def vjp_binary(ct, ans, needed, *args, **params):
                return (first(ct, ans, *args, **params) if needed[0] else None,
                        second(ct, ans, *args, **params) if needed[1] else None)
            self.vjp = vjp_binary
            return vjp_binary

        def vjp(ct, ans, needed, *args, **params):
            out = []
            for i, need in enumerate(needed):
                if not need:
                    out.append(None)
                    continue
                rule = rules[i] if i < len(rules) else None
                if rule is None:
                    raise MissingRuleError(missing_rule_message(self, "vjp", i))
                out.append(rule(ct, ans, *args, **params))
            return tuple(out)
        self.vjp = vjp
        return vjp

    def def_vjp_joint(self, rule, reads=None):
        """Register a VJP rule computing every needed cotangent at once.

        ``rule(ct, ans, needed, *args, **params) -> tuple``; used where the
        cotangents share work or the arity varies (``concatenate``). ``reads`` as
        in `def_vjp`.
        """
        self.vjp_reads = reads
        self.vjp = rule
        return rule

    def def_jvp(self, *rules):
        """Register one JVP rule per positional argument, summed over arguments.

        ``rule(x_dot, ans, *args, **params) -> tangent contribution``.
        """
        if len(rules) == 1 and rules[0] is not None:
            only = rules[0]

            def jvp_unary(tangents, ans, *args, **params):
                if type(tangents[0]) is Zero:
                    return None
                return only(tangents[0], ans, *args, **params)
            self.jvp = jvp_unary
            return jvp_unary

        def jvp(tangents, ans, *args, **params):
            total = None
            for i, t in enumerate(tangents):
                if type(t) is Zero:
                    continue
                rule = rules[i] if i < len(rules) else None
                if rule is None:
                    raise MissingRuleError(missing_rule_message(self, "jvp", i))
                contribution = rule(t, ans, *args, **params)
                if contribution is None:
                    continue
                total = contribution if total is None else total + contribution
            return total
        self.jvp = jvp
        return jvp

    def def_jvp_joint(self, rule):
        """Register a JVP rule ``rule(tangents, ans, *args, **params)``."""
        self.jvp = rule
        return rule


def missing_rule_message(prim, transformation, argnum=None):
    """What to say when ``prim`` has no ``transformation`` rule."""
    arg = "" if argnum is None else f" for argument {argnum}"
    if prim.family:
        where = f"add it in {prim.family} next to the primitive's other rules"
    else:
        where = f"register it with fgrad.def{transformation}({prim.name}, ...)"
    return (f"primitive '{prim.name}' has no {transformation.upper()} rule{arg}, "
            f"which {_USED_BY[transformation]} needs: {where}, or wrap the calling "
            "function in fgrad.custom_vjp / fgrad.custom_jvp to supply the "
            "derivative yourself.")


_USED_BY = {"vjp": "reverse mode (grad, vjp, jacrev)",
            "jvp": "forward mode (jvp, jacfwd, hessian)",
            "batch": "vmap",
            "abstract": "jit staging"}


def _leak_message(prim):
    return (f"'{prim.name}' was applied to a tracer that escaped the transformation "
            "that created it (stored in a global, a closure or a list during a grad/"
            "jvp call and used after it returned). Return the value from the "
            "transformed function instead.")


# ---------------------------------------------------------------------------
# Traces and the thread-local trace stack
# ---------------------------------------------------------------------------


class _TraceState(threading.local):
    """Per-thread interpreter state: the only mutable state fgrad keeps."""

    def __init__(self):
        self.trace_stack = []
        self.check_graphs = False
        # fgrad.debug_nans: None defers to the FGRAD_DEBUG_NANS variable; the
        # context is the tag (pass, primitive, line) of what is being evaluated
        self.debug_nans = None
        self.nan_context = None


trace_state = _TraceState()


class Trace:
    """An interpreter of primitives at one nesting level."""

    __slots__ = ("level", "active")
    # whether `binary_into_operand` may write into a dead temporary's buffer
    # (reverse mode's, where fgrad.numpy's operators ask it to)
    reuse_temporaries = False

    def __init__(self, level):
        self.level = level
        self.active = True

    def process(self, prim, args, params):
        raise NotImplementedError

    def lift(self, value):
        """A tracer of this trace standing for ``value``, a constant or an
        enclosing trace's tracer (what `Tracer.rebind` gives a new value)."""
        raise NotImplementedError

    def binary_into_operand(self, prim, x, y):
        """``prim(x, y)`` written into the buffer of ``x``, a tracer of this
        trace that no one can reach after the call, or None to bind as usual."""
        return None

    def process_custom_vjp(self, fun, fwd, bwd, args):
        raise NotImplementedError

    def process_custom_jvp(self, fun, rule, args):
        raise NotImplementedError


@contextlib.contextmanager
def new_trace(trace_type, *init_args):
    """Open a trace one level above the current top, and close it on exit.

    Closing marks the trace inactive, so a tracer leaked out of it is reported
    instead of silently joining some later computation.
    """
    stack = trace_state.trace_stack
    trace = trace_type(len(stack) + 1, *init_args)
    stack.append(trace)
    try:
        yield trace
    finally:
        stack.pop()
        trace.active = False


def current_level():
    return len(trace_state.trace_stack)


@contextlib.contextmanager
def checking_graphs(enabled=True):
    """Re-check every recorded graph against the abstract rules (for tests).

    Inside this context, each reverse-mode graph is verified with
    `fgrad.core.graph.check_graph` before its sweep, so a primitive whose ``impl``
    and ``abstract`` disagree fails at the equation that recorded it.
    """
    previous = trace_state.check_graphs
    trace_state.check_graphs = enabled
    try:
        yield
    finally:
        trace_state.check_graphs = previous


def graph_checking_enabled():
    return trace_state.check_graphs


NANS_ENV = "FGRAD_DEBUG_NANS"


def nans_enabled():
    """Whether `fgrad.debug_nans` (or ``FGRAD_DEBUG_NANS=1``) is on.

    Read once when a transformation starts, which then picks its checking
    interpreter; the normal interpreters never ask.
    """
    enabled = trace_state.debug_nans
    if enabled is not None:
        return enabled
    return os.environ.get(NANS_ENV, "") not in ("", "0")


# ---------------------------------------------------------------------------
# Tracers
# ---------------------------------------------------------------------------


class Tracer:
    """An array stand-in that routes every operation to its trace.

    Arithmetic, comparison, indexing and the array methods are installed by
    `fgrad.numpy` (which owns the functions they call); NumPy functions applied
    to a tracer come back to fgrad through ``__array_ufunc__`` and
    ``__array_function__``.
    """

    # ``owner``: the trace this tracer belongs to (each interpreter compares it
    # with itself to tell its own tracers from an enclosing transformation's).
    # ``view_of`` (set on views only): ``(base, primitive, params)`` of the
    # view operation that made it from the tracer ``base`` (`note_view`);
    # ``views`` (set on bases only): weak references to the views made of it.
    __slots__ = ("owner", "view_of", "views", "__weakref__")
    # above ndarray's, so `ndarray + tracer` defers to the tracer's operators
    __array_priority__ = 1000
    # the namespace NumPy functions called on a tracer are looked up in; set by
    # `fgrad.numpy` when it is imported (it sits above this layer)
    numpy_namespace = None
    # ``sparse_matmul(a, b)``: the product of a sparse matrix (scipy.sparse or
    # fgrad.sparse) and a dense operand, for ``fgrad.numpy.matmul`` and ``@``;
    # set by `fgrad.sparse` when it is imported
    sparse_matmul = None
    # Modules whose operators coerce their other operand with np.asanyarray
    # only to choose what to do, and return NotImplemented for a 0-d object
    # array: to them alone `__array__` answers with one, so that Python asks
    # the tracer's reflected operator (`A_scipy @ tracer` reaches
    # `Tracer.__rmatmul__`). `fgrad.sparse` names scipy.sparse's when imported.
    deferring_callers = frozenset()
    # ``where_called()``: the line of code outside fgrad behind the current call
    # (a library's line when a library converts a tracer), for error messages;
    # set by `fgrad.interpreters.sources` when it is imported
    where_called = staticmethod(lambda: "")

    @property
    def aval(self):
        raise NotImplementedError

    def concrete(self):
        """The concrete value behind the tracer (eager traces have one)."""
        raise NotImplementedError

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: len(self.aval.shape))
    size = property(lambda self: self.aval.size)

    def __len__(self):
        shape = self.aval.shape
        if not shape:
            raise TypeError("len() of a 0-d traced array")
        return shape[0]

    def __iter__(self):
        if not self.aval.shape:
            raise TypeError("iteration over a 0-d traced array")
        return (self[i] for i in range(self.aval.shape[0]))

    # Python conversions need a concrete value; eager traces have one.
    def __bool__(self):
        return bool(self.concrete())

    def __float__(self):
        return float(self.concrete())

    def __int__(self):
        return int(self.concrete())

    def __complex__(self):
        return complex(self.concrete())

    def __index__(self):
        return int(self.concrete())

    def value_for(self, how):
        """The concrete value behind the tracer, for a conversion named by ``how``
        (``".item()"``) that would leave fgrad; each trace refuses in its own
        words where there is no such value or it would drop a derivative."""
        return self.concrete()

    def constant_value(self):
        """The value, where one is known and no transformation differentiates
        it (an integer or a comparison under grad, a constant under jit); else
        None. NumPy may take it (``np.asarray``) without dropping anything."""
        return None

    def item(self, *args):
        return self.value_for(".item()").item(*args)

    def tolist(self):
        return self.value_for(".tolist()").tolist()

    # -- in-place updates: a tracer is a name that can be given a new value ------

    def clone(self):
        """A second tracer of the same value (what ``x.copy()`` returns): giving
        one of them a new value (`rebind`) leaves the other as it is."""
        twin = _new_object(type(self))
        for slot in value_slots(type(self)):
            setattr(twin, slot, getattr(self, slot))
        return twin

    def rebind(self, value):
        """Make this tracer stand for ``value`` from now on, as ``x[idx] = v`` and
        ``x += y`` make NumPy's ``x`` hold a new value: every holder of this
        tracer object sees it, and no array's data is written. Only a tracer of
        the innermost transformation can be rebound: an enclosing one's may be
        held by the inner transformation as a constant it has already read."""
        trace = self.owner
        stack = trace_state.trace_stack
        if not trace.active:
            raise TracerLeakError("an in-place update was applied to a tracer that "
                                  "escaped the transformation that created it. Return "
                                  "the value from the transformed function instead.")
        if stack[-1] is not trace:
            raise ImmutableArrayError(
                f"an in-place update (x[idx] = v, x += y) of a traced array ({self.aval}) "
                "that belongs to an enclosing transformation, inside an inner one "
                "(a grad, jit, vmap or lax body called within it) that may already have "
                "read its value. Update a copy made inside the inner function instead: "
                "y = x.copy(); y[idx] = v, or y = fgrad.at(x)[idx].set(v).")
        if not (type(value) is type(self) and value.owner is trace):
            value = trace.lift(value)
        for slot in value_slots(type(self)):
            setattr(self, slot, getattr(value, slot))

    def carried(self):
        """The array (or inner tracer) this tracer carries, or None where it
        has none (staged by jit)."""
        return None

    @property
    def device(self):
        """The device of the data under every layer of tracers, as the Array
        API standard's ``x.device``: ``"cpu"`` for NumPy data, CuPy's device for
        CuPy data; a value staged by jit runs where its inputs are, and answers
        ``"cpu"`` as NumPy does."""
        value = self
        while isinstance(value, Tracer):
            value = value.carried()
        return getattr(value, "device", "cpu")

    @property
    def base(self):
        """The traced array this one is a view of (as ``ndarray.base``), or None."""
        link = getattr(self, "view_of", None)
        return None if link is None else link[0]

    def __array__(self, dtype=None, copy=None):
        if Tracer.deferring_callers and dtype is None and \
                sys._getframe(1).f_globals.get("__name__") in Tracer.deferring_callers:
            return np.empty((), object)
        value = self.constant_value()
        if value is not None:
            return np.array(value, dtype=dtype, copy=True) if copy else \
                np.asarray(value, dtype=dtype)
        if self.aval.dtype.kind in "biu":
            # NumPy converts an index to an array, so `x[i]` with a NumPy x lands here
            raise NumpyFunctionError(
                f"a traced integer array ({self.aval}) cannot be converted to a NumPy "
                f"array{Tracer.where_called()}: under jit it has no value yet, under "
                "vmap one per example. If "
                "it is an index into a NumPy array x (x[i]), index with fgrad instead: "
                "fnp.take(x, i, axis=0), or fgrad.lax.dynamic_index_in_dim(x, i, "
                "keepdims=False) (fnp.asarray(x) leaves a NumPy array as it is, so "
                "fnp.asarray(x)[i] fails the same way); otherwise use fgrad.numpy "
                "functions on it (import fgrad.numpy as fnp).")
        raise NumpyFunctionError(
            f"a traced array ({self.aval}) cannot be converted to a NumPy array"
            f"{Tracer.where_called()}: that would drop its derivative silently. Use "
            "fgrad.numpy functions on it (import fgrad.numpy as fnp), or "
            "fgrad.stop_gradient(x) and then convert if you mean to treat it as a "
            "constant. Writing it into a NumPy array (out[i] = x) converts it too: "
            "make out with fnp.zeros_like(x), a traced array that takes the update, "
            "or write out = fgrad.at(out)[i].set(x).")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        fnp = Tracer.numpy_namespace
        # a ufunc's __name__ is a new string on every access, and attribute
        # lookups keep their name in CPython's type cache: the interned copy
        # keeps that cache from filling with copies
        name = sys.intern(ufunc.__name__)
        fn = getattr(fnp, name, None)
        if method != "__call__" or fn is None or kwargs.get("out") is not None:
            what = f"numpy.{name}" + ("" if method == "__call__" else f".{method}")
            raise NumpyFunctionError(
                f"{what} was called on a traced array, and fgrad has no rule for "
                f"it{' with out=' if kwargs.get('out') is not None else ''}. "
                f"{_suggestion(name, method)}")
        kwargs.pop("out", None)
        return fn(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        namespace = Tracer.numpy_namespace
        for part in func.__module__.split(".")[1:]:
            namespace = getattr(namespace, part, None)
            if namespace is None:
                break
        fn = getattr(namespace, func.__name__, None) if namespace else None
        if fn is None or fn is func:
            raise NumpyFunctionError(
                f"{func.__module__}.{func.__name__} was called on a traced array "
                f"and fgrad.numpy has no {func.__name__}. "
                f"{_suggestion(func.__name__, '__call__')}")
        return fn(*args, **kwargs)

    def __repr__(self):
        kind = type(self).__name__
        try:
            value = np.array2string(np.asarray(self._value_for_repr()), precision=4,
                                    threshold=20)
            return f"{kind}({self.aval}, value={value})"
        except Exception:                          # staged tracers have no value
            return f"{kind}({self.aval})"

    def _value_for_repr(self):
        return self.concrete()


class EagerTracer(Tracer):
    """A tracer that carries a concrete primal value (reverse and forward mode).

    Shape and dtype are read on every rule application, so they come straight
    from the primal instead of through an abstract value.
    """

    __slots__ = ("primal",)

    @property
    def aval(self):
        return get_aval(self.primal)

    @property
    def shape(self):
        try:
            return self.primal.shape
        except AttributeError:                 # a Python scalar
            return get_aval(self.primal).shape

    @property
    def dtype(self):
        try:
            return self.primal.dtype
        except AttributeError:
            return get_aval(self.primal).dtype

    def concrete(self):
        return full_lower(self.primal)

    def carried(self):
        return self.primal

    # A Python number made from a value being differentiated would carry no
    # derivative: refuse instead of returning a silent zero (JAX's choice).
    # Integer and boolean values carry none, so they still convert.
    def __float__(self):
        return float(self.value_for("float()"))

    def __int__(self):
        return int(self.value_for("int()"))

    def __complex__(self):
        return complex(self.value_for("complex()"))

    def carries_derivative(self):
        """Whether this transformation differentiates the value (each eager
        trace says; a value it gives no derivative may leave as a number)."""
        return True

    def constant_value(self):
        if self.dtype.kind in "fc" and self.carries_derivative():
            return None
        primal = self.primal
        return primal.constant_value() if isinstance(primal, Tracer) else primal

    def value_for(self, how):
        primal = self.primal
        if self.dtype.kind in "fc" and not self.carries_derivative():
            # no derivative here; an enclosing transformation's value decides
            return primal.value_for(how) if isinstance(primal, Tracer) else primal
        if self.dtype.kind in "fc":
            raise DerivativeConversionError(
                f"{how} of an array that is being differentiated ({self.aval})"
                f"{Tracer.where_called()} would return a plain Python number and drop "
                "its derivative silently. Keep it an array (write fnp.sum(x), not "
                "float(fnp.sum(x))), or call fgrad.stop_gradient(x) first if it "
                "is meant to be a constant.")
        return self.concrete()


_new_object = object.__new__
_VALUE_SLOTS = {}


def value_slots(cls):
    """The slots of a tracer class that hold its value (all but the view links):
    what `Tracer.clone` copies and `Tracer.rebind` replaces."""
    slots = _VALUE_SLOTS.get(cls)
    if slots is None:
        slots = _VALUE_SLOTS[cls] = tuple(
            slot for klass in cls.__mro__ for slot in getattr(klass, "__slots__", ())
            if slot not in ("view_of", "views", "__weakref__"))
    return slots


def note_view(out, base, prim, nargs, params):
    """Link ``out``, made by the view operation ``prim`` from ``base``, to it.

    A view operation with more operands than the base (index arrays) makes a
    copy, as NumPy's advanced indexing does, and is not linked. Bases hold
    their views weakly, and drop the dead ones as the list doubles, so a loop
    taking ``x[i]`` costs no more memory than its live views.
    """
    if not (nargs == 1 and isinstance(out, Tracer) and isinstance(base, Tracer)
            and out.owner is base.owner):
        return out
    out.view_of = (base, prim, params)
    try:
        views = base.views
    except AttributeError:
        views = base.views = []
    views.append(weakref.ref(out))
    n = len(views)
    if n >= 16 and n & (n - 1) == 0:
        views[:] = [ref for ref in views if ref() is not None]
    return out


def _suggestion(name, method):
    if method == "reduce":
        return f"Use fgrad.numpy.sum / prod / max / min instead of np.{name}.reduce."
    return ("Call the fgrad.numpy function of the same name (import fgrad.numpy as "
            "fnp), or, if fgrad lacks it, define it with fgrad.primitive and "
            "fgrad.defvjp / fgrad.defjvp.")


# NumPy subclasses that change what an array means: np.matrix (2-D always, `*`
# is a matrix product, its `sum` has no `keepdims`) and masked arrays. Other
# subclasses (np.memmap, a device backend's array type) behave as ndarrays.
REINTERPRETED = (np.matrix, np.ma.MaskedArray)


def plain_array(x):
    """``x``, with an np.matrix viewed as the plain 2-d ndarray of its data (the
    primitives rely on ndarray's methods and shapes); a masked array is refused,
    since the view would drop its mask silently. Anything else is returned as is.
    """
    if type(x) is np.ndarray or not isinstance(x, REINTERPRETED):
        return x
    if isinstance(x, np.ma.MaskedArray):
        raise ArraySubclassError(
            "fgrad got a masked array: fgrad works on plain arrays, and converting "
            "it would drop the mask silently. Pass x.filled(value) to give masked "
            "entries a value, or x.data to ignore the mask explicitly.")
    return x.view(np.ndarray)


def full_lower(x):
    """Strip eager tracers down to the concrete array they carry (for printing)."""
    while isinstance(x, Tracer):
        x = x.concrete()
    return x


def known_value(x):
    """The concrete value behind ``x``'s eager tracers, or None where it has none
    (staged by `jit`, or one value per example under `vmap`)."""
    try:
        return full_lower(x)
    except (ConcretizationError, BatchedConversionError):
        return None
