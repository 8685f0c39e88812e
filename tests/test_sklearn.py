"""scikit-learn and SciPy, unmodified, under fgrad's transformations.

The cases are in tests/sklearn_scipy_cases.py. SciPy reads SCIPY_ARRAY_API once,
when it is first imported, and the rest of the suite imports SciPy without it
(setting it here would change how SciPy treats every other test's arrays); so
the cases run in a pytest process of their own with SCIPY_ARRAY_API=1, and this
test passes when every one of them does.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("sklearn", reason="pip install 'fgrad[sklearn]'")
pytest.importorskip("scipy", reason="pip install 'fgrad[scipy]'")

TESTS = pathlib.Path(__file__).resolve().parent
CASES = TESTS / "sklearn_scipy_cases.py"
PAGE = TESTS.parent / "docs" / "array-api.md"


def test_scikit_learn_and_scipy_cases_pass_with_scipy_s_array_api_on():
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", str(CASES), "-n", "0", "-q",
                          "-W", "ignore::RuntimeWarning"],
                         cwd=TESTS.parent, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
    assert re.search(r"\d+ passed", run.stdout), run.stdout[-5000:]  # not skipped whole


def _page_rows(heading):
    """The first column of the table under ``heading`` on docs/array-api.md."""
    section = PAGE.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", section, re.M)}


def test_the_page_lists_each_estimator_and_function_the_cases_check():
    source = CASES.read_text()
    tables = {}
    for table in ("ESTIMATORS", "LEAVES_THE_STANDARD", "METRICS", "FLOAT_METRICS",
                  "NO_DERIVATIVE", "SCIPY", "SCIPY_LEAVES_THE_STANDARD",
                  "SCIPY_MAKES_NUMPY_ARRAYS"):
        body = source.split(f"\n{table} = {{\n", 1)[1].split("\n}\n", 1)[0]
        tables[table] = set(re.findall(r'^    "([^"]+)":', body, re.M))
    assert _page_rows("scikit-learn: what works") == (
        tables["ESTIMATORS"] | tables["LEAVES_THE_STANDARD"] | tables["METRICS"]
        | tables["FLOAT_METRICS"] | tables["NO_DERIVATIVE"] | {"LabelEncoder"})
    assert _page_rows("SciPy: what works") == (
        tables["SCIPY"] | tables["SCIPY_LEAVES_THE_STANDARD"]
        | tables["SCIPY_MAKES_NUMPY_ARRAYS"] | {"signal.oaconvolve"})
