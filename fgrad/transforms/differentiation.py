"""The transformations users call: grad, vjp, jvp and the Jacobians built on them.

Every transformation flattens its arguments (pytrees), opens a trace one level
above the current one, runs the function on tracers, and unflattens the result.
"""
import functools

import numpy as np

from fgrad.compiler.codegen import compile_graph
from fgrad.compiler.cpu_fusion import enabled as cpu_fusion_enabled
from fgrad.compiler.tiers import compile_as_configured
from fgrad.compiler.vector_forward import MIN_BYTES as VECTOR_MIN_BYTES
from fgrad.compiler.vector_forward import forward_impls
from fgrad.core.backend import (
    array_module,
    asarray_on,
    check_same_backend,
    foreign_backends_active,
    module_of_leaves,
)
from fgrad.core.errors import ArgnumError, CotangentError, InvalidInputError, NonScalarOutputError
from fgrad.core.trace import (
    Tracer,
    Zero,
    get_aval,
    nans_enabled,
    new_trace,
    plain_array,
    trace_state,
)
from fgrad.core.tree import tree_flatten, tree_map, tree_structure, tree_unflatten
from fgrad.interpreters.batching import BatchTracer, innermost_value
from fgrad.interpreters.compiled_sweep import SweepCache, compiled_sweep, large_enough
from fgrad.interpreters.forward import JVPTrace, JVPTracer
from fgrad.interpreters.forward_over_reverse import (
    ForwardOverReverse,
    Unsupported,
    outer_jvp_trace,
    record,
    tangent_pass,
)
from fgrad.interpreters.nan_checking import DebugJVPTrace, DebugReverseTrace, debug_backward_pass
from fgrad.interpreters.reverse import ReverseTrace, ReverseTracer, backward_pass
from fgrad.interpreters.staging import StagingTrace
from fgrad.primitives.creation import ones_like, zeros_like
from fgrad.primitives.indexing import slice_axis
from fgrad.primitives.shape import reshape
from fgrad.transforms.vmap import vmap as vmap

# ---------------------------------------------------------------------------
# Choosing and checking the differentiated arguments
# ---------------------------------------------------------------------------


def _normalize_argnums(argnums, nargs, fname):
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    out = []
    for n in nums:
        if not isinstance(n, int):
            raise ArgnumError(f"argnums must be an int or a tuple of ints, got {n!r}")
        if not -nargs <= n < nargs:
            raise ArgnumError(
                f"argnums={argnums!r} refers to positional argument {n}, but {fname} "
                f"was called with {nargs} positional argument{'s' * (nargs != 1)}.")
        out.append(n % nargs)
    return single, tuple(out)


def _as_input(x, what, allow_complex=True, xp=np):
    """A differentiated leaf as an array of module ``xp``, refusing integers and
    booleans (a Python scalar next to device arrays goes to the device)."""
    x = plain_array(x)
    if not isinstance(x, Tracer) and not hasattr(x, "dtype"):
        x = asarray_on(xp, x)
    dtype = get_aval(x).dtype
    if dtype.kind not in ("fc" if allow_complex else "f"):
        kind = "complex" if dtype.kind == "c" else dtype.name
        hint = ("pass holomorphic=True for complex-to-complex functions, or split "
                "into real and imaginary parts" if dtype.kind == "c" else
                f"convert it with x.astype(float) (or write {_float_example(x)})")
        raise InvalidInputError(
            f"{what} has dtype {kind}, but only floating-point inputs can be "
            f"differentiated: {hint}. To keep an argument fixed, leave it out of "
            "argnums.")
    return x


def _float_example(x):
    try:
        return f"{float(np.asarray(x).ravel()[0])!r} instead of {np.asarray(x).ravel()[0]!r}"
    except Exception:
        return "a float literal"


