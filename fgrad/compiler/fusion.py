"""Fusing chains of elementwise equations into one generated device kernel.

On a backend that can build elementwise kernels from source (CuPy's
``ElementwiseKernel``; see ``register_backend(..., elementwise_kernel=...)``),
`compile_graph` runs `fuse_elementwise` after the optimisation passes. It groups
maximal runs of elementwise equations (ufunc primitives, ``where``,
``convert_element_type``) and replaces each group by one ``fused_elementwise``
equation whose kernel evaluates the whole group per element: a chain of twenty
ufuncs reads its inputs once and writes its outputs once, instead of making
twenty passes over memory. Reductions, matmuls and everything else stay
ordinary calls into the backend.

A group obeys three rules, which together keep the rewritten graph valid:

- every member's output has the same shape, the group's shape, and every
  kernel input broadcasts to it (the kernel broadcasts its inputs, as a ufunc
  does, and allocates its outputs at that shape);
- a member's output read by an equation outside the group, or returned by the
  graph, becomes a kernel output; every other intermediate lives only in a
  register;
- once an outside equation reads a group's value the group is closed: nothing
  joins it later. The fused equation takes the place of the group's last
  member, so every outside reader still comes after it.

Each equation is written in CUDA C from `_TEMPLATES`, computing in the dtype
NumPy's promotion gives (the dtypes the staged graph already carries, from the
primitives' abstract rules): operands are cast to that dtype first, Python
scalar literals included, so ``float32 * 2.0`` stays a float32 product.
Kernels are cached by their source text.
"""
import collections
import functools
import hashlib
import math

import numpy as np

from fgrad.core.graph import Equation, Graph, Literal, Var
from fgrad.core.trace import Primitive
from fgrad.primitives.base import dummy

# ---------------------------------------------------------------------------
# The per-operation table
# ---------------------------------------------------------------------------

# dtype -> the C type that holds it in a kernel; float16 and complex are left
# to CuPy's own ufuncs (half and thrust::complex need their own math)
_C_TYPES = {np.dtype(k): c for k, c in (
    ("bool", "bool"), ("int8", "signed char"), ("int16", "short"), ("int32", "int"),
    ("int64", "long long"), ("uint8", "unsigned char"), ("uint16", "unsigned short"),
    ("uint32", "unsigned int"), ("uint64", "unsigned long long"),
    ("float32", "float"), ("float64", "double"))}

# How an equation's operands are cast before the operation:
#   "out"     to the output dtype (arithmetic: NumPy computes in it)
#   "common"  to the operands' promoted dtype (comparisons: the output is bool)
#   "bool"    to bool (logical operations)
#   "self"    not at all (predicates on one operand: isnan)
#   "where"   condition to bool, both branches to the output dtype
_OUT, _COMMON, _BOOL, _SELF, _WHERE = "out", "common", "bool", "self", "where"


def _fn(c_name, arity=1):
    return "{}({})".format(c_name, ", ".join("{%d}" % i for i in range(arity)))


# name -> (operand rule, template for floating compute dtypes, template for
# integer and bool ones or None where the kernel would not match NumPy)
_TEMPLATES = {
    "add": (_OUT, "{0} + {1}", "{0} + {1}"),
    "subtract": (_OUT, "{0} - {1}", "{0} - {1}"),
    "multiply": (_OUT, "{0} * {1}", "{0} * {1}"),
    "divide": (_OUT, "{0} / {1}", None),
    "power": (_OUT, "pow({0}, {1})", None),
    "negative": (_OUT, "-{0}", "-{0}"),
    "square": (_OUT, "{0} * {0}", "{0} * {0}"),
    # NumPy's maximum and minimum propagate NaN; C's fmax/fmin do not
    "maximum": (_OUT, "(isnan({0}) || {0} > {1}) ? {0} : {1}", "({0} > {1}) ? {0} : {1}"),
    "minimum": (_OUT, "(isnan({0}) || {0} < {1}) ? {0} : {1}", "({0} < {1}) ? {0} : {1}"),
    "absolute": (_OUT, "fabs({0})", "({0} < 0) ? -{0} : {0}"),
    "floor": (_OUT, "floor({0})", "{0}"),
    "ceil": (_OUT, "ceil({0})", "{0}"),
    "trunc": (_OUT, "trunc({0})", "{0}"),
    "rint": (_OUT, "rint({0})", None),
    "arctan2": (_OUT, "atan2({0}, {1})", None),
    "hypot": (_OUT, "hypot({0}, {1})", None),
    "fmod": (_OUT, "fmod({0}, {1})", None),
    "equal": (_COMMON, "{0} == {1}", "{0} == {1}"),
    "not_equal": (_COMMON, "{0} != {1}", "{0} != {1}"),
    "less": (_COMMON, "{0} < {1}", "{0} < {1}"),
    "less_equal": (_COMMON, "{0} <= {1}", "{0} <= {1}"),
    "greater": (_COMMON, "{0} > {1}", "{0} > {1}"),
    "greater_equal": (_COMMON, "{0} >= {1}", "{0} >= {1}"),
    "logical_and": (_BOOL, None, "{0} && {1}"),
    "logical_or": (_BOOL, None, "{0} || {1}"),
    "logical_xor": (_BOOL, None, "{0} != {1}"),
    "logical_not": (_BOOL, None, "!{0}"),
    "isnan": (_SELF, "isnan({0})", None),
    "isinf": (_SELF, "isinf({0})", None),
    "isfinite": (_SELF, "isfinite({0})", None),
    "signbit": (_SELF, "signbit({0})", None),
    "where": (_WHERE, "{0} ? {1} : {2}", "{0} ? {1} : {2}"),
    "convert_element_type": (_OUT, "{0}", "{0}"),
}
# integer division, bits and sign: written for CPU kernels only (`fgrad.compiler.kernel_ir`,
# NumPy's signs and zero divisors), no C template for the GPU's
for _name in ("floor_divide", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor",
              "invert", "left_shift", "right_shift", "sign"):
    _TEMPLATES[_name] = (_OUT, None, None)
