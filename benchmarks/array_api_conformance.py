"""The Array API test suite against NumPy, fgrad.numpy and fgrad under jit, vmap
and grad: ``python -m benchmarks.array_api_conformance --suite PATH``.

``PATH`` is your own checkout of https://github.com/data-apis/array-api-tests
with its ``array-api`` submodule (``git clone --recursive``); nothing of it is
part of fgrad. For each namespace the suite runs in a fresh process with
``ARRAY_API_TESTS_MODULE`` pointing at it, and one line says how many of its
tests passed, failed and were skipped; ``--failures`` also lists each failing
test with the first line of its error. The namespaces:

- ``numpy``: NumPy itself, the reference on the same machine;
- ``fgrad.numpy``: fgrad's namespace outside every transformation;
- ``jit``, ``vmap``, ``grad``: `fgrad.testing.array_api.namespace`, every
  call with arrays run under that transformation.

The jit namespace stages and caches every call, and by default replays the
staged graphs as NumPy calls (``--jit-compile never``): the suite makes
thousands of small one-call programs, and compiling each (``--jit-compile
background``) makes the run many times longer without exercising more of the
namespace.

Every figure depends on the suite's commit (printed first), on NumPy's version
and on hypothesis's draws: compare namespaces run on the same machine.

Options: ``--only jit,grad`` picks namespaces, ``--max-examples N`` sets
hypothesis's examples per test (10, the figure docs/array-api.md reports),
``-k EXPR`` selects tests as pytest's ``-k``, ``--no-shrink`` reports each
failure's first example without shrinking it (hypothesis's shrinking of a
failure through fgrad's tracebacks can take minutes per test), ``--json FILE`` writes the
counts and failing test ids, ``--pytest-args`` passes more options.
"""
import argparse
import json
import os
import subprocess

from fgrad.testing.array_api import NAMESPACES, run_suite, suite_module


def _suite_commit(suite):
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=suite,
                          capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Run array-api-tests against NumPy, fgrad.numpy and fgrad under "
                    "jit, vmap and grad.")
    parser.add_argument("--suite", required=True,
                        help="a checkout of data-apis/array-api-tests")
    parser.add_argument("--only", default=",".join(NAMESPACES),
                        help=f"namespaces, comma-separated: {', '.join(NAMESPACES)}")
    parser.add_argument("--max-examples", type=int, default=10)
    parser.add_argument("-k", dest="select", default=None)
    parser.add_argument("--failures", action="store_true",
                        help="list every failing test")
    parser.add_argument("--json", default=None, help="write the results to this file")
    parser.add_argument("--no-shrink", action="store_true",
                        help="report each failure's first example, unshrunk (much faster "
                             "where tests fail)")
    parser.add_argument("--jit-compile", default="never",
                        help="FGRAD_JIT_COMPILE for the jit namespace: never (the default: "
                             "staged graphs replayed as NumPy calls), background or sync")
    parser.add_argument("--pytest-args", default="",
                        help="more pytest options, e.g. '--timeout=120 -x'")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMESPACES]
    if unknown:
        parser.error(f"unknown namespaces {unknown}; choose from {list(NAMESPACES)}")
    if not os.path.isdir(os.path.join(args.suite, "array_api_tests")):
        parser.error(f"{args.suite} is not a checkout of array-api-tests "
                     f"(no array_api_tests/ folder in it)")

    print(f"array-api-tests {_suite_commit(args.suite)}, "
          f"--hypothesis-max-examples={args.max_examples}")
    results = {}
    for name in names:
        counts, failures, seconds = run_suite(args.suite,
                                              suite_module(name, not args.no_shrink),
                                              args.max_examples, args.select,
                                              args.pytest_args.split(),
                                              {"FGRAD_JIT_COMPILE": args.jit_compile})
        total = sum(counts.values())
        print(f"{name:12} {counts.get('passed', 0):5} of {total:5} passed   "
              f"failed {counts.get('failed', 0):4}  errors {counts.get('error', 0):3}  "
              f"skipped {counts.get('skipped', 0):3}   ({seconds:.0f} s)", flush=True)
        if args.failures:
            for test, why in sorted(failures.items()):
                print(f"    {test}  {why[:120]}")
        results[name] = {"counts": counts, "failures": failures}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
