"""The fgrad tool: GradBench's protocol on stdin/stdout.

Run as ``python -m benchmarks.gradbench.tool``.  Each line on stdin is one
message from an eval; each gets one line back with the same ``id``:

- ``start``: the tool names itself;
- ``define``: import ``benchmarks.gradbench.evals.<module>``; success says the
  tool implements that eval;
- ``evaluate``: call the module's function on the message's input, which runs it
  ``min_runs`` times and at least ``min_seconds`` and reports one ``evaluate``
  timing per run;
- ``analysis``: the eval's verdict on an earlier answer, acknowledged.

This file is the whole protocol; the evals' modules know nothing about it
beyond the `timed` decorator below.
"""

from __future__ import annotations

# Importing the package pins NumPy, OpenBLAS and XLA to one thread before any of
# them loads, as GradBench runs every tool single-threaded by default.
import benchmarks  # noqa: F401  (side effect: thread pinning)

import functools
import importlib
import json
import os
import sys
import time
import traceback

# NumPy asks the kernel for transparent huge pages for every array of 4 MiB or
# more (read once, when NumPy loads: nothing above imports it). Where THP's
# defrag setting is "madvise", each such page fault may first compact memory:
# on this project's benchmark machine, growing the process by 50 MB took
# 0.3-0.5 s of CPU that way and 0.02-0.05 s without, which gmm's largest
# gradient paid at its first runs (over a second). PyTorch's allocator does not ask.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

EVALS_PACKAGE = "benchmarks.gradbench.evals"


def timed(*, prepare, output):
    """Decorate ``function(prepared_input)`` as a GradBench-callable of the raw input.

    ``prepare`` turns the message's JSON input into arrays (not timed), ``output``
    turns the last result into JSON (not timed).  The function itself is run
    ``input["min_runs"]`` times and until ``input["min_seconds"]`` have passed,
    each run timed on its own, as GradBench's CLI expects (it averages them).

    >>> square = timed(prepare=lambda raw: raw["x"], output=float)(lambda x: x * x)
    >>> answer = square.evaluate({"x": 3.0, "min_runs": 2, "min_seconds": 0})
    >>> answer["output"], len(answer["timings"])
    (9.0, 2)
    """
    def decorate(function):
        @functools.wraps(function)
        def evaluate(raw):
            min_runs = raw.get("min_runs", 1) if isinstance(raw, dict) else 1
            min_seconds = raw.get("min_seconds", 0.0) if isinstance(raw, dict) else 0.0
            prepared = prepare(raw)
            timings, elapsed = [], 0
            while len(timings) < min_runs or elapsed < min_seconds * 1e9:
                start = time.perf_counter_ns()
                result = function(prepared)
                ns = time.perf_counter_ns() - start
                timings.append({"name": "evaluate", "nanoseconds": ns})
                elapsed += ns
            return {"success": True, "output": output(result), "timings": timings}

        function.evaluate = evaluate
        return function

    return decorate


def respond(message: dict) -> dict:
    """The response to one protocol message (without its ``id``)."""
    kind = message["kind"]
    if kind == "start":
        return {"tool": "fgrad"}
    if kind == "define":
        try:
            importlib.import_module(f"{EVALS_PACKAGE}.{message['module']}")
        except ModuleNotFoundError as exc:
            return {"success": False, "error": f"fgrad has no {message['module']!r} eval: {exc}"}
        return {"success": True}
    if kind == "evaluate":
        module = importlib.import_module(f"{EVALS_PACKAGE}.{message['module']}")
        try:
            return getattr(module, message["function"]).evaluate(message["input"])
        except Exception as exc:  # reported to the eval, which counts a failure
            return {"success": False, "error": "".join(traceback.format_exception(exc))}
    return {}  # analysis: nothing to do but acknowledge


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        print(json.dumps({"id": message["id"]} | respond(message)), flush=True)


if __name__ == "__main__":
    try:
        main()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
