"""Launchers for GradBench's own tools, run from a checkout the user has built.

``python -m benchmarks.gradbench.peers manual CHECKOUT`` answers GradBench's
protocol with the checkout's compiled ``manual`` binaries, through GradBench's
own ``gradbench.cpp.evaluate`` (the function its evals use to validate).  It
never builds anything: ``define`` succeeds only if ``tools/manual/bin/<eval>``
is already there.

``python -m benchmarks.gradbench.peers jax-blocked CHECKOUT`` runs GradBench's
JAX tool unchanged except that each timed call waits for its result
(``jax.block_until_ready``): the published tool times JAX's asynchronous
dispatch, which can return before the work is done.

``python -m benchmarks.gradbench.peers jax-x64 CHECKOUT`` is ``jax-blocked``
computing in float64 (``JAX_ENABLE_X64=1`` before JAX is imported): the
published tool leaves JAX's default of float32, while fgrad, ``manual`` and
GradBench's inputs are float64.
"""

from __future__ import annotations

import json
import os
import runpy
import sys


def manual_binary(checkout: str, module: str) -> str:
    return os.path.join(checkout, "tools", "manual", "bin", module)


def serve_manual(checkout: str) -> None:
    sys.path.insert(0, os.path.join(checkout, "python", "gradbench"))
    from gradbench import cpp  # the checkout's own runner of C++ tools

    os.chdir(checkout)  # cpp.evaluate finds tools/manual/bin relative to here
    for line in sys.stdin:
        message = json.loads(line)
        response = {"id": message["id"]}
        if message["kind"] == "start":
            response["tool"] = "manual"
        elif message["kind"] == "define":
            binary = manual_binary(checkout, message["module"])
            response["success"] = os.access(binary, os.X_OK)
            if not response["success"]:
                response["error"] = f"{binary} is not built"
        elif message["kind"] == "evaluate":
            response |= cpp.evaluate(tool="manual", module=message["module"],
                                     function=message["function"], input=message["input"])
        print(json.dumps(response), flush=True)


def serve_jax_blocked(checkout: str) -> None:
    tool_dir = os.path.join(checkout, "python", "gradbench", "gradbench", "tools", "jax")
    sys.path[:0] = [tool_dir, os.path.join(checkout, "python", "gradbench")]
    import jax
    from gradbench import wrap

    published = wrap.multiple_runs

    def multiple_runs(**options):
        decorate = published(**options)

        def blocking(function):
            def call(prepared):
                return jax.block_until_ready(function(prepared))
            wrapped = decorate(call)
            wrapped.function = function
            return wrapped
        return blocking

    wrap.multiple_runs = multiple_runs
    sys.argv = [os.path.join(tool_dir, "run.py")]
    runpy.run_path(sys.argv[0], run_name="__main__")


def serve_jax_x64(checkout: str) -> None:
    os.environ["JAX_ENABLE_X64"] = "1"  # read by JAX when it is first imported
    serve_jax_blocked(checkout)


if __name__ == "__main__":
    which, checkout = sys.argv[1], os.path.abspath(sys.argv[2])
    try:
        {"manual": serve_manual, "jax-blocked": serve_jax_blocked,
         "jax-x64": serve_jax_x64}[which](checkout)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