class Selection:
    """The differentiated leaves of ``args``/``kwargs`` and how to rebuild them.

    Shared by every transformation that differentiates chosen arguments
    (``argnums``/``argnames``), and by `fgrad.residuals`, which records the same
    selection.
    """

    def __init__(self, fname, args, kwargs, argnums, argnames, allow_complex):
        if argnums is None:
            argnums = 0 if not argnames else ()
        self.single, self.argnums = _normalize_argnums(argnums, len(args), fname)
        self.argnames = (argnames,) if isinstance(argnames, str) else tuple(argnames or ())
        for name in self.argnames:
            if name not in kwargs:
                raise ArgnumError(
                    f"argnames names {name!r}, but {fname} was called without a "
                    f"keyword argument {name!r} (got {sorted(kwargs) or 'none'}).")
        self.args, self.kwargs = list(args), dict(kwargs)
        selected = tuple(args[i] for i in self.argnums) + tuple(
            kwargs[n] for n in self.argnames)
        if len(selected) == 1 and selected[0].__class__ is np.ndarray:
            leaves, self.tree = list(selected), None    # one array: no pytree to walk
        else:
            leaves, self.tree = tree_flatten(selected)
        xp = np
        if foreign_backends_active():
            _check_arguments_backend(fname, args, kwargs)
            xp = module_of_leaves(leaves)
        kinds = "fc" if allow_complex else "f"
        # a plain float array is taken as it is; the message of a refusal is
        # built only for the leaves that need checking
        self.leaves = [x if x.__class__ is np.ndarray and xp is np and x.dtype.kind in kinds
                       else _as_input(x, f"{fname}'s {self._where(i)}", allow_complex, xp)
                       for i, x in enumerate(leaves)]

    def _where(self, leaf_index):
        return f"differentiated input (leaf {leaf_index})"

    def call(self, fun, new_leaves):
        selected = new_leaves if self.tree is None else tree_unflatten(self.tree, new_leaves)
        args, kwargs = list(self.args), dict(self.kwargs)
        for i, value in zip(self.argnums, selected):
            args[i] = value
        for name, value in zip(self.argnames, selected[len(self.argnums):]):
            kwargs[name] = value
        return fun(*args, **kwargs)

    def shape_result(self, leaves):
        """Per-leaf results back into the structure the user asked for."""
        selected = tuple(leaves) if self.tree is None else tree_unflatten(self.tree, leaves)
        by_num, by_name = selected[:len(self.argnums)], selected[len(self.argnums):]
        by_name = dict(zip(self.argnames, by_name))
        if not self.argnames:
            return by_num[0] if self.single else by_num
        if not self.argnums:
            return by_name
        return (by_num[0] if self.single else by_num), by_name


def _check_arguments_backend(fname, args, kwargs):
    """Every array argument (differentiated or not) on one backend, or an error
    naming each argument's backend by its position."""
    labelled = []
    for i, a in enumerate(args):
        labelled.append((f"argument {i}", a))
    for name, a in kwargs.items():
        labelled.append((f"keyword argument {name!r}", a))
    leaves, labels = [], []
    for label, a in labelled:
        sub = tree_flatten(a)[0]
        leaves.extend(sub)
        labels.extend([label] if len(sub) == 1 else
                      [f"{label} (leaf {j})" for j in range(len(sub))])
    check_same_backend(leaves, f"the arguments of {fname}", labels.__getitem__)


def function_name(fun):
    """``fun``'s name for messages (its class name if it has no ``__name__``)."""
    return getattr(fun, "__name__", type(fun).__name__)


# ---------------------------------------------------------------------------
# Reverse mode
# ---------------------------------------------------------------------------


def _lower(x, trace):
    """This trace's tracer -> its primal; anything else unchanged."""
    if isinstance(x, ReverseTracer) and x.owner is trace:
        return x.primal
    return x


def _reverse_record(fun, selection, has_aux):
    """Run ``fun`` under a new reverse trace; returns (trace, out, out_leaves, aux)."""
    with new_trace(DebugReverseTrace if nans_enabled() else ReverseTrace) as trace:
        if type(trace) is ReverseTrace and any(
                x.__class__ is np.ndarray and x.nbytes >= VECTOR_MIN_BYTES
                for x in selection.leaves) and cpu_fusion_enabled():
            # sin and kin of large arrays by the kernels' vector functions
            trace.forward = forward_impls()
        inputs = [trace.new_input(x) for x in selection.leaves]
        out = selection.call(fun, inputs)
    aux = None
    if has_aux:
        out, aux = _aux_pair(out, fun)
        aux = tree_map(lambda x: _lower(x, trace), aux)
    return trace, out, aux