for _name, _c in (("sqrt", "sqrt"), ("exp", "exp"), ("exp2", "exp2"),
                  ("expm1", "expm1"), ("log", "log"), ("log2", "log2"),
                  ("log10", "log10"), ("log1p", "log1p"), ("cbrt", "cbrt"),
                  ("sin", "sin"), ("cos", "cos"), ("tan", "tan"), ("sinh", "sinh"),
                  ("cosh", "cosh"), ("tanh", "tanh"), ("arcsin", "asin"),
                  ("arccos", "acos"), ("arctan", "atan"), ("arcsinh", "asinh"),
                  ("arccosh", "acosh"), ("arctanh", "atanh")):
    _TEMPLATES[_name] = (_OUT, _fn(_c), None)


def elementwise_name(prim):
    """The operation an elementwise primitive performs (its ufunc's name, or
    ``where`` / ``convert_element_type``), else None."""
    name = getattr(prim, "ufunc_name", None)
    if name is None and prim.name in ("where", "convert_element_type") \
            and prim.family == "primitives/elementwise.py":
        name = prim.name
    return name


def _op_name(prim):
    """The `_TEMPLATES` key of an elementwise primitive, else None."""
    name = elementwise_name(prim)
    return name if name in _TEMPLATES else None


def _common_dtype(avals):
    return np.result_type(*(dummy(a) for a in avals))


def operand_rule(name):
    """How an operation's operands are cast (one of the rules above)."""
    return _TEMPLATES[name][0]


def compute_dtypes(rule, eqn):
    """The dtype each operand is cast to, and the dtype that picks the template."""
    out = eqn.outvars[0].aval.dtype
    avals = [v.aval for v in eqn.invars]
    if rule == _OUT:
        return [out] * len(avals), out
    if rule == _COMMON:
        common = _common_dtype(avals)
        return [common] * len(avals), common
    if rule == _BOOL:
        return [np.dtype(bool)] * len(avals), np.dtype(bool)
    if rule == _SELF:
        return [a.dtype for a in avals], avals[0].dtype
    return [np.dtype(bool), out, out], out                  # where


def _template(eqn):
    """The C template for ``eqn`` and its operands' dtypes, or None if unfusable."""
    name = _op_name(eqn.prim)
    if name is None or len(eqn.outvars) != 1 or eqn.prim.multiple_results:
        return None
    if name == "convert_element_type":
        if set(eqn.params) != {"dtype"}:
            return None
    elif eqn.params:
        return None
    if eqn.outvars[0].aval.dtype not in _C_TYPES:
        return None
    if any(v.aval.dtype not in _C_TYPES for v in eqn.invars):
        return None
    rule, float_template, int_template = _TEMPLATES[name]
    try:
        operand_dtypes, compute = compute_dtypes(rule, eqn)
    except (TypeError, ValueError):
        return None
    if compute not in _C_TYPES:
        return None
    template = float_template if compute.kind == "f" else int_template
    if template is None:
        return None
    return template, operand_dtypes


def fusable(eqn):
    """Whether ``eqn`` can be written into a fused elementwise kernel."""
    return _template(eqn) is not None


# ---------------------------------------------------------------------------
# Grouping
# ---------------------------------------------------------------------------


