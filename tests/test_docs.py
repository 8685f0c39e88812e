"""Every ```python block in docs/ and the README runs on its own, as a reader
pasting it into a fresh interpreter would run it (a block whose first line is
exactly ``# continues the block above`` runs after the block above, in its
namespace), and every public module's docstring examples pass (doctest)."""
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


CONTINUES = "# continues the block above"


def blocks_of(text):
    """The page's ```python blocks, each with the blocks it continues prepended
    as one list: ``[[block], [block, continuation], ...]`` runs, one per chain."""
    chains = []
    for block in BLOCK.findall(text):
        if block.split("\n", 1)[0] == CONTINUES and chains:
            chains[-1].append(block)
        else:
            chains.append([block])
    return chains


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(page):
    text = page.read_text()
    assert not text.startswith("```python\n" + CONTINUES), \
        f"{page.name}: the first block cannot continue a block above it"
    number = 0
    for chain in blocks_of(text):
        namespace = {"__name__": f"docs_{page.stem}_{number}"}       # a fresh one
        for i, block in enumerate(chain):
            # "# requires: autograd" first (after the marker): a block for an
            # optional library (a peer's side of a comparison, dask), run only
            # where it is installed; the blocks continuing it are left out too
            required = re.match(r"(?:# continues the block above\n)?# requires: ([\w.]+)",
                                block)
            if required and importlib.util.find_spec(required.group(1)) is None:
                number += len(chain) - i
                break
            try:
                exec(compile(block, f"{page.name}[block {number}]", "exec"), namespace)
            except Exception as err:
                raise AssertionError(f"{page.name}, code block {number} failed: {err!r}"
                                     f"\n{block}") from err
            number += 1


def test_a_continued_block_shares_the_namespace_above():
    text = ("```python\nx = 1\n```\n\n```python\n# continues the block above\ny = x\n```\n"
            "```python\nz = 2\n```\n")
    assert blocks_of(text) == [["x = 1\n", "# continues the block above\ny = x\n"],
                               ["z = 2\n"]]


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
