"""The figures of one `benchmarks.run` as a chart, Markdown tables and JSON.

``python -m benchmarks.run --plot DIR`` calls `write`: ``DIR/benchmarks.json``
keeps the run (its header and one ``[workload, library, seconds, ratio]`` row
per timing), ``DIR/benchmarks.svg`` is a chart of each row's time as a multiple
of the NumPy floor measured in the same run (one panel per group of workloads,
one bar per library, log scale), and ``DIR/benchmarks.md`` the same figures as
one Markdown table per group (the floor's time per call, then each library's
ratio to it). docs/performance.md shows the chart and the tables.

``python -m benchmarks.plot RUN.json --svg PATH`` draws the chart again from a
stored run and prints its tables (docs/img/benchmarks.json is the page's run).
"""
import argparse
import json
import math
import os
import sys

from .peers import ORDER

# The chart's panels and the page's tables, in order; a workload of no group
# goes to "Other".
GROUPS = [
    ("Per-operation overhead and elementwise gradients (eager grad)",
     ["chain-grad", "sin-eager", "elementwise", "mlp-grad"]),
    ("Compiled: jit(grad)", ["jit-chain", "jit-mlp8", "jit-rnn", "jit-scan", "jit-elem",
                             "jit-sin", "jit-compile"]),
    ("Loops under jit (scan, while_loop)", ["hmc", "rwm-vmap8", "cg-while", "rnn-scan", "lstm"]),
    ("Models and linear algebra", ["lenet-grad", "einsum-grad", "solve-grad"]),
    ("Per-example gradients (vmap)", ["pex-grad", "pex-jit", "pex-loop"]),
    ("Second order and Jacobians", ["hvp", "hvp-600", "jacrev", "jacrev-vjp"]),
    ("ODEs", ["ode-lv", "ode-lv-fwd", "ode-node", "ode-node-fwd", "ode-lv-jit", "ode-lv-vmap",
              "ode-robertson", "ode-node-batch"]),
    ("Random numbers", ["rand-uniform", "rand-normal", "mlp-dropout"]),
    ("Solvers and sparse matrices", ["argmin-solve", "argmin-grad", "sparse-matvec-grad",
                                     "spsolve-grad"]),
]

# The chart draws one bar per library (never a variant such as fgrad-unfused,
# which the tables give), each library in a fixed colour of the Okabe-Ito
# palette (told apart with most colour vision) and with its own marker at the
# bar's end, so that no two libraries look alike in colour or in grey.
STYLES = {"fgrad": ("#0072B2", "o"), "autograd": ("#009E73", "s"),
          "jax": ("#E69F00", "^"), "torch": ("#CC79A7", "D")}

# Short column titles, so that a group's table fits the page
SHORT = {"fgrad-unfused": "unfused", "fgrad-eager": "eager"}


def _libraries(results):
    """Libraries in the table's order: peers first, then their variants."""
    names = []
    for _, lib, _, _ in results:
        if lib not in names:
            names.append(lib)

    def rank(label):
        base = label.split("-")[0]
        return (ORDER.index(base) if base in ORDER else len(ORDER), label != base, label)
    return sorted(names, key=rank)


def groups(results):
    """``[(title, workloads, libraries)]``: the groups with rows in ``results``,
    each with the libraries (the floor left out) that have a figure in it."""
    present = []
    for _, names in GROUPS:
        present += names
    other = [w for w, _, _, _ in results if w not in present]
    out = []
    for title, names in GROUPS + [("Other", list(dict.fromkeys(other)))]:
        rows = [r for r in results if r[0] in names]
        workloads = [w for w in names if any(r[0] == w for r in rows)]
        if workloads:
            out.append((title, workloads, [lib for lib in _libraries(rows) if lib != "numpy"]))
    return out


