"""Coverage of SciPy that cannot rot: every public callable of ``scipy.special``
and every method of every ``scipy.stats`` distribution is either provided by
`fgrad.scipy`, with a property spec, or listed in the one table
`fgrad.scipy.not_provided.NOT_PROVIDED` with a reason; docs/scipy.md shows that
table as it is."""
import inspect
import pathlib

import pytest

scipy_special = pytest.importorskip("scipy.special")
scipy_stats = pytest.importorskip("scipy.stats")

import fgrad.scipy.special as fs  # noqa: E402
import fgrad.scipy.stats as fst  # noqa: E402
from fgrad.scipy.not_provided import NOT_PROVIDED, markdown_table  # noqa: E402
from primitive_specs import NONDIFF_SPECS, SPECS  # noqa: E402
from scipy_stats_specs import STATS_SPECS  # noqa: E402

# provided special functions whose spec has another name
SPECIAL_SPEC_NAMES = {"psi": "digamma", "logsumexp": "scipy_logsumexp",
                      "softmax": "scipy_softmax", "log_softmax": "scipy_log_softmax"}
DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "scipy.md"


def _public_callables(module):
    return sorted(n for n in dir(module) if not n.startswith("_")
                  and callable(getattr(module, n)))


def _distributions():
    """Every distribution object of scipy.stats: the rv_continuous/rv_discrete
    instances and the multivariate generators (objects with a logpdf/logpmf)."""
    out = []
    for name in dir(scipy_stats):
        obj = getattr(scipy_stats, name)
        if name.startswith("_") or inspect.isclass(obj) or inspect.isroutine(obj):
            continue
        if isinstance(obj, (scipy_stats.rv_continuous, scipy_stats.rv_discrete)) or \
                hasattr(obj, "logpdf") or hasattr(obj, "logpmf"):
            out.append(name)
    return sorted(out)


def _not_provided(key):
    dist_method = key.split(".", 1)[1] if key.startswith("stats.") else None
    wildcard = dist_method and "stats.*." + dist_method.split(".", 1)[-1]
    return key in NOT_PROVIDED or (key.count(".") == 2 and wildcard in NOT_PROVIDED)


def test_every_scipy_special_callable_is_provided_with_a_spec_or_listed():
    unaccounted, untested = [], []
    for name in _public_callables(scipy_special):
        if hasattr(fs, name):
            spec = SPECIAL_SPEC_NAMES.get(name, name)
            if spec not in SPECS and spec not in NONDIFF_SPECS:
                untested.append(name)
        elif not _not_provided(f"special.{name}"):
            unaccounted.append(name)
    assert not unaccounted, (f"scipy.special names neither provided by fgrad.scipy.special "
                             f"nor listed in fgrad/scipy/not_provided.py: {unaccounted}")
    assert not untested, f"fgrad.scipy.special functions without a property spec: {untested}"


def test_every_method_of_every_scipy_distribution_is_provided_with_a_spec_or_listed():
    unaccounted, untested = [], []
    for dist in _distributions():
        ours = getattr(fst, dist, None)
        if ours is None:
            if not _not_provided(f"stats.{dist}"):
                unaccounted.append(dist)
            continue
        for method in _public_callables(getattr(scipy_stats, dist)):
            if hasattr(ours, method):
                if f"{dist}.{method}" not in STATS_SPECS:
                    untested.append(f"{dist}.{method}")
            elif not _not_provided(f"stats.{dist}.{method}"):
                unaccounted.append(f"{dist}.{method}")
    assert not unaccounted, (f"scipy.stats distributions or methods neither provided by "
                             f"fgrad.scipy.stats nor listed in not_provided.py: {unaccounted}")
    assert not untested, f"fgrad.scipy.stats methods without a property spec: {untested}"


def test_the_table_lists_nothing_fgrad_provides():
    stale = [key for key in NOT_PROVIDED if "*" not in key and (
        (key.startswith("special.") and hasattr(fs, key.split(".")[1]))
        or (key.startswith("stats.") and key.count(".") == 1
            and hasattr(fst, key.split(".")[1]))
        or (key.count(".") == 2 and hasattr(getattr(fst, key.split(".")[1], None),
                                            key.split(".")[2]))
    )]
    assert not stale, f"listed as not provided, but fgrad.scipy has them: {stale}"


def test_docs_show_the_current_table():
    page = DOCS.read_text()
    assert markdown_table() in page, (
        "docs/scipy.md does not show the current not-provided table; replace the table "
        "under 'What is not provided' with fgrad.scipy.not_provided.markdown_table()")
