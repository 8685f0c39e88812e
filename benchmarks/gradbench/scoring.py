"""Scores a GradBench run the way GradBench's CLI does (crates/gradbench/src/stats.rs).

For each ``evaluate`` response the CLI averages its ``evaluate`` timings (the
first run, which pays any compilation, included); a workload's time is its
primal's average plus its derivative's; an eval's total is the sum over its
workloads.  ``particle`` and ``saddle`` have four equivalent functions and score
the fastest one's average.  Beside each average this module keeps the fastest
single run, the steady-state figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: (primal, derivative) function names of the "classic" evals, as the CLI lists them.
CLASSIC = {
    "ba": ("objective", "jacobian"), "gmm": ("objective", "jacobian"),
    "ht": ("objective", "jacobian"), "lstm": ("objective", "jacobian"),
    "kmeans": ("cost", "dir"),
    "ode": ("primal", "gradient"), "llsq": ("primal", "gradient"),
    "det": ("primal", "gradient"), "lse": ("primal", "gradient"),
}
#: Evals scored by their fastest function.
EQUIVALENT_FUNCTIONS = ("particle", "saddle")


@dataclass
class Timed:
    """One evaluate response: its mean run (the CLI's figure) and its fastest run."""
    mean: float
    fastest: float
    runs: int


@dataclass
class ToolRun:
    """What one tool did on one eval."""
    tool: str
    defined: bool = False
    evaluated: int = 0
    failed: int = 0
    valid: int = 0
    invalid: int = 0
    errors: list = field(default_factory=list)
    #: (workload description, function) -> Timed
    timings: dict = field(default_factory=dict)
    note: str = ""

    @property
    def complete(self) -> bool:
        return self.defined and self.failed == 0 and self.invalid == 0 and self.evaluated > 0


def timed_from(timings: list | None) -> Timed | None:
    runs = [t["nanoseconds"] * 1e-9 for t in timings or () if t["name"] == "evaluate"]
    if not runs:
        return None
    return Timed(sum(runs) / len(runs), min(runs), len(runs))


def workloads(eval_name: str, run: ToolRun) -> dict:
    """description -> {"primal": Timed, "derivative": Timed} for classic evals,
    function -> {"function": Timed} for the equivalent-function ones."""
    table: dict = {}
    if eval_name in CLASSIC:
        primal, derivative = CLASSIC[eval_name]
        for (description, function), timed in run.timings.items():
            role = {primal: "primal", derivative: "derivative"}.get(function)
            if role is not None:
                table.setdefault(description, {})[role] = timed
    else:
        for (_, function), timed in run.timings.items():
            table[function] = {"function": timed}
    return table


def total(eval_name: str, run: ToolRun, which: str) -> float | None:
    """The CLI's total time (``which="mean"``), or the same from fastest runs."""
    table = workloads(eval_name, run)
    if not table or eval_name not in (*CLASSIC, *EQUIVALENT_FUNCTIONS):
        return None
    if eval_name in EQUIVALENT_FUNCTIONS:
        return min(getattr(row["function"], which) for row in table.values())
    return sum(getattr(timed, which) for row in table.values() for timed in row.values())