class _Group:
    __slots__ = ("members", "shape", "open")

    def __init__(self, shape):
        self.members, self.shape, self.open = [], shape, True


def plan_groups(graph, can_fuse=None, min_size=2):
    """Lists of equation indices to fuse, each in graph order (``min_size`` or
    more each); ``can_fuse(eqn)`` says which equations may join (`fusable`).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sum(fnp.exp(fnp.sin(x) * 2.0)) + x)(np.ones(3))
    >>> [[g.eqns[k].prim.name for k in group] for group in plan_groups(g)]
    [['sin', 'multiply', 'exp']]
    """
    can_fuse = fusable if can_fuse is None else can_fuse
    group_of_var = {}               # a member's output var -> its group
    groups = []
    for k, eqn in enumerate(graph.eqns):
        read = [group_of_var.get(v) for v in eqn.invars if type(v) is Var]
        read = [g for g in read if g is not None]
        joining = []
        ok = can_fuse(eqn)
        if ok:
            shape = eqn.outvars[0].aval.shape
            joining = [g for g in read if g.open and g.shape == shape]
        for g in read:
            if not any(g is j for j in joining):
                g.open = False            # read from outside: nothing joins it now
        if not ok:
            continue
        if joining:
            target = joining[0]
            for g in joining[1:]:
                if g is not target and g.members:
                    target.members.extend(g.members)
                    for m in g.members:
                        group_of_var[graph.eqns[m].outvars[0]] = target
                    g.members = []
        else:
            target = _Group(eqn.outvars[0].aval.shape)
            groups.append(target)
        target.members.append(k)
        group_of_var[eqn.outvars[0]] = target
    return [sorted(g.members) for g in groups if len(g.members) >= min_size]


# ---------------------------------------------------------------------------
# Code generation for one group
# ---------------------------------------------------------------------------


def _splat(value):
    """The one value every element of a constant array holds, or None.

    Constant folding turns ``ones_like(x)`` (the seed of every gradient) into
    an array literal; inlining it as a scalar saves the kernel a full read.
    Checked once, when the graph is compiled.
    """
    if value.dtype not in _C_TYPES or value.size == 0:
        return None
    flat = value.ravel()
    first = flat[0]
    try:
        if not bool((flat == first).all()):
            return None
    except Exception:                # a backend that cannot compare: pass it in
        return None
    return first.item()


def _inline_literal(lit, dtype, splat=True):
    """C text for a scalar literal cast to ``dtype``, or None to pass it in."""
    value = lit.value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if value.shape == () and isinstance(value, (np.ndarray, np.generic)):
            value = value.item() if value.dtype in _C_TYPES else None
        elif splat:
            value = _splat(value)
        else:
            return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 64):
            return None
        text = f"{value}ull" if value >= (1 << 63) else f"{value}ll"
    elif isinstance(value, float):
        if not math.isfinite(value):
            return None
        text = repr(value)
    else:
        return None
    return f"(({_C_TYPES[dtype]}){text})"


class FusedKernel:
    """One generated elementwise kernel: its source, and the backend's callable.

    ``in_params``, ``out_params`` and ``operation`` are the three strings CuPy's
    ``ElementwiseKernel`` takes; ``fn(*inputs)`` runs it and returns a tuple.
    """

    __slots__ = ("in_params", "out_params", "operation", "name", "out_avals", "fn",
                 "size")

    def __init__(self, in_params, out_params, operation, name, out_avals, fn, size):
        self.in_params, self.out_params = in_params, out_params
        self.operation, self.name = operation, name
        self.out_avals, self.fn, self.size = out_avals, fn, size

    @property
    def source(self):
        """The kernel as one readable text: signature line, then the body."""
        return f"// {self.name}({self.in_params}) -> ({self.out_params})\n" \
               f"{self.operation}"

    def __repr__(self):
        return f"<{self.name}: {self.size} ops>"


def _fused_impl(*args, kernel):
    outs = kernel.fn(*args)
    return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)


def _fused_abstract(*avals, kernel):
    return tuple(kernel.out_avals)


# Not in the primitive table: it exists only inside compiled graphs, made by this
# pass after every transformation has run, so it needs no rules.
fused_elementwise_p = Primitive("fused_elementwise", _fused_impl, _fused_abstract,
                                multiple_results=True, register=False)


def reader_counts(graph):
    """How many times each variable is read (by equations and as an output)."""
    counts = collections.Counter()
    for e in graph.eqns:
        counts.update(v for v in e.invars if type(v) is Var)
    counts.update(v for v in graph.outvars if type(v) is Var)
    return counts