def _ratio(r):
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def _time(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _table(workloads, libs, cell, floor):
    """One Markdown table: a row per workload, a column per library (after the
    floor's time per call when ``floor``)."""
    head = ["workload"] + (["NumPy floor"] if floor else []) + [SHORT.get(x, x) for x in libs]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for w in workloads:
        cells = [w]
        if floor:
            cells.append(_time(cell[w, "numpy"][0]) if (w, "numpy") in cell else "—")
        cells += [_ratio(cell[w, lib][1]) if (w, lib) in cell else "—" for lib in libs]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(results, header):
    """The run's header, then one table per group: the floor's time per call
    and every library's time as a multiple of it. A group with variants of a
    library (fgrad-unfused, jax-jit) has them in a second table beside fgrad's
    own figure, so that no table is wider than six columns."""
    cell = {(w, lib): (t, r) for w, lib, t, r in results}
    lines = ["```text", *header, "```"]
    for title, workloads, libs in groups(results):
        peers = [lib for lib in libs if lib in ORDER]
        variants = [lib for lib in libs if lib not in ORDER]
        lines += ["", f"**{title}**", "", *_table(workloads, peers, cell, floor=True)]
        if variants:
            rows = [w for w in workloads if any((w, lib) in cell for lib in variants)]
            lines += ["", f"Variants ({', '.join(SHORT.get(x, x) for x in variants)}), "
                          "as multiples of the same floor:", "",
                      *_table(rows, ["fgrad"] + variants, cell, floor=False)]
    return "\n".join(lines) + "\n"


def chart(results, path):
    """Write the SVG chart of the ratios to ``path`` (matplotlib): one panel per
    group, a horizontal bar per workload and library (`STYLES`' libraries only),
    the floor at 1, the legend above the panels. Drawn 8 inches wide with
    11-point text, so that at a page's ~750 px its labels are about 14 px high."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    cell = {(w, lib): r for w, lib, _, r in results if lib in STYLES}
    panels = []
    for title, workloads, _ in groups(results):
        libs = [lib for lib in STYLES if any((w, lib) in cell for w in workloads)]
        panels.append((title, workloads, libs))
    shown = [lib for lib in STYLES if any(lib in libs for _, _, libs in panels)]
    heights = [0.45 + 0.075 * len(w) * len(libs) for _, w, libs in panels]
    ratios = list(cell.values()) + [1.0]
    # one scale for every panel, powers of ten labelled as multiples of the floor
    low, high = min(ratios) / 4, max(ratios) * 2.5
    ticks = [10.0 ** k for k in range(math.ceil(math.log10(low)),
                                      math.floor(math.log10(high)) + 1)]
    with plt.rc_context({"font.size": 11, "svg.hashsalt": "fgrad"}):
        fig, axes = plt.subplots(len(panels), 1, figsize=(8, sum(heights) + 1.2),
                                 gridspec_kw={"height_ratios": heights}, squeeze=False,
                                 layout="constrained")
        for ax, (title, workloads, libs) in zip(axes[:, 0], panels):
            thickness = 0.8 / len(libs)
            for j, lib in enumerate(libs):
                ys = [i + (j - (len(libs) - 1) / 2) * thickness
                      for i, w in enumerate(workloads) if (w, lib) in cell]
                xs = [cell[w, lib] for w in workloads if (w, lib) in cell]
                colour, marker = STYLES[lib]
                # from the floor: a bar to the left is faster than NumPy by hand
                ax.barh(ys, [x - 1 for x in xs], thickness, left=1, color=colour)
                ax.plot(xs, ys, linestyle="none", marker=marker, markersize=4,
                        color=colour, markeredgecolor="black", markeredgewidth=0.5)
                if lib == "fgrad":      # its figure at the bar's end, readable near 1x
                    for x, y in zip(xs, ys):
                        ax.annotate(_ratio(x), (x, y), xytext=(6 if x >= 1 else -6, 0),
                                    textcoords="offset points", va="center",
                                    ha="left" if x >= 1 else "right", fontsize=9,
                                    bbox={"facecolor": "white", "edgecolor": "none",
                                          "alpha": 0.8, "pad": 0.5})
            ax.set_xscale("log")
            ax.set_xlim(low, high)
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{t:g}x" for t in ticks])
            ax.minorticks_off()
            ax.axvline(1.0, color="black", linewidth=1)
            ax.set_yticks(range(len(workloads)))
            ax.set_yticklabels(workloads)
            ax.set_ylim(len(workloads) - 0.5, -0.5)
            ax.set_title(title, loc="left", fontsize=12)
            ax.grid(axis="x", color="#dddddd")
            ax.set_axisbelow(True)
        axes[-1, 0].set_xlabel("time as a multiple of NumPy by hand (the black line); "
                               "shorter is faster")
        handles = [Line2D([], [], color=STYLES[lib][0], marker=STYLES[lib][1], linewidth=6,
                          markeredgecolor="black", markeredgewidth=0.5) for lib in shown]
        # outside the panels, above the first: it covers no bar and no title
        fig.legend(handles, shown, loc="outside upper center", ncol=len(shown),
                   frameon=False)
        # no timestamps in the file: the same figures give the same SVG
        fig.savefig(path, format="svg", metadata={"Date": None})
        plt.close(fig)


def calls_chart(rows, path):
    """Write to ``path`` an SVG of the time of each first call, one panel per
    row: ``rows`` maps a row to `benchmarks.compile_cost.measure`'s runs
    ({series: [runs]}, each run's ``times`` one per call); each call's
    best time over the runs is drawn (log scale)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"background": "fgrad (background)", "sync": "fgrad (compile=\"sync\")",
              "before": "fgrad before tiers", "never": "fgrad (compile=\"never\")",
              "jax": "jax.jit"}
    fig, axes = plt.subplots(1, len(rows), figsize=(5.5 * len(rows), 4.0), squeeze=False)
    colors = plt.get_cmap("tab10")
    for ax, (row, runs) in zip(axes[0], rows.items()):
        for j, series in enumerate(labels):
            if series not in runs:
                continue
            per_call = [min(values) for values in zip(*(r["times"] for r in runs[series]))]
            ax.plot(range(1, len(per_call) + 1), per_call, marker=".", linewidth=1,
                    label=labels[series], color=colors(j))
        ax.set_yscale("log")
        ax.set_title(row)
        ax.set_xlabel("call")
        ax.set_ylabel("seconds (log scale)")
        ax.legend(fontsize="small")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


def write(directory, results, header):
    """Write benchmarks.json, benchmarks.svg and benchmarks.md into ``directory``;
    their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"benchmarks.{ext}") for ext in ("json", "svg", "md")]
    with open(paths[0], "w", encoding="utf-8") as f:
        json.dump({"header": header, "results": [list(r) for r in results]}, f, indent=1)
        f.write("\n")
    chart(results, paths[1])
    with open(paths[2], "w", encoding="utf-8") as f:
        f.write(markdown(results, header))
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plot",
                                     description="Draw a stored run's chart; print its "
                                                 "tables.")
    parser.add_argument("run", help="a benchmarks.json written by benchmarks.run --plot")
    parser.add_argument("--svg", help="where to write the chart (default: beside RUN)")
    args = parser.parse_args(argv)
    with open(args.run, encoding="utf-8") as f:
        run = json.load(f)
    results = [tuple(r) for r in run["results"]]
    svg = args.svg or os.path.join(os.path.dirname(args.run), "benchmarks.svg")
    chart(results, svg)
    print(markdown(results, run["header"]))
    print(f"wrote {svg}", file=sys.stderr)


if __name__ == "__main__":
    main()
