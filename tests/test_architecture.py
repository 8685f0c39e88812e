"""The architecture of docs/architecture.md, checked on the source tree.

- import-linter's contracts in pyproject.toml (layers, independence) hold;
- no import cycle outside ``primitives/`` (whose rule families use each other);
- no import inside a function, except of an optional dependency;
- no private name (``_x``) used outside the module that defines it, except a
  package's private module (``fgrad/numpy/_reductions.py``) used by that package.

The source is read from this checkout, laid out as it installs (``primitives/``
as ``fgrad/primitives``), so the checks see the same modules with an editable
install or a regular one.
"""
import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fgrad.interpreters import callbacks

ROOT = Path(__file__).resolve().parents[1]

# imported inside functions on purpose: optional, and heavy or absent
OPTIONAL = {"cupy", "cupyx", "scipy", "llvmlite", "dask", "distributed", "zarr",
            "sklearn", "tqdm", "matplotlib", "threadpoolctl"}


def _load_graph_reader():
    # docs/architecture_graph.py reads the source's imports for the picture in
    # docs/architecture.md; the checks here read them the same way
    spec = importlib.util.spec_from_file_location(
        "architecture_graph", ROOT / "docs" / "architecture_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GRAPH = _load_graph_reader()
MODULES = GRAPH.module_sources(ROOT)


def _imports(module):
    return GRAPH.imports_of(module, MODULES[module])


def _edges():
    return GRAPH.import_graph(MODULES)


def test_no_import_cycle_outside_primitives():
    graph = {m: {t for t in ts if not t.startswith("fgrad.primitives")}
             for m, ts in _edges().items() if not m.startswith("fgrad.primitives")}
    # Tarjan's strongly connected components: any with two modules is a cycle
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    assert not cycles, f"import cycles: {cycles}"


def test_no_import_inside_a_function_except_optional_dependencies():
    offenders = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {target}"
                 for m in MODULES for target, _, line, in_function in _imports(m)
                 if in_function and target.split(".")[0] not in OPTIONAL]
    assert not offenders, "\n".join(offenders)


def _private_module_of_package(target, importer):
    """Whether ``target`` is a private module of the importer's own package."""
    parent, _, last = target.rpartition(".")
    return last.startswith("_") and (importer == parent or importer.startswith(parent + "."))


def test_no_private_name_crosses_a_module_boundary():
    offenders = []
    for module in MODULES:
        for target, name, line, _ in _imports(module):
            if not target.startswith("fgrad"):
                continue
            if target != module and any(part.startswith("_") for part in target.split(".")) \
                    and not _private_module_of_package(target, module):
                offenders.append(f"{module}:{line} imports from private module {target}")
            if name and name.startswith("_") and not name.startswith("__") \
                    and not _private_module_of_package(f"{target}.{name}", module):
                offenders.append(f"{module}:{line} imports private name {target}.{name}")
    assert not offenders, "\n".join(offenders)


def test_no_private_attribute_of_an_imported_module_is_read():
    """``alias._name`` where ``alias`` is an fgrad module imported here."""
    offenders = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.startswith("fgrad"):
                for a in node.names:
                    if f"{node.module}.{a.name}" in MODULES:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and node.attr.startswith("_") \
                    and not node.attr.startswith("__") \
                    and not _private_module_of_package(
                        f"{aliases[node.value.id]}.{node.attr}", module):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} reads "
                                 f"{aliases[node.value.id]}.{node.attr}")
    assert not offenders, "\n".join(offenders)


def test_import_linter_contracts_hold(tmp_path):
    pytest.importorskip("importlinter")
    # the package as it installs, so import-linter finds fgrad.primitives
    shutil.copytree(ROOT / "fgrad", tmp_path / "fgrad")
    shutil.copytree(ROOT / "primitives", tmp_path / "fgrad" / "primitives")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from importlinter.cli import lint_imports
        sys.exit(lint_imports(config_filename={str(ROOT / "pyproject.toml")!r},
                              no_cache=True, no_logo=True))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_the_architecture_picture_is_current():
    if GRAPH.tomllib is None:
        pytest.skip("reading pyproject.toml needs Python 3.11's tomllib")
    committed = (ROOT / "docs" / "img" / "architecture.dot").read_text()
    assert GRAPH.to_dot() == committed, (
        "the imports changed since docs/img/architecture.dot was drawn: run "
        "python docs/architecture_graph.py and commit docs/img/architecture.*")


def test_an_unknown_interpreter_callback_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown interpreter callback 'grad'.*'vjp', 'vmap'"):
        callbacks.register(grad=lambda f: f)