def kernel_text(graph, members, readers=None, splat=True):
    """``(in_params, out_params, operation, inputs, outputs)`` for one group.

    ``inputs`` are the operands (vars and non-inlined literals) in kernel
    order, ``outputs`` the member vars the kernel writes out: those read by an
    equation outside the group or returned by the graph. ``splat=True``
    inlines constant arrays that hold a single value.
    """
    readers = reader_counts(graph) if readers is None else readers
    eqns = [graph.eqns[k] for k in members]
    inside = {e.outvars[0] for e in eqns}
    inner = collections.Counter(v for e in eqns for v in e.invars if type(v) is Var)
    needed_outside = {v for v in inside if readers[v] > inner[v]}
    inputs, in_names = [], {}
    names = {}
    lines = []

    def operand(v, dtype):
        if type(v) is Var and v in inside:
            name, have = names[v], v.aval.dtype
        else:
            if type(v) is Literal:
                text = _inline_literal(v, dtype, splat)
                if text is not None:
                    return text
            key = v if type(v) is Var else ("lit", id(v))
            name = in_names.get(key)
            if name is None:
                name = in_names[key] = f"in{len(inputs)}"
                inputs.append(v)
            have = v.aval.dtype
        return name if have == dtype else f"(({_C_TYPES[dtype]}){name})"

    for t, e in enumerate(eqns):
        template, operand_dtypes = _template(e)
        args = [operand(v, d) for v, d in zip(e.invars, operand_dtypes)]
        out = e.outvars[0]
        names[out] = f"t{t}"
        lines.append(f"{_C_TYPES[out.aval.dtype]} t{t} = {template.format(*args)};")
    outputs = [e.outvars[0] for e in eqns if e.outvars[0] in needed_outside]
    for j, v in enumerate(outputs):
        lines.append(f"out{j} = {names[v]};")
    in_params = ", ".join(f"{v.aval.dtype.name} in{i}" for i, v in enumerate(inputs))
    out_params = ", ".join(f"{v.aval.dtype.name} out{j}" for j, v in enumerate(outputs))
    return in_params, out_params, "\n".join(lines), inputs, outputs


@functools.lru_cache(maxsize=256)
def _build(make_kernel, in_params, out_params, operation, name):
    return make_kernel(in_params, out_params, operation, name)


def _broadcast_shape(shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


def fuse_elementwise(graph, make_kernel):
    """``graph`` with each group of `plan_groups` replaced by one kernel call.

    ``make_kernel(in_params, out_params, operation, name)`` builds a kernel
    (CuPy's ``ElementwiseKernel`` signature) whose call returns its outputs.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.tanh(fnp.sin(x) + 1.0))(np.ones(3))
    >>> fused = fuse_elementwise(g, lambda *source: None)
    >>> [e.prim.name for e in fused.eqns]
    ['fused_elementwise']
    >>> print(fused.eqns[0].params["kernel"].operation)
    double t0 = sin(in0);
    double t1 = t0 + ((double)1.0);
    double t2 = tanh(t1);
    out0 = t2;
    """
    groups = plan_groups(graph)
    if not groups:
        return graph
    replace = {}                     # last member index -> fused equation
    skip = set()
    readers = reader_counts(graph)
    for members in groups:
        shape = graph.eqns[members[-1]].outvars[0].aval.shape
        for splat in (True, False):
            in_params, out_params, operation, inputs, outputs = kernel_text(
                graph, members, readers, splat)
            if inputs and _broadcast_shape([v.aval.shape for v in inputs]) == shape:
                break
        else:
            continue                 # the kernel could not infer the output shape
        digest = hashlib.sha1(f"{in_params}|{out_params}|{operation}".encode())
        name = f"fgrad_fused_{digest.hexdigest()[:12]}"
        kernel = FusedKernel(in_params, out_params, operation, name,
                             tuple(v.aval for v in outputs),
                             _build(make_kernel, in_params, out_params, operation,
                                    name), len(members))
        replace[members[-1]] = Equation(fused_elementwise_p, list(inputs),
                                        list(outputs), {"kernel": kernel})
        skip.update(members[:-1])
    if not replace:
        return graph
    eqns = []
    for k, eqn in enumerate(graph.eqns):
        if k in skip:
            continue
        eqns.append(replace.get(k, eqn))
    return Graph(graph.invars, eqns, graph.outvars)


def kernels(compiled):
    """The `FusedKernel` s in a compiled graph (a `Compiled`), in order.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> from fgrad.compiler.codegen import compile_graph
    >>> kernels(compile_graph(fgrad.make_graph(fnp.sin)(np.ones(2))))
    []
    """
    return [e.params["kernel"] for e in compiled.graph.eqns
            if e.prim is fused_elementwise_p]
