"""The figures of one `benchmarks.run` as a chart and as Markdown tables.

``python -m benchmarks.run --plot DIR`` calls `write`: ``DIR/benchmarks.svg``
is a bar chart of each row's time as a multiple of the NumPy floor measured in
the same run (one group of bars per workload, one bar per library, log
scale), and ``DIR/benchmarks.md`` the same figures as Markdown tables
(workload x library: the ratio, then the time per call) under the run's
header. docs/performance.md shows both.
"""
import os

from .peers import ORDER


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


def _workloads(results):
    names = []
    for workload, _, _, _ in results:
        if workload not in names:
            names.append(workload)
    return names


def _ratio(r):
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def _time(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def markdown(results, header):
    """The run's header and two tables (ratio to the floor, time per call)."""
    workloads, libs = _workloads(results), _libraries(results)
    cell = {(w, lib): (t, r) for w, lib, t, r in results}
    lines = ["```text", *header, "```", "",
             "Time per call as a multiple of the NumPy floor in the same run "
             "(lower is better):", "",
             "| workload | " + " | ".join(libs) + " |",
             "|---|" + "---:|" * len(libs)]
    for w in workloads:
        lines.append(f"| {w} | " + " | ".join(
            _ratio(cell[w, lib][1]) if (w, lib) in cell else "—" for lib in libs) + " |")
    lines += ["", "Time per call:", "",
              "| workload | " + " | ".join(libs) + " |",
              "|---|" + "---:|" * len(libs)]
    for w in workloads:
        lines.append(f"| {w} | " + " | ".join(
            _time(cell[w, lib][0]) if (w, lib) in cell else "—" for lib in libs) + " |")
    return "\n".join(lines) + "\n"


def chart(results, path):
    """Write the SVG bar chart of the ratios to ``path`` (matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads, libs = _workloads(results), _libraries(results)
    cell = {(w, lib): r for w, lib, _, r in results}
    width = 0.8 / max(len(libs), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(workloads) + 2), 4.2))
    colors = plt.get_cmap("tab10")
    for j, lib in enumerate(libs):
        xs = [i + (j - (len(libs) - 1) / 2) * width for i, w in enumerate(workloads)
              if (w, lib) in cell]
        ys = [cell[w, lib] for w in workloads if (w, lib) in cell]
        ax.bar(xs, ys, width, label=lib, color=colors(j % 10))
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads, rotation=30, ha="right")
    ax.set_ylabel("time / NumPy floor (log scale, lower is better)")
    ax.legend(fontsize="small", ncol=min(len(libs), 4))
    fig.tight_layout()
    # no timestamps in the file: the same figures give the same SVG
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


def write(directory, results, header):
    """Write benchmarks.svg and benchmarks.md into ``directory``; their paths."""
    os.makedirs(directory, exist_ok=True)
    svg = os.path.join(directory, "benchmarks.svg")
    md = os.path.join(directory, "benchmarks.md")
    chart(results, svg)
    with open(md, "w", encoding="utf-8") as f:
        f.write(markdown(results, header))
    return [svg, md]