def _sweep(trace, out_leaves, ct_leaves, selection, consume):
    seeds = {}
    for leaf, ct in zip(out_leaves, ct_leaves):
        if isinstance(leaf, ReverseTracer) and leaf.owner is trace \
                and leaf.node is not None:
            seeds[leaf.node] = ct if leaf.node not in seeds else seeds[leaf.node] + ct
    sweep = backward_pass if type(trace) is ReverseTrace else debug_backward_pass
    # a sweep staged into a graph (jit(grad(f)), make_graph) marks its equations
    # as the reverse pass, for Graph.to_dot
    staging = [(t, len(t.eqns)) for t in trace_state.trace_stack
               if isinstance(t, StagingTrace)]
    if consume:
        cts = sweep(trace, seeds)
    else:
        saved = list(trace.eqns)
        cts = sweep(trace, seeds)
        trace.eqns = saved
    for t, start in staging:
        t.reverse_spans.append((start, len(t.eqns)))
    return _input_cotangents(cts, selection)


def _input_cotangents(cts, selection):
    # inputs are nodes 0..n-1; an input nothing depended on gets real zeros here,
    # at the boundary, so the user sees arrays of the right shape and dtype.
    return [cts[i] if i in cts else zeros_like(x)
            for i, x in enumerate(selection.leaves)]


