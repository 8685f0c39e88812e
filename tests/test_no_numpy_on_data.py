"""No NumPy call on array data in the code that runs on the device.

Primitive impls reach their array module through `fgrad.backend.array_module`,
and rules are written with fgrad primitives, so on CuPy inputs nothing in
primitives/, fgrad/numpy/, fgrad/nn.py or fgrad/interpreters/ may call a NumPy
function on the data. This test reads those files' syntax trees and lists every
call whose function is reached through the ``numpy`` module (``np.sum(...)``,
``np.add.at(...)``, ``getattr(np, name)``); each must be either metadata-only
(`METADATA`) or in the small explicit `ALLOWED` list below.

What it cannot see (a NumPy function stored in a variable and called later, a
method NumPy installs on an object) is covered at run time by test_standin.py,
whose arrays make NumPy raise.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCOPE = ["primitives", "fgrad/numpy", "fgrad/interpreters", "fgrad/nn.py"]

# NumPy functions that only ever see dtypes, shapes or parameters, never arrays.
METADATA = {
    "dtype",               # dtype objects from names or types
    "errstate",            # a context manager over floating-point flags
    "broadcast_shapes",    # shape tuples in, shape tuple out
    "result_type",         # dtype promotion, called on dtypes or 0-d dummies
    "can_cast",            # casting rules between two dtypes
    "exceptions.AxisError",  # an exception class
    "finfo", "iinfo",      # limits of a dtype
}

# (file, enclosing function) -> why a NumPy call there is not on device data.
# A function name matches the innermost enclosing def or any def around it.
ALLOWED = {
    ("fgrad/numpy/_namespace_info.py", "<module>"):
        "the class of NumPy's inspection object, subclassed: dtypes and devices, no data",
    ("primitives/callback.py", "_checked"):
        "a host callback's outputs are host data by contract; the impl moves them "
        "to the arguments' device (asarray_on)",
    ("primitives/callback.py", "_impl"):
        "the arguments were moved to the host first (device_put(a, 'cpu')): a host "
        "callback sees NumPy arrays, as jax.pure_callback's does",
    ("primitives/callback.py", "_looped"):
        "stacks the host outputs of a callback called once per example",
    ("primitives/random.py", "threefry2x32"):
        "numpy.uint32 of Python ints: typed scalar constants of the cipher, which "
        "combine with arrays of any backend",
    ("primitives/random.py", "_counter_words"):
        "numpy.uint64 of Python ints: typed scalar shifts and masks",
    ("fgrad/interpreters/batching.py", "lift"):
        "a Python number every example shares made a typed NumPy scalar, which "
        "combines with arrays of any backend",
    ("primitives/random.py", "_bits64"): "numpy.uint64 of a Python int: a scalar shift",
    ("primitives/random.py", "_log_unit"):
        "numpy.uint64 of Python ints: scalar bit masks of the float64 layout",
    ("primitives/random.py", "<module>"):
        "an empty uint32 array handed to the compiled kernels, which run on NumPy data only",
    ("primitives/sparse.py", "_constant_index"):
        "a sparse structure's index arrays are host constants (read-only NumPy), "
        "like a NumPy index; only the values are device data",
    ("primitives/sparse.py", "_check"): "validates the host index arrays of a structure",
    ("primitives/sparse.py", "_expand"): "row numbers from the host indptr array",
    ("primitives/sparse.py", "__eq__"): "compares two structures' host index arrays",
    ("primitives/sparse.py", "_row_sums"): "index arrays of a new host structure",
    ("primitives/sparse.py", "_factor_impl"):
        "a 0-d object array holding the factor object, so the graph can carry it",
    ("primitives/sparse.py", "_eigsh_impl"):
        "ARPACK's fixed start vector, moved to the data's device by asarray_on",
    ("fgrad/nn.py", "_normal_init"):
        "numpy.asarray of the Python float std: a typed scalar",
    ("primitives/base.py", "dummy"):
        "builds a 0-d dummy of an aval's dtype for abstract (shape/dtype) rules",
    ("primitives/indexing.py", "_dummy_operand"):
        "a zero-strided dummy whose indexing yields the output shape (abstract)",
    ("primitives/indexing.py", "parse_index"):
        "turns a user's Python list index into an index array: host data by "
        "nature, copied to the device by the impl (_device_index)",
    ("primitives/elementwise.py", "_ufunc_primitive"):
        "fetches NumPy's ufunc for the abstract rule's dtype and for the impl's "
        "NumPy branch, taken only when array_module returned NumPy",
    ("primitives/reductions.py", "_reduction"):
        "fetches NumPy's reduction for the abstract rule's dtype (on dummies)",
    ("fgrad/numpy/_arrays.py", "array"):
        "numpy.array on host objects (lists, scalars): array creation, which "
        "fgrad.numpy leaves to NumPy like zeros/ones",
    ("fgrad/numpy/_arrays.py", "asarray"):
        "numpy.asarray on host objects when no like= device array is given",
    ("fgrad/numpy/_manipulation.py", "as_array"):
        "numpy.asarray on host objects (lists, scalars) that are not arrays yet",
    ("fgrad/numpy/_manipulation.py", "_pad_params"):
        "pad widths and constant values: static parameters, not array data",
    ("fgrad/numpy/_reductions.py", "_numpy_shape"):
        "the shape of q when q is a Python number or list (an array's is read "
        "from its .shape)",
    ("fgrad/numpy/_reductions.py", "_static_floats"):
        "quantile levels q: a static parameter (numbers, lists), not array data",
    ("fgrad/numpy/_arrays.py", "shape"): "metadata: NumPy reads .shape only",
    ("fgrad/numpy/_arrays.py", "ndim"): "metadata: NumPy reads .ndim only",
    ("fgrad/numpy/_arrays.py", "size"): "metadata: NumPy reads .size/.shape only",
    ("fgrad/numpy/_arrays.py", "isscalar"): "metadata: a type check",
    ("fgrad/numpy/_arrays.py", "iscomplexobj"): "metadata: NumPy reads .dtype only",
    ("primitives/scipy_linalg.py", "_permutation_impl"):
        "LAPACK's pivots (n integers) applied as sequential swaps on the host; "
        "the permutation goes back to the pivots' device",
    ("fgrad/numpy/_signal.py", "_full_convolution"):
        "the sliding-window index array, from static lengths (copied to the "
        "device by the gather, like a user's index)",
    ("fgrad/numpy/_signal.py", "_spacings"):
        "gradient's spacings and coordinates: static parameters, on the host",
    ("fgrad/numpy/_signal.py", "_along"):
        "reshapes gradient's host coefficients (from the static coordinates)",
    ("fgrad/numpy/_signal.py", "gradient"):
        "np.ndim on a spacing argument: metadata",
    # issue 17: the NumPy surface
    ("primitives/array_likes.py", "_stack_nested"):
        "the host leaves (scalars, NumPy arrays) of a user's list, in the common "
        "dtype, then copied to the tracers' backend by asarray_on",
    ("primitives/array_likes.py", "stack_nested"):
        "np.asarray on host leaves only, for their dtype: metadata",
    ("primitives/float_steps.py", "_ufunc"):
        "fetches NumPy's ufunc for the abstract rule's dtype (the impl calls the "
        "operands' own module)",
    ("fgrad/numpy/_passthrough.py", "_exports"):
        "NumPy's own objects (errstate, dtypes), re-exported: no data",
    ("fgrad/numpy/_arrays.py", "tril_indices_from"): "index arrays from a shape",
    ("fgrad/numpy/_arrays.py", "triu_indices_from"): "index arrays from a shape",
    ("fgrad/numpy/_arrays.py", "diag_indices_from"): "index arrays from a shape",
    ("fgrad/numpy/_arrays.py", "__new__"):
        "calling fnp.ndarray builds a host array, NumPy's constructor",
    ("fgrad/numpy/_arrays.py", "full"):
        "array creation from an untraced fill value, NumPy's own like zeros",
    ("fgrad/numpy/_arrays.py", "linspace"):
        "untraced endpoints: NumPy's creation; traced: the positions 0..num-1 "
        "from the static num, copied to the endpoints' backend",
    ("fgrad/numpy/_nan_functions.py", "nanquantile"):
        "quantile levels q: a static parameter (numbers, lists), not array data",
    ("fgrad/numpy/_nan_functions.py", "nanpercentile"):
        "percentile levels q: a static parameter, not array data",
    ("fgrad/numpy/_extras.py", "vander"):
        "the static powers, and dtype promotion: no array data",
    ("fgrad/numpy/_positions.py", "resize"):
        "the size of a shape and the cyclic gather index: static",
    ("fgrad/numpy/_positions.py", "delete"):
        "the kept positions, from the static length and obj: an index array",
    ("fgrad/numpy/_positions.py", "block"):
        "only lists of host arrays reach it (device arrays take the lifted path)",
    ("fgrad/numpy/_positions.py", "asarray_chkfinite"):
        "only host values reach it (device arrays take the lifted path)",
    ("fgrad/numpy/_positions.py", "insert"):
        "NumPy lays out the result on index arrays from the static shapes; the "
        "mask is copied to the data's backend",
    ("fgrad/numpy/_polynomials.py", "_constant"):
        "static numbers (powers, zero padding), copied to the data's backend",
    ("fgrad/numpy/_polynomials.py", "_zeros"): "zero padding of a static length",
    ("fgrad/numpy/_polynomials.py", "_descending"): "the static powers n, ..., 1",
    ("fgrad/numpy/_polynomials.py", "roots"):
        "the companion matrix's static ones below the diagonal, copied to the "
        "data's backend by _constant",
    ("fgrad/numpy/_value_shapes.py", "_result_type_of"):
        "NumPy's own named tuple types, taken once (at import) from a host dummy",
    ("fgrad/numpy/_value_shapes.py", "_unique_of_size"):
        "static constants (a leading True, the slot numbers 1..size), copied to "
        "the data's backend",
    ("fgrad/numpy/linalg.py", "tensorsolve"): "the size of a shape: metadata",
    ("fgrad/numpy/linalg.py", "tensorinv"): "the size of a shape: metadata",
}


def _numpy_aliases(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "numpy":
                    names.add(alias.asname or "numpy")
    return names


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, ".".join(reversed(parts))
    return None, None


def numpy_calls(path):
    """``(line, enclosing defs, numpy function name)`` for every NumPy call."""
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases = _numpy_aliases(tree)
    found = []

    def visit(node, defs):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs = defs + (node.name,)
        if isinstance(node, ast.ImportFrom) and node.module == "numpy":
            found.append((node.lineno, defs, "from numpy import ..."))
        if isinstance(node, ast.Call):
            root, attr = _dotted(node.func)
            if root in aliases and attr:
                found.append((node.lineno, defs, attr))
            elif (isinstance(node.func, ast.Name) and node.func.id == "getattr"
                  and node.args and isinstance(node.args[0], ast.Name)
                  and node.args[0].id in aliases):
                found.append((node.lineno, defs, "getattr(numpy, ...)"))
        for child in ast.iter_child_nodes(node):
            visit(child, defs)
    visit(tree, ())
    return found


def _files():
    for entry in SCOPE:
        path = ROOT / entry
        if path.is_dir():
            yield from sorted(path.glob("*.py"))
        elif path.exists():
            yield path


def violations():
    out = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        for line, defs, name in numpy_calls(path):
            if name in METADATA:
                continue
            if any("abstract" in d for d in defs):
                continue              # abstract rules see avals and dummies only
            if any((rel, d) in ALLOWED for d in defs or ["<module>"]):
                continue
            where = ".".join(defs) or "<module>"
            out.append(f"{rel}:{line} in {where}: numpy.{name}")
    return out


def test_no_numpy_call_on_array_data():
    found = violations()
    assert not found, (
        "NumPy called where device (CuPy) data can flow; use "
        "fgrad.backend.array_module(*args) in impls and fgrad primitives in rules, "
        "or, if the call never sees array data, add it to ALLOWED with the reason:\n"
        + "\n".join(found))


def test_every_allowed_entry_is_still_needed():
    """A stale allow-list entry would silently permit a future NumPy call there."""
    used = set()
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        for line, defs, name in numpy_calls(path):
            if name in METADATA or any("abstract" in d for d in defs):
                continue
            used.update((rel, d) for d in defs or ["<module>"] if (rel, d) in ALLOWED)
    assert set(ALLOWED) <= used, f"unused ALLOWED entries: {sorted(set(ALLOWED) - used)}"


def test_the_scan_finds_a_numpy_call_on_data(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import numpy as xnp\n\ndef impl(x):\n"
                      "    with xnp.errstate(all='ignore'):\n"
                      "        return xnp.add.at(x, 0, 1), getattr(xnp, 'sin')(x)\n")
    assert [(d, n) for _, d, n in numpy_calls(sample)] == [
        (("impl",), "errstate"), (("impl",), "add.at"),
        (("impl",), "getattr(numpy, ...)")]


@pytest.mark.parametrize("entry", SCOPE)
def test_scope_paths_exist_or_are_pending(entry):
    # fgrad/nn.py is written on another branch; every other path must exist so
    # that a rename cannot empty the scan without notice
    assert (ROOT / entry).exists() or entry == "fgrad/nn.py"
