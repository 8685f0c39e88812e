"""Every ```python block in docs/ and the README runs as a reader would run it:
pasted alone into a fresh interpreter, or after the blocks it says it continues
(a block whose first line is exactly ``# continues the block above`` runs after
the block above, in the same interpreter); and every public module's docstring
examples pass (doctest).

A fresh interpreter costs about a second to import fgrad, numpy and what they
load, and the pages hold some 150 runs, so the runs are forked from a server
process (one per test worker) that has done only ``import fgrad`` (and
imported SciPy and hypothesis): each fork starts, as far as fgrad is concerned, in the state
of ``python -c "import fgrad"``, with none of the modules, settings or caches
that another run (or this test process) loaded."""
import doctest
import importlib
import importlib.util
import json
import os
import pathlib
import pkgutil
import re
import subprocess
import sys

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

# The server: reads one JSON request a line ({"blocks": [[filename, source], ...],
# "output": path}), forks, runs the blocks in the child as ``__main__`` with the
# child's stdin, stdout and stderr on /dev/null and the output file, and answers
# with the child's exit status. Of fgrad it imports only what ``import fgrad``
# does (test_each_run_starts_fresh checks it); it also imports SciPy and
# hypothesis, which fgrad never looks for in sys.modules, because a third of
# the pages' runs import them (half a second to a second each). A block still
# has to import what it uses: each run starts with an empty namespace.
SERVER = r"""
import json, os, sys, traceback
import fgrad
try:
    import scipy.integrate, scipy.linalg, scipy.optimize, scipy.sparse, scipy.special
    import scipy.stats
except ImportError:
    pass
try:
    import hypothesis, hypothesis.extra.numpy
    if os.environ.get("CI"):    # as the suite's own tests: a red CI run reproduces
        hypothesis.settings.register_profile("docs-ci", derandomize=True)
        hypothesis.settings.load_profile("docs-ci")
except ImportError:
    pass
answers = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            namespace = {"__name__": "__main__", "__builtins__": __builtins__}
            for filename, source in request["blocks"]:
                exec(compile(source, filename, "exec"), namespace)
            status = 0
        except BaseException:
            traceback.print_exc()
        # no interpreter teardown: it costs most of a second with SciPy loaded,
        # and a daemon compile thread would die at a normal exit too
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    answers.write(json.dumps(os.waitstatus_to_exitcode(wait_status)) + "\n")
    answers.flush()
"""


# a block that sets this runs in a new interpreter (`FreshInterpreters.run_new`)
SCIPY_ARRAY_API = 'os.environ["SCIPY_ARRAY_API"]'
NEW_INTERPRETER = r"""
import json, sys
namespace = {"__name__": "__main__"}
for filename, source in json.loads(sys.argv[1]):
    exec(compile(source, filename, "exec"), namespace)
"""


class FreshInterpreters:
    """Runs lists of blocks, each list in a fork of a process that has only
    imported fgrad."""

    def __init__(self, directory):
        # the reader's environment: not the test suite's choice of compile mode
        env = {k: v for k, v in os.environ.items() if k != "FGRAD_JIT_COMPILE"}
        self.server = subprocess.Popen([sys.executable, "-c", SERVER], cwd=ROOT, env=env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True)
        self.output = pathlib.Path(directory) / "output.txt"

    def run(self, blocks):
        """``(exit status, what the blocks printed)`` of ``[(filename, source)]``
        run one after another in one fresh interpreter."""
        if any(SCIPY_ARRAY_API in source for _, source in blocks):
            return self.run_new(blocks)
        self.server.stdin.write(json.dumps({"blocks": blocks,
                                            "output": str(self.output)}) + "\n")
        self.server.stdin.flush()
        answer = self.server.stdout.readline()
        assert answer, "the docs' block server died"
        return json.loads(answer), self.output.read_text()

    def run_new(self, blocks):
        """`run` in a new interpreter, for blocks that set SCIPY_ARRAY_API: SciPy
        reads it once, when first imported, and the server has imported SciPy."""
        env = {k: v for k, v in os.environ.items() if k != "FGRAD_JIT_COMPILE"}
        run = subprocess.run([sys.executable, "-c", NEW_INTERPRETER, json.dumps(blocks)],
                             cwd=ROOT, env=env, capture_output=True, text=True)
        return run.returncode, run.stdout + run.stderr

    def close(self):
        self.server.stdin.close()
        self.server.wait(timeout=60)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    interpreters = FreshInterpreters(tmp_path_factory.mktemp("docs-blocks"))
    yield interpreters
    interpreters.close()


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


def _required(block):
    """The optional module a block names first (``# requires: autograd``, after
    the marker), or None."""
    match = re.match(r"(?:# continues the block above\n)?# requires: ([\w.]+)", block)
    return match and match.group(1)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(page, fresh):
    text = page.read_text()
    assert not text.startswith("```python\n" + CONTINUES), \
        f"{page.name}: the first block cannot continue a block above it"
    number, failures = 0, []
    for chain in blocks_of(text):
        # a block for an optional library (a peer's side of a comparison, dask)
        # runs only where it is installed; the blocks continuing it are left out too
        runnable = []
        for block in chain:
            required = _required(block)
            if required and importlib.util.find_spec(required) is None:
                break
            runnable.append((f"{page.name}[block {number + len(runnable)}]", block))
        if runnable:
            status, output = fresh.run(runnable)
            if status != 0:
                failures.append(f"{page.name}, code blocks {number}-"
                                f"{number + len(runnable) - 1} failed in a fresh "
                                f"interpreter:\n{output}")
        number += len(chain)
    assert not failures, "\n".join(failures)


def test_a_continued_block_shares_the_namespace_above():
    text = ("```python\nx = 1\n```\n\n```python\n# continues the block above\ny = x\n```\n"
            "```python\nz = 2\n```\n")
    assert blocks_of(text) == [["x = 1\n", "# continues the block above\ny = x\n"],
                               ["z = 2\n"]]


def test_each_run_starts_fresh(fresh):
    """A run sees neither the test process's modules nor an earlier run's."""
    assert "fgrad.testing" in sys.modules                       # this process has it
    status, output = fresh.run([("a", "import fgrad\nfgrad.testing\n")])
    assert status == 1 and "has no attribute 'testing'" in output
    assert fresh.run([("b", "import fgrad.testing\nprint(fgrad.testing.check_grads)\n")]
                     )[0] == 0
    status, output = fresh.run([("c", "import fgrad\nfgrad.testing\n")])
    assert status == 1 and "has no attribute 'testing'" in output
    status, fgrad_modules = fresh.run([("g", "import sys\nprint(sorted(m for m in sys.modules"
                                              " if m.split('.')[0] == 'fgrad'))\n")])
    assert status == 0 and fgrad_modules == subprocess.run(
        [sys.executable, "-c", "import sys, fgrad\nprint(sorted(m for m in sys.modules"
                               " if m.split('.')[0] == 'fgrad'))"],
        capture_output=True, text=True, check=True, cwd=ROOT).stdout
    status, output = fresh.run([("d", "x = 1\n"), ("e", "print(x + 1)\n")])
    assert (status, output) == (0, "2\n")
    assert fresh.run([("f", "print(x)\n")])[0] == 1


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