def grad(fun, argnums=None, has_aux=False, *, argnames=None, holomorphic=False):
    """The gradient of a scalar-valued function.

    ``argnums`` (an int or a tuple, default 0) chooses positional arguments and
    ``argnames`` keyword arguments; each may be any pytree of float arrays. With
    ``has_aux=True``, ``fun`` returns ``(value, aux)`` and the result is
    ``(gradient, aux)``.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> fgrad.grad(lambda x: fnp.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    value_and_grad_f = _value_and_grad(fun, argnums, has_aux, argnames, holomorphic)

    @functools.wraps(fun)
    def grad_f(*args, **kwargs):
        # the value is dropped, so under jvp its tangent need not be computed
        (value, aux), g = _split(value_and_grad_f(args, kwargs, False), has_aux)
        return (g, aux) if has_aux else g
    return grad_f


def _split(result, has_aux):
    value, g = result
    return (value if has_aux else (value, None)), g


def value_and_grad(fun, argnums=None, has_aux=False, *, argnames=None,
                   holomorphic=False):
    """Like `grad`, but returns ``(value, gradient)`` from one evaluation.

    With ``has_aux=True`` the result is ``((value, aux), gradient)``.

    >>> import fgrad, fgrad.numpy as fnp
    >>> value, g = fgrad.value_and_grad(lambda x: fnp.sin(x))(0.0)
    >>> float(value), float(g)
    (0.0, 1.0)
    """
    value_and_grad_f = _value_and_grad(fun, argnums, has_aux, argnames, holomorphic)

    @functools.wraps(fun)
    def value_and_grad_wrapper(*args, **kwargs):
        return value_and_grad_f(args, kwargs, True)
    return value_and_grad_wrapper


def _compile_fused(graph, xp, donated, install):
    """Compile a large gradient's sweep with its elementwise groups fused into
    LLVM kernels on NumPy (what ``jit`` compiles) and ``install`` it
    (`SweepCache`): on the compile thread, so that no call waits for them,
    unless ``FGRAD_JIT_COMPILE`` says ``sync`` (now) or ``never`` (not at all),
    as for ``jit`` (`fgrad.compiler.tiers`)."""
    compile_as_configured(
        lambda: install(compile_graph(graph, xp, fuse_cpu=True, donated=donated)))


def _value_and_grad(fun, argnums, has_aux, argnames, holomorphic):
    """``value_and_grad_f(args, kwargs, value_tangent)``, shared by grad and
    value_and_grad; ``value_tangent=False`` when the caller drops the value."""
    # compiled reverse sweeps, per recorded structure
    # (fgrad.interpreters.compiled_sweep)
    sweep_cache = SweepCache(compile_graph,
                             _compile_fused if cpu_fusion_enabled() else None)
    # jvp of this gradient: compiled sweeps by structure
    # (fgrad.interpreters.forward_over_reverse)
    under_jvp = ForwardOverReverse(compile_graph)

    def value_and_grad_f(args, kwargs, value_tangent):
        name = function_name(fun)
        # Complex inputs are fine when the output is real (JAX's convention: the
        # result is the conjugate of the steepest-ascent direction); a complex
        # output needs holomorphic=True, checked below.
        selection = Selection(f"grad({name})", args, kwargs, argnums, argnames,
                               allow_complex=True)
        if holomorphic:
            _check_holomorphic_inputs(selection, name)
        outer = None if under_jvp.unsupported else outer_jvp_trace(selection.leaves)
        if outer is not None:
            try:
                return _value_and_grad_under_jvp(fun, selection, has_aux, holomorphic,
                                                 outer, under_jvp, value_tangent)
            except Unsupported:
                # a custom rule: run fun again the standard way, from now on
                under_jvp.unsupported = True
        trace, out, aux = _reverse_record(fun, selection, has_aux)
        leaves, _ = tree_flatten(out)
        _check_scalar_output(out, leaves, name, holomorphic)
        ans = _lower(leaves[0], trace)
        g = None
        if isinstance(leaves[0], ReverseTracer) and leaves[0].owner is trace \
                and leaves[0].node is not None:
            large = large_enough(selection.leaves)
            # a small gradient inside another transformation records that
            # transformation's tracers, which no compiled sweep takes, except
            # vmap's (per-example gradients get a batched compiled sweep)
            if large or sweep_cache.called and (trace.level == 1 or
                                                type(ans) is BatchTracer):
                cts = compiled_sweep(trace, leaves[0].node, get_aval(ans).dtype,
                                     selection.leaves, array_module(innermost_value(ans)),
                                     sweep_cache, compile_now=large)
                if cts is not None:
                    g = _input_cotangents(cts, selection)
            sweep_cache.called = True
        if g is None:
            g = _sweep(trace, leaves, [ones_like(ans)], selection, consume=True)
        value = (ans, aux) if has_aux else ans
        return value, selection.shape_result(g)
    return value_and_grad_f


def _value_and_grad_under_jvp(fun, selection, has_aux, holomorphic, outer, cache,
                              value_tangent):
    """`value_and_grad` whose inputs carry ``outer``'s tangents: the gradient
    and its tangent (a Hessian-vector product) from one recording on the
    primals (fgrad.interpreters.forward_over_reverse)."""
    name = function_name(fun)
    primals, in_tangents = [], []
    for x in selection.leaves:
        if type(x) is JVPTracer and x.owner is outer:
            primals.append(x.primal)
            in_tangents.append(None if type(x.tangent) is Zero else x.tangent)
        else:
            primals.append(x)
            in_tangents.append(None)
    trace, out = record(lambda inputs: selection.call(fun, inputs), primals, outer)
    aux_leaves, aux_tree = [], None
    if has_aux:
        out, aux = _aux_pair(out, fun)
        aux_leaves, aux_tree = tree_flatten(aux)
    leaves, _ = tree_flatten(out)
    _check_scalar_output(out, leaves, name, holomorphic)
    result = leaves[0]

    def recorded(v):
        return isinstance(v, ReverseTracer) and v.owner is trace and v.node is not None
    wanted = [result.node] if value_tangent and recorded(result) else []
    wanted += [v.node for v in aux_leaves if recorded(v) and v.node not in wanted]
    if recorded(result):
        pairs, tangents = cache.run(trace, result.node, result.primal,
                                    in_tangents, wanted, array_module(result.primal))
    else:                                   # the output does not depend on the inputs
        pairs = [(None, None)] * len(primals)
        tangents = tangent_pass(trace.eqns, in_tangents, wanted, outer)

    def lift(value, tangent):
        return value if tangent is None else JVPTracer(outer, value, tangent)

    def lower(v):
        return lift(v.primal, tangents.get(v.node)) if recorded(v) else v
    g = [lift(zeros_like(p) if ct is None else ct, t)
         for p, (ct, t) in zip(primals, pairs)]
    value = lower(result)
    if has_aux:
        value = (value, tree_unflatten(aux_tree, [lower(v) for v in aux_leaves]))
    return value, selection.shape_result(g)


def _aux_pair(out, fun):
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"has_aux=True requires {function_name(fun)} to return a pair "
                        f"(output, aux), got {type(out).__name__}")
    return out


def _check_holomorphic_inputs(selection, name):
    for i, x in enumerate(selection.leaves):
        if get_aval(x).dtype.kind != "c":
            raise InvalidInputError(
                f"grad({name}, holomorphic=True) got a real input (leaf {i}, dtype "
                f"{get_aval(x).dtype}): a holomorphic derivative needs complex "
                "inputs. Convert it with x.astype(complex), or drop holomorphic=True "
                "for a real-valued function.")


def _check_scalar_output(out, leaves, name, holomorphic):
    if len(leaves) != 1 or not hasattr(leaves[0], "shape") and not isinstance(
            leaves[0], (float, int)):
        raise NonScalarOutputError(
            f"grad requires {name} to return a single scalar, got "
            f"{tree_structure(out)}: return one array, or use fgrad.vjp / "
            "fgrad.jacrev for several outputs.")
    aval = get_aval(leaves[0])
    if aval.shape != ():
        raise NonScalarOutputError(
            f"grad requires a scalar output, got shape {aval.shape} from {name}: "
            "reduce it with .sum() (or .mean()), or use fgrad.vjp / fgrad.jacrev for "
            "the derivative of every element.")
    if aval.dtype.kind == "c" and not holomorphic:
        raise NonScalarOutputError(
            f"grad requires a real scalar output, got {aval.dtype} from {name}: take "
            "fnp.real(...) or abs(...)**2 of it, pass holomorphic=True if the "
            "function is complex-differentiable, or use fgrad.vjp.")
    if aval.dtype.kind not in "fc":
        raise NonScalarOutputError(
            f"grad requires a floating-point output, got {aval.dtype} from {name}: an "
            "integer or boolean output has no gradient.")


def vjp(fun, *primals, has_aux=False):
    """Evaluate ``fun(*primals)`` and return ``(out, vjp_fn)``.

    ``vjp_fn(ct)`` takes a cotangent shaped like ``out`` and returns a tuple with
    one cotangent per primal; it may be called many times.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> out, vjp_fn = fgrad.vjp(lambda x: x * 3.0, np.array([1.0, 2.0]))
    >>> vjp_fn(np.array([1.0, 10.0]))
    (array([ 3., 30.]),)
    """
    name = function_name(fun)
    selection = Selection(f"vjp({name})", primals, {}, tuple(range(len(primals))),
                           None, allow_complex=True)
    trace, out, aux = _reverse_record(fun, selection, has_aux)
    trace.keep_enclosing_values()           # vjp_fn may run after the caller's updates
    out_leaves, out_tree = tree_flatten(out)
    primal_out = tree_unflatten(out_tree, [_lower(x, trace) for x in out_leaves])
    out_avals = [get_aval(x) for x in out_leaves]

    def vjp_fn(ct):
        ct_leaves, ct_tree = tree_flatten(ct)
        ct_leaves = list(map(plain_array, ct_leaves))
        if ct_tree != out_tree:
            raise CotangentError(
                f"the cotangent passed to the vjp function of {name} has structure "
                f"{ct_tree}, but the output has structure {out_tree}.")
        for i, (c, aval) in enumerate(zip(ct_leaves, out_avals)):
            _check_like(c, aval, f"cotangent leaf {i}", "output", name)
        return selection.shape_result(
            _sweep(trace, out_leaves, ct_leaves, selection, consume=False))

    return (primal_out, vjp_fn, aux) if has_aux else (primal_out, vjp_fn)


def _check_like(value, aval, what, of, name):
    got = get_aval(value)
    if got.shape != aval.shape:
        raise CotangentError(f"{what} has shape {got.shape}, but the {of} of {name} "
                             f"it pairs with has shape {aval.shape}.")
    if got.dtype != aval.dtype and not got.weak_type and aval.dtype.kind in "fc":
        raise CotangentError(f"{what} has dtype {got.dtype}, but the {of} of {name} "
                             f"it pairs with has dtype {aval.dtype}; cast it with "
                             f".astype({aval.dtype.name!r}).")


# ---------------------------------------------------------------------------
# Forward mode
# ---------------------------------------------------------------------------


def jvp(fun, primals, tangents):
    """Evaluate ``fun`` and its directional derivative: ``(out, tangent_out)``.

    ``primals`` and ``tangents`` are tuples (one entry per positional argument) of
    matching structure, shapes and dtypes.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> fgrad.jvp(fnp.sin, (0.0,), (2.0,))
    (np.float64(0.0), np.float64(2.0))
    """
    name = function_name(fun)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp expects primals and tangents as tuples (one entry per "
                        f"argument), got {type(primals).__name__} and "
                        f"{type(tangents).__name__}: write jvp(f, (x,), (v,)).")
    p_leaves, p_tree = tree_flatten(tuple(primals))
    t_leaves, t_tree = tree_flatten(tuple(tangents))
    p_leaves = list(map(plain_array, p_leaves))      # np.matrix -> ndarray
    t_leaves = list(map(plain_array, t_leaves))
    if p_tree != t_tree:
        raise CotangentError(f"jvp of {name}: tangents have structure {t_tree}, but "
                             f"primals have structure {p_tree}.")
    xp = np
    if foreign_backends_active():
        p_labels = _leaf_labels("primal", primals)
        t_labels = _leaf_labels("tangent", tangents)
        check_same_backend(p_leaves + t_leaves, f"jvp({name})'s primals and tangents",
                           (p_labels + t_labels).__getitem__)
        xp = module_of_leaves(p_leaves + t_leaves)
    p_leaves = [x if hasattr(x, "dtype") or isinstance(x, Tracer) else asarray_on(xp, x)
                for x in p_leaves]
    for i, (p, t) in enumerate(zip(p_leaves, t_leaves)):
        _check_like(t, get_aval(p), f"tangent leaf {i}", "primal", name)
    with new_trace(DebugJVPTrace if nans_enabled() else JVPTrace) as trace:
        inputs = [JVPTracer(trace, p, t) if get_aval(p).dtype.kind in "fc" else p
                  for p, t in zip(p_leaves, t_leaves)]
        out = fun(*tree_unflatten(p_tree, inputs))
    out_leaves, out_tree = tree_flatten(out)
    primal_out, tangent_out = [], []
    for x in out_leaves:
        if isinstance(x, JVPTracer) and x.owner is trace:
            primal_out.append(x.primal)
            tangent_out.append(zeros_like(x.primal) if type(x.tangent) is Zero
                               else x.tangent)
        else:
            primal_out.append(x)
            tangent_out.append(zeros_like(x))
    return tree_unflatten(out_tree, primal_out), tree_unflatten(out_tree, tangent_out)


def _leaf_labels(kind, values):
    labels = []
    for i, a in enumerate(values):
        n = len(tree_flatten(a)[0])
        labels.extend([f"{kind} {i}"] if n == 1 else
                      [f"{kind} {i} (leaf {j})" for j in range(n)])
    return labels


def linearize(fun, *primals):
    """``(out, jvp_fn)`` with ``jvp_fn(*tangents)`` the derivative at ``primals``.

    The primal output is computed once here; each ``jvp_fn`` call currently
    re-runs forward mode (a staged linear graph will replace that with jit).

    >>> import fgrad, fgrad.numpy as fnp
    >>> out, f_jvp = fgrad.linearize(fnp.sin, 0.0)
    >>> float(f_jvp(3.0))
    3.0
    """
    if nans_enabled():
        # checked as forward mode checks, not as an untransformed call
        out = jvp(fun, primals, tree_map(zeros_like, primals))[0]
    else:
        out = fun(*primals)
    # jvp_fn re-runs at these values: its own tracers of them, which an in-place
    # update of the caller's (x[0] = 1 after linearize) leaves as they are
    primals = tree_map(lambda p: p.clone() if isinstance(p, Tracer) else p, primals)

    def jvp_fn(*tangents):
        return jvp(fun, primals, tangents)[1]
    return out, jvp_fn


# ---------------------------------------------------------------------------
# Jacobians and Hessians
# ---------------------------------------------------------------------------


def _basis(avals, xp):
    """One batch of one-hot vectors per leaf: ``(total,) + aval.shape`` each.

    Row ``k`` of the stacked batch is the ``k``-th element of the flattened
    leaves. It is a constant, built on the host and copied once to the
    leaves' backend ``xp``.
    """
    total = sum(a.size for a in avals)
    out, start = [], 0
    for aval in avals:
        eye = np.zeros((total, aval.size), aval.dtype)
        eye[np.arange(start, start + aval.size), np.arange(aval.size)] = 1
        out.append(asarray_on(xp, eye.reshape((total,) + aval.shape)))
        start += aval.size
    return out


def _blocks(batched, batch_avals, other_avals, batch_first):
    """Split per-basis results into one Jacobian block per (output, input) pair.

    ``batched[j]`` holds, for every basis element, the result at leaf ``j`` of
    the other side, with the batch axis first (``batch_first``, reverse mode:
    the batch runs over outputs) or last (forward mode: over inputs). Blocks
    have shape ``out.shape + in.shape``.
    """
    blocks, start = [], 0
    for b_aval in batch_avals:
        row = []
        for j, o_aval in enumerate(other_avals):
            axis = 0 if batch_first else o_aval.ndim
            part = slice_axis(batched[j], axis, start, start + b_aval.size)
            shape = (b_aval.shape + o_aval.shape if batch_first
                     else o_aval.shape + b_aval.shape)
            row.append(reshape(part, shape))
        blocks.append(row)
        start += b_aval.size
    if batch_first:
        return blocks
    return [list(col) for col in zip(*blocks)] if blocks else [[] for _ in other_avals]


def _jacobian_result(blocks, out_tree, sel):
    per_out = [sel.shape_result(row) for row in blocks]
    return tree_unflatten(out_tree, per_out)


def jacrev(fun, argnums=0, chunk_size=None):
    """The Jacobian by reverse mode: one batched VJP over all output elements.

    The result has the output's structure, each leaf holding the input's
    structure of blocks shaped ``out.shape + in.shape``. The VJP runs once, on a
    batch of one-hot cotangents (`vmap`); ``chunk_size`` bounds how many of
    them are in flight at a time.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> fgrad.jacrev(lambda x: x ** 2)(np.array([1.0, 3.0]))
    array([[2., 0.],
           [0., 6.]])
    """
    @functools.wraps(fun)
    def jac_f(*args, **kwargs):
        sel = Selection(f"jacrev({function_name(fun)})", args, kwargs, argnums, None, True)
        trace, out, _ = _reverse_record(fun, sel, False)
        out_leaves, out_tree = tree_flatten(out)
        out_avals = [get_aval(x) for x in out_leaves]
        in_avals = [get_aval(x) for x in sel.leaves]

        def pullback(*ct_leaves):
            return _sweep(trace, out_leaves, ct_leaves, sel, consume=False)
        basis = _basis(out_avals, module_of_leaves(out_leaves))
        if sum(a.size for a in out_avals) == 0:
            rows = [np.zeros((0,) + a.shape, a.dtype) for a in in_avals]
        else:
            rows = vmap(pullback, chunk_size=chunk_size)(*basis)
        return _jacobian_result(_blocks(rows, out_avals, in_avals, True), out_tree, sel)
    return jac_f


def jacfwd(fun, argnums=0, chunk_size=None):
    """The Jacobian by forward mode: one batched JVP over all input elements.

    ``chunk_size`` bounds how many one-hot tangents are in flight at a time.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> fgrad.jacfwd(lambda x: x ** 2)(np.array([1.0, 3.0]))
    array([[2., 0.],
           [0., 6.]])
    """
    @functools.wraps(fun)
    def jac_f(*args, **kwargs):
        sel = Selection(f"jacfwd({function_name(fun)})", args, kwargs, argnums, None, True)

        def partial(*leaves):
            return sel.call(fun, list(leaves))
        in_avals = [get_aval(x) for x in sel.leaves]
        out = partial(*sel.leaves)
        out_leaves, out_tree = tree_flatten(out)
        out_avals = [get_aval(x) for x in out_leaves]
        if sum(a.size for a in in_avals) == 0:
            cols = [np.zeros(a.shape + (0,), a.dtype) for a in out_avals]
        else:
            def push(*tangents):
                return tree_flatten(jvp(partial, tuple(sel.leaves), tangents)[1])[0]
            cols = vmap(push, out_axes=-1, chunk_size=chunk_size)(
                *_basis(in_avals, module_of_leaves(sel.leaves)))
        return _jacobian_result(_blocks(cols, in_avals, out_avals, False), out_tree, sel)
    return jac_f


def hessian(fun, argnums=0, chunk_size=None):
    """The Hessian of a scalar function, as ``jacfwd(jacrev(fun))``.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> fgrad.hessian(lambda x: fnp.sum(x ** 3))(np.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])
    """
    return jacfwd(jacrev(fun, argnums, chunk_size), argnums, chunk_size)
