"""The code blocks in docs/complex.md and docs/numpy.md run as written."""
import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("page", ["complex.md", "numpy.md"])
def test_code_blocks_run(page):
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"{page} has no python code blocks"
    namespace = {}
    for block in blocks:                 # later blocks use earlier names
        exec(compile(block, f"{page}", "exec"), namespace)
