"""Every ```python block in docs/ and the README runs, top to bottom per page,
and every public module's docstring examples pass (doctest)."""
import doctest
import importlib
import importlib.util
import pathlib
import pkgutil
import re

import numpy as np
import pytest

import fgrad

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = sorted(ROOT.glob("docs/**/*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

# every module of fgrad (the demo is a script, tested in test_demo.py); an
# editable install maps fgrad.primitives from primitives/, so it is walked too
DOCTEST_MODULES = sorted({
    info.name for path, prefix in ((fgrad.__path__, "fgrad."),
                                   (fgrad.primitives.__path__, "fgrad.primitives."))
    for info in pkgutil.walk_packages(path, prefix) if info.name != "fgrad.demo"}
    | {"fgrad", "fgrad.primitives"})


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(page):
    blocks = BLOCK.findall(page.read_text())
    namespace = {"__name__": f"docs_{page.stem}"}
    for i, block in enumerate(blocks):
        # "# requires: autograd" on a block's first line: a peer library's side
        # of a side-by-side comparison, run only where that library is installed
        required = re.match(r"# requires: ([\w.]+)", block)
        if required and importlib.util.find_spec(required.group(1)) is None:
            continue
        try:
            exec(compile(block, f"{page.name}[block {i}]", "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"{page.name}, code block {i} failed: {err!r}\n{block}") \
                from err


# modules whose examples need an optional package (skipped where it is missing)
DOCTEST_REQUIRES = {"fgrad.dask": "dask"}


@pytest.mark.parametrize("module", DOCTEST_MODULES)
def test_docstring_examples(module):
    if module in DOCTEST_REQUIRES:
        pytest.importorskip(DOCTEST_REQUIRES[module])
    mod = importlib.import_module(module)
    result = doctest.testmod(mod, extraglobs={"np": np, "fgrad": fgrad},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {module}"
