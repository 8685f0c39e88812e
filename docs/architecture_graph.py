"""Draw fgrad's layers from its imports: docs/img/architecture.{dot,svg}.

    python docs/architecture_graph.py        # needs graphviz's `dot` for the SVG

Reads every module's imports from the source (no import of fgrad), groups the
modules into the layers of pyproject.toml's import-linter contract, drops
every edge implied by others (transitive reduction), and writes graphviz. The
same reading of the source backs tests/test_architecture.py.
"""
import ast
import shutil
import subprocess
import sys
from pathlib import Path

try:
    import tomllib                  # Python 3.11+; only the picture needs it
except ModuleNotFoundError:
    tomllib = None

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"

# shown as one node each: their modules are one concept to a reader of the picture
COLLAPSED = ("fgrad.primitives", "fgrad.numpy", "fgrad.scipy", "fgrad.testing", "fgrad.optim",
             "fgrad.sparse")
LAYER_NAMES = {"fgrad.core": "core", "fgrad.primitives": "primitives (the rules)",
               "fgrad.interpreters": "interpreters", "fgrad.compiler": "compiler",
               "fgrad.transforms": "transforms",
               "fgrad.numpy": "libraries: fgrad.numpy and the public faces of lower layers",
               "fgrad.sparse": "sparse arrays: traced values on a constant structure",
               "fgrad.nn": "libraries built on fgrad.numpy, and tools",
               "fgrad.dask": "scale-out on Dask", "fgrad.demo": "demo"}


def module_sources(root=ROOT):
    """{module name: path} for every module of fgrad, named as installed."""
    modules = {}
    for base, package in ((root / "fgrad", "fgrad"), (root / "primitives", "fgrad.primitives")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


def _resolve(module, node, is_package):
    if node.level == 0:
        return node.module
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[:len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def imports_of(module, path):
    """``[(target module, imported name or None, lineno, inside a function)]``."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, None, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(module, child, path.name == "__init__.py")
                found.extend((target, a.name, child.lineno, in_function) for a in child.names)
            visit(child, inner)
    visit(tree, False)
    return found


def import_graph(modules):
    """Module -> the fgrad modules it imports (the submodule, when one is named)."""
    graph = {}
    for module, path in modules.items():
        targets = set()
        for target, name, _, _ in imports_of(module, path):
            if name is not None and f"{target}.{name}" in modules:
                targets.add(f"{target}.{name}")
            elif target in modules:
                targets.add(target)
        graph[module] = targets - {module}
    return graph


def layers():
    """The top-level layers of the import-linter contract, bottom first, each a
    list of module names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = config["tool"]["importlinter"]["contracts"][0]
    return [[m.strip() for m in layer.replace(":", "|").split("|")]
            for layer in reversed(contract["layers"])]


def _node(module):
    for collapsed in COLLAPSED:
        if module == collapsed or module.startswith(collapsed + "."):
            return collapsed
    return module


def _reduce(graph):
    """Transitive reduction of an acyclic graph: keep u -> v only if no longer path."""
    def reachable(start, skip):
        seen, todo = set(), [w for w in graph[start] if w != skip]
        while todo:
            w = todo.pop()
            if w not in seen:
                seen.add(w)
                todo.extend(graph[w])
        return seen
    return {u: {v for v in vs if v not in reachable(u, v)} for u, vs in graph.items()}


def to_dot():
    modules = module_sources()
    graph = {}
    for module, targets in import_graph(modules).items():
        if module == "fgrad":          # the public __init__ imports everything
            continue
        u = _node(module)
        graph.setdefault(u, set()).update(_node(t) for t in targets if t != "fgrad")
    for u in graph:
        graph[u].discard(u)
    for vs in graph.values():
        for v in vs:
            graph.setdefault(v, set())
    # the primitive families import each other (rules use other families'
    # primitives); collapsed to one node, that cycle is a self-loop, dropped above
    graph = _reduce(graph)
    # a package whose __init__ only documents its layer says nothing in the picture
    imported = {v for vs in graph.values() for v in vs}
    graph = {u: vs for u, vs in graph.items() if vs or u in imported}
    # an arrow points from the importer down to what it imports; invisible
    # anchors between layers stack them, the core at the bottom
    lines = ["digraph fgrad {", '  rankdir=TB; newrank=true; node [shape=box, fontsize=10, '
             'fontname="Helvetica"]; edge [color="#888888", arrowsize=0.6];']
    below = []
    for i, layer in enumerate(layers()):
        members = sorted(n for n in graph if any(
            n == m or n.startswith(m + ".") for m in layer))
        title = next((LAYER_NAMES[m] for m in layer if m in LAYER_NAMES), layer[0])
        lines.append(f'  subgraph cluster_{i} {{ label="{i + 1}. {title}"; labeljust=l; '
                     'style=rounded; color="#bbbbbb"; fontname="Helvetica";')
        lines.extend(f'    "{n}" [label="{n.removeprefix("fgrad.")}"];' for n in members)
        lines.append("  }")
        if below:
            lines.append(f'  anchor{i} [style=invis, shape=point, width=0];')
            lines.extend(f'  "{n}" -> anchor{i} [style=invis];' for n in members)
            lines.extend(f'  anchor{i} -> "{n}" [style=invis];' for n in below)
        below = members
    for u in sorted(graph):
        lines.extend(f'  "{u}" -> "{v}";' for v in sorted(graph[u]))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    IMG.mkdir(exist_ok=True)
    dot_file = IMG / "architecture.dot"
    dot_file.write_text(to_dot())
    print(f"wrote {dot_file.relative_to(ROOT)}")
    if shutil.which("dot") is None:
        sys.exit("graphviz's `dot` is not installed (apt-get install graphviz): "
                 "the .dot file is written, the SVG is not")
    svg = IMG / "architecture.svg"
    subprocess.run(["dot", "-Tsvg", str(dot_file), "-o", str(svg)], check=True)
    print(f"wrote {svg.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
