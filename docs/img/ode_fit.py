"""Draw docs/img/ode-fit.svg: the damped-oscillator fit of docs/scipy.md, run
to convergence (the page runs a few steps of the same loop).

    pip install '.[scipy]' matplotlib && python docs/img/ode_fit.py
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import fgrad  # noqa: E402
import fgrad.numpy as fnp  # noqa: E402
from fgrad.scipy.integrate import odeint  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent / "ode-fit.svg"


def oscillator(y, t, k, c):
    return fnp.stack([y[1], -k * y[0] - c * y[1]])


def main(steps=150):
    rng = np.random.default_rng(0)
    ts = np.linspace(0.0, 6.0, 25)
    y0 = np.array([1.0, 0.0])
    observed = odeint(oscillator, y0, ts, args=(2.0, 0.3))[:, 0] \
        + 0.02 * rng.standard_normal(ts.shape)

    def loss(p):
        path = odeint(oscillator, y0, ts, args=(p["k"], p["c"]), rtol=1e-6, atol=1e-8)
        return fnp.mean((path[:, 0] - observed) ** 2)

    params = start = {"k": 1.5, "c": 0.1}
    opt = fgrad.optim.adam(0.05)
    state = opt.init(params)
    for _ in range(steps):
        grads = fgrad.grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        params = fgrad.optim.apply_updates(params, updates)

    fine = np.linspace(0.0, 6.0, 300)
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.plot(ts, observed, "o", ms=4, color="black", label="noisy observations")
    for p, style, label in ((start, ":", "initial guess"), (params, "-", "fitted")):
        ax.plot(fine, odeint(oscillator, y0, fine, args=(p["k"], p["c"]))[:, 0], style,
                label=f"{label}: k={float(p['k']):.2f}, c={float(p['c']):.2f}")
    ax.set_xlabel("t")
    ax.set_ylabel("position")
    ax.set_title("Fitting a damped oscillator with odeint and fgrad.optim.adam")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT, metadata={"Date": None})      # reproducible: no timestamp
    print(f"wrote {OUT}; fitted k={float(params['k']):.3f}, c={float(params['c']):.3f}")


if __name__ == "__main__":
    main()
