"""``python -m benchmarks.gradbench --gradbench PATH``: GradBench's evals against fgrad and peers.

Plays the part of GradBench's CLI (``gradbench run``) without it: for each eval
and tool it starts the eval's own Python driver from the checkout and the tool,
passes every message and response between them, counts the eval's own
validations (each checks an answer against the ``manual`` tool), and scores the
timings as the CLI does (`scoring`).  Nothing is built: the checkout's
``manual`` tool must have been built by the user as GradBench documents.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import subprocess
import sys
import time

from . import scoring
from .scoring import ToolRun, timed_from

EVALS = ("hello", "lse", "llsq", "gmm", "kmeans", "ode", "det", "lstm", "ht", "ba",
         "particle", "saddle")
TOOLS = ("manual", "fgrad", "jax", "jax-blocked", "jax-x64", "pytorch")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Workloads the eval's defaults ask for that GradBench's checkout cannot supply
#: here, and the eval options that leave them out (the same for every tool).
#: ht's hand12 data file and lstm's text are stored in Git LFS-sized files that
#: some snapshots lack; the runner checks for them and says what it leaves out.
QUICK_ARGS = {
    "lse": ["-n", "1000", "10000"], "llsq": ["-n", "16", "256"],
    "gmm": ["-d", "2", "10", "-k", "5", "10", "-n", "100"],
    "kmeans": ["-k", "10", "-n", "1000", "-d", "8"], "ode": ["-n", "1000", "-s", "1", "10"],
    "det": ["-l", "5", "6"], "lstm": ["-l", "2", "-c", "1024"], "ht": ["--max", "2"],
    "ba": ["--max", "2"],
}

MISSING_MANUAL = """\
GradBench's `manual` tool is not built in {checkout} ({binary} is missing).
Every eval validates against it. Build it as GradBench documents: its README,
section "Running evals outside of Docker", and tools/manual/README.md in the
checkout (https://github.com/gradbench/gradbench#running-evals-outside-of-docker).
This runner never builds GradBench's code."""


def thread_env(checkout: str) -> dict:
    """One thread for every library, as GradBench runs tools by default."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                 "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[name] = "1"
    env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(checkout, "python", "gradbench"), REPO, env.get("PYTHONPATH", "")])
    return env


def tool_command(tool: str, checkout: str) -> list[str]:
    tools = os.path.join(checkout, "python", "gradbench", "gradbench", "tools")
    return {
        "fgrad": [sys.executable, "-m", "benchmarks.gradbench.tool"],
        "manual": [sys.executable, "-m", "benchmarks.gradbench.peers", "manual", checkout],
        "jax": [sys.executable, os.path.join(tools, "jax", "run.py")],
        "jax-blocked": [sys.executable, "-m", "benchmarks.gradbench.peers", "jax-blocked",
                        checkout],
        "jax-x64": [sys.executable, "-m", "benchmarks.gradbench.peers", "jax-x64", checkout],
        "pytorch": [sys.executable, os.path.join(tools, "pytorch", "run.py")],
    }[tool]


def supported(tool: str, eval_name: str, checkout: str) -> str | None:
    """None if ``tool`` runs ``eval_name``, else why not, from the tool's evals.txt.

    GradBench lists in ``tools/<tool>/evals.txt`` the evals a tool implements,
    each optionally followed by the outcome its nightly accepts (``timeout``,
    ``error``); those are skipped here too rather than run into the timeout."""
    name = "jax" if tool in ("jax-blocked", "jax-x64") else tool
    listing = os.path.join(os.path.dirname(os.path.abspath(__file__)), "evals.txt") \
        if tool == "fgrad" else os.path.join(checkout, "tools", name, "evals.txt")
    try:
        with open(listing) as handle:
            entries = dict((line.split() + [""])[:2] for line in handle if line.strip())
    except FileNotFoundError:
        return None
    if eval_name not in entries:
        return "not implemented"
    return f"skipped (GradBench's nightly: {entries[eval_name]})" if entries[eval_name] else None


def read_line(stream, timeout: float) -> str | None:
    """The next line of a child's stdout, or None after ``timeout`` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else None


def run_pair(eval_name: str, tool: str, checkout: str, eval_args: list, timeout: float,
             cpu: int | None, log_path: str | None) -> ToolRun:
    """Run one eval against one tool, as GradBench's intermediary does."""
    env = thread_env(checkout)
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    driver = os.path.join(checkout, "python", "gradbench", "gradbench", "evals", eval_name,
                          "run.py")
    evaluator = subprocess.Popen([sys.executable, driver, *eval_args], cwd=checkout, env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    toolproc = subprocess.Popen(tool_command(tool, checkout), cwd=checkout, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                preexec_fn=pin)
    result = ToolRun(tool)
    log = open(log_path, "w") if log_path else None
    try:
        for line in evaluator.stdout:
            message = json.loads(line)
            if log:
                log.write(json.dumps({"message": message}) + "\n")
            if message["kind"] == "analysis":
                result.valid += message["valid"]
                result.invalid += not message["valid"]
                if not message["valid"]:
                    result.errors.append(message.get("error", "")[-2000:])
            toolproc.stdin.write(line)
            toolproc.stdin.flush()
            answer = read_line(toolproc.stdout, timeout)
            if not answer:
                result.note = ("timeout" if answer is None else "tool exited") + \
                    f" at message {message['id']} ({message['kind']} " \
                    f"{message.get('function', '')} {message.get('description', '')})"
                break
            response = json.loads(answer)
            if log:
                log.write(json.dumps({"response": response}) + "\n")
            if message["kind"] == "define":
                result.defined = response.get("success", False)
                if not result.defined:
                    result.note = "undefined"
            elif message["kind"] == "evaluate":
                result.evaluated += 1
                if not response.get("success"):
                    result.failed += 1
                    result.errors.append(str(response.get("error", ""))[-2000:])
                timed = timed_from(response.get("timings"))
                if timed is not None:
                    key = (message.get("description", ""), message["function"])
                    result.timings[key] = timed
            evaluator.stdin.write(answer)
            evaluator.stdin.flush()
    except BrokenPipeError:
        result.note = result.note or "pipe closed"
    finally:
        for child in (toolproc, evaluator):
            try:
                child.stdin.close()
            except BrokenPipeError:
                pass
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        if log:
            log.close()
    return result


# --- reporting --------------------------------------------------------------------------

def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt_ratio(value: float | None, reference: float | None) -> str:
    if value is None or not reference:
        return "—"
    ratio = value / reference
    if ratio < 0.1:
        return f"{ratio:.1g}x"
    return f"{ratio:.2f}x" if ratio < 100 else f"{ratio:.0f}x"


def outcome(run: ToolRun) -> str:
    if not run.defined:
        return run.note or "undefined"
    if run.note:
        return run.note
    if run.failed:
        return f"{run.failed} failed"
    if run.invalid:
        return f"{run.invalid} invalid"
    return "ok"


def table(eval_name: str, runs: dict, eval_args: list) -> str:
    """One eval's report: totals per tool, then per workload (markdown)."""
    manual = runs.get("manual")
    reference = {which: manual and scoring.total(eval_name, manual, which)
                 for which in ("mean", "fastest")}
    lines = [f"### {eval_name}" + (f" (`{' '.join(eval_args)}`)" if eval_args else
                                   " (GradBench's default workloads)"), ""]
    lines += ["| tool | outcome | validated | total, as scored | vs manual "
              "| total, fastest runs | vs manual |", "|---|---|---:|---:|---:|---:|---:|"]
    for tool, run in runs.items():
        scored = scoring.total(eval_name, run, "mean")
        fastest = scoring.total(eval_name, run, "fastest")
        lines.append(f"| {tool} | {outcome(run)} | {run.valid}/{run.evaluated} "
                     f"| {fmt_time(scored)} | {fmt_ratio(scored, reference['mean'])} "
                     f"| {fmt_time(fastest)} | {fmt_ratio(fastest, reference['fastest'])} |")
    rows = {tool: scoring.workloads(eval_name, run) for tool, run in runs.items()}
    names = list(dict.fromkeys(name for per_tool in rows.values() for name in per_tool))
    if names and eval_name in (*scoring.CLASSIC, *scoring.EQUIVALENT_FUNCTIONS):
        header = " | ".join(runs)
        lines += ["", "Fastest run per workload: primal / derivative, and the sum's ratio to "
                  "manual's." if eval_name in scoring.CLASSIC else
                  "Fastest run per function, and its ratio to manual's.", "",
                  f"| workload | {header} |", "|---|" + "---:|" * len(runs)]
        for name in names:
            cells = []
            base = rows.get("manual", {}).get(name)
            base_sum = base and sum(t.fastest for t in base.values())
            for tool in runs:
                row = rows[tool].get(name)
                if not row:
                    cells.append("—")
                    continue
                parts = " / ".join(fmt_time(row[k].fastest) if k in row else "—"
                                   for k in (("primal", "derivative")
                                             if eval_name in scoring.CLASSIC else ("function",)))
                ratio = fmt_ratio(sum(t.fastest for t in row.values()), base_sum)
                cells.append(parts if tool == "manual" else f"{parts} ({ratio})")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for tool, run in runs.items():
        for error in run.errors[:1]:
            lines += ["", f"{tool}: first error:", "```", error.strip()[-1500:], "```"]
    return "\n".join(lines)


def overview(summaries: list[dict], tools: list[str]) -> str:
    """One line per eval from ``summary.json`` files: each tool's totals (as scored /
    fastest runs) as multiples of manual's, and its validations."""
    lines = ["| eval | workloads | " + " | ".join(t for t in tools if t != "manual")
             + " | validated |", "|---|---:|" + "---:|" * len(tools)]
    for summary in summaries:
        for eval_name, entry in summary["evals"].items():
            results = entry["tools"]
            manual = results.get("manual", {})
            workloads = len({key.split("|")[0] for result in results.values()
                             for key in result.get("timings", {})})
            cells = []
            for tool in tools:
                result = results.get(tool)
                if tool == "manual":
                    continue
                if not result or result["outcome"] != "ok":
                    cells.append(result["outcome"] if result else "—")
                    continue
                scored = fmt_ratio(result["total_mean"], manual.get("total_mean"))
                fastest = fmt_ratio(result["total_fastest"], manual.get("total_fastest"))
                cells.append(f"{scored} / {fastest}" if manual.get("total_mean")
                             else f"{fmt_time(result['total_mean'])} / "
                                  f"{fmt_time(result['total_fastest'])}")
            validated = ", ".join(f"{tool} {r['valid']}/{r['evaluated']}"
                                  for tool, r in results.items() if r["evaluated"])
            lines.append(f"| {eval_name} | {workloads} | " + " | ".join(cells)
                         + f" | {validated} |")
    return "\n".join(lines)


def checkout_commit(checkout: str) -> str:
    try:
        return subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], text=True,
                              capture_output=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return os.environ.get("GRADBENCH_COMMIT", "unknown (not a git checkout)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gradbench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--gradbench",
                        help="a GradBench checkout whose manual tool is built")
    parser.add_argument("--evals", default=",".join(e for e in EVALS if e != "hello"),
                        help="comma-separated evals (default: all but hello)")
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated tools")
    parser.add_argument("--quick", action="store_true",
                        help="tiny workloads (a smoke test, not a measurement)")
    parser.add_argument("--min-runs", type=int, default=3,
                        help="passed to each eval: runs per workload (fastest-run figures need "
                        "several)")
    parser.add_argument("--min-seconds", type=float, default=None,
                        help="passed to each eval (its default: 1 s per workload)")
    parser.add_argument("--eval-args", action="append", default=[], metavar="EVAL:ARGS",
                        help="extra options for one eval's driver, e.g. 'ht:--max 11'")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds to wait for any one response (the nightly's 600)")
    parser.add_argument("--cpu", type=int, default=0,
                        help="pin every tool to this CPU (-1: no pinning)")
    parser.add_argument("--output", help="directory for summary.json (and --logs)")
    parser.add_argument("--logs", action="store_true",
                        help="also write every message and response to OUTPUT/EVAL-TOOL.jsonl")
    parser.add_argument("--overview", nargs="+", metavar="SUMMARY",
                        help="print one line per eval from these summary.json files, run "
                        "nothing")
    args = parser.parse_args(argv)

    if args.overview:
        summaries = []
        for path in args.overview:
            with open(path) as handle:
                summaries.append(json.load(handle))
        print(overview(summaries, [t for t in args.tools.split(",") if t]))
        return
    if not args.gradbench:
        parser.error("--gradbench PATH is required: a GradBench checkout with manual built")
    checkout = os.path.abspath(args.gradbench)
    evals = [e for e in args.evals.split(",") if e]
    tools = [t for t in args.tools.split(",") if t]
    extra = {}
    for item in args.eval_args:
        name, _, options = item.partition(":")
        extra.setdefault(name, []).extend(options.split())
    if not os.path.isdir(os.path.join(checkout, "evals")):
        sys.exit(f"{checkout} is not a GradBench checkout (no evals/ folder)")
    for eval_name in evals:  # every eval but particle and saddle validates against manual
        binary = os.path.join(checkout, "tools", "manual", "bin", eval_name)
        if eval_name not in scoring.EQUIVALENT_FUNCTIONS and not os.path.exists(binary):
            sys.exit(MISSING_MANUAL.format(checkout=checkout, binary=binary))
    commit = checkout_commit(checkout)
    print(f"GradBench {commit} at {checkout}; {platform.machine()} {platform.processor()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}; every tool on one "
          f"thread{'' if args.cpu < 0 else f', pinned to CPU {args.cpu}'}", flush=True)
    if args.logs and not args.output:
        sys.exit("--logs needs --output DIR")
    if args.output:
        os.makedirs(args.output, exist_ok=True)
    summary = {"gradbench_commit": commit, "evals": {}}
    for eval_name in evals:
        eval_args = (QUICK_ARGS.get(eval_name, []) if args.quick else []) + \
            extra.get(eval_name, [])
        driver_args = []
        if eval_name != "hello":  # hello's driver takes no options
            driver_args = ["--min-runs", str(args.min_runs)]
            if args.min_seconds is not None:
                driver_args += ["--min-seconds", str(args.min_seconds)]
        driver_args += eval_args  # last, so that --eval-args can override the above
        runs = {}
        for tool in tools:
            reason = supported(tool, eval_name, checkout)
            if reason:
                runs[tool] = ToolRun(tool, note=reason)
                print(f"  {eval_name} / {tool}: {reason}", file=sys.stderr, flush=True)
                continue
            started = time.perf_counter()
            log = os.path.join(args.output, f"{eval_name}-{tool}.jsonl") if args.logs else None
            runs[tool] = run_pair(eval_name, tool, checkout, driver_args, args.timeout,
                                  None if args.cpu < 0 else args.cpu, log)
            print(f"  {eval_name} / {tool}: {outcome(runs[tool])}, "
                  f"{runs[tool].valid}/{runs[tool].evaluated} validated, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        print(table(eval_name, runs, eval_args) + "\n", flush=True)
        summary["evals"][eval_name] = {
            "args": eval_args,
            "tools": {tool: {"outcome": outcome(run), "valid": run.valid,
                             "evaluated": run.evaluated,
                             "total_mean": scoring.total(eval_name, run, "mean"),
                             "total_fastest": scoring.total(eval_name, run, "fastest"),
                             "timings": {f"{d}|{f}": vars(t) for (d, f), t in run.timings.items()}}
                      for tool, run in runs.items()}}
        if args.output:  # after every eval, so that a run cut short keeps what it measured
            with open(os.path.join(args.output, "summary.json"), "w") as handle:
                json.dump(summary, handle, indent=1)


if __name__ == "__main__":
    main()
