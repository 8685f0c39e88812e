"""Checking derivatives against finite differences: `check_grads`.

`check_grads` compares forward and reverse mode against central finite
differences along random directions, then recurses on the derivative functions
themselves, so ``order=2`` also checks the rules' own derivatives.
"""
import numpy as np

from fgrad.core.backend import asarray_on, device_put, module_of_leaves
from fgrad.core.errors import FgradError
from fgrad.core.trace import get_aval
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.transforms.differentiation import jvp, vjp


class GradientCheckError(FgradError, AssertionError):
    """A derivative disagreed with finite differences (or with the other mode)."""


# The checks compare numbers on the host: finite differences are test
# arithmetic, so copying device results back here is the point, not a leak.
def to_host(x):
    """``x`` as a NumPy array on the host (device results are copied back)."""
    return np.asarray(device_put(x, "cpu"))


def _on_backend_of(value, like):
    """Host ``value`` put where ``like`` lives (the device, for device inputs)."""
    return asarray_on(module_of_leaves([like]), value)


def _inner(xs, ys):
    # The pairing under which a VJP is the transpose of the JVP: re(sum(x * y)),
    # without conjugation (JAX's and autograd's complex convention). For real
    # arrays it is the ordinary dot product.
    total = 0.0
    for x, y in zip(xs, ys):
        total = total + np.sum(np.real(to_host(x) * to_host(y)))
    return float(total)


def _directions(v):
    """``v``, and for complex inputs also its purely real and purely imaginary
    parts, so both real directions of every complex input are checked."""
    if not any(get_aval(x).dtype.kind == "c" for x in v):
        return [v]
    real_part, imag_part = [], []
    for x in v:
        h = to_host(x)
        if h.dtype.kind == "c":
            real_part.append(_on_backend_of(np.asarray(np.real(h), h.dtype), x))
            imag_part.append(_on_backend_of(np.asarray(1j * np.imag(h), h.dtype), x))
        else:
            real_part.append(x)
            imag_part.append(_on_backend_of(np.zeros_like(h), x))
    return [v, real_part, imag_part]


def random_like(leaves, rng):
    """A standard-normal array (complex for complex leaves) like each leaf."""
    out = []
    for x in leaves:
        aval = get_aval(x)
        v = rng.standard_normal(aval.shape)
        if aval.dtype.kind == "c":
            v = v + 1j * rng.standard_normal(aval.shape)
        out.append(_on_backend_of(np.asarray(v, aval.dtype), x))
    return out


def _axpy(a, xs, ys):
    return [_on_backend_of(np.asarray(to_host(y) + a * to_host(x), get_aval(y).dtype), y)
            for x, y in zip(xs, ys)]


def _tolerances(leaves, atol, rtol, eps):
    low = any(get_aval(x).dtype in (np.float32, np.complex64) for x in leaves)
    return (atol if atol is not None else (1e-2 if low else 1e-5),
            rtol if rtol is not None else (1e-2 if low else 1e-5),
            eps if eps is not None else (1e-3 if low else 1e-4))


def _close(a, b, atol, rtol, what):
    if not np.allclose(a, b, atol=atol, rtol=rtol):
        raise GradientCheckError(f"{what}: {a!r} != {b!r} (atol={atol}, rtol={rtol})")


def check_grads(f, args, order=2, modes=("fwd", "rev"), atol=None, rtol=None,
                eps=None, seed=0):
    """Check ``f``'s derivatives at ``args`` against finite differences.

    ``fwd`` compares `fgrad.jvp` along a random direction ``v`` with central
    differences ``(f(x + h v) - f(x - h v)) / 2h`` at ``h = eps`` and ``eps/2``,
    combined by Richardson extrapolation; ``rev`` checks
    ``<u, J v>`` computed by `fgrad.vjp` against the same. With both modes the
    two are checked against each other too. A complex input is perturbed along
    a random complex direction and along its purely real and purely imaginary
    parts, and VJPs are paired with ``re(sum(ct * v))`` (no conjugation, the
    JAX/autograd convention). ``order=2`` repeats all of it on the
    functions ``x -> jvp(f, x, v)`` and ``x -> vjp(f, x)(u)``. Raises
    `GradientCheckError` showing both numbers on a mismatch.

    >>> import numpy as np, fgrad.numpy as fnp
    >>> check_grads(fnp.sin, (np.array([0.5, 1.0]),), order=2)
    """
    args = tuple(args)
    rng = np.random.default_rng(seed)
    leaves, tree = tree_flatten(args)
    atol, rtol, eps = _tolerances(leaves, atol, rtol, eps)

    def f_flat(*xs):
        return f(*tree_unflatten(tree, list(xs)))

    out = f_flat(*leaves)
    out_leaves, out_tree = tree_flatten(out)
    v = random_like(leaves, rng)
    u = random_like(out_leaves, rng)
    for direction in _directions(v):
        _check_first_order(f, f_flat, leaves, direction, u, out_tree, modes, atol,
                           rtol, eps)
    if order > 1:
        if "fwd" in modes:
            def f_jvp(*xs):
                return jvp(f_flat, xs, tuple(v))[1]
            f_jvp.__name__ = f"jvp({_name(f)})"
            check_grads(f_jvp, leaves, order - 1, modes, atol, rtol, eps, seed + 1)
        if "rev" in modes:
            def f_vjp(*xs):
                return vjp(f_flat, *xs)[1](tree_unflatten(out_tree, u))
            f_vjp.__name__ = f"vjp({_name(f)})"
            check_grads(f_vjp, leaves, order - 1, modes, atol, rtol, eps, seed + 2)


def _check_first_order(f, f_flat, leaves, v, u, out_tree, modes, atol, rtol, eps):
    def central(h):
        plus = tree_flatten(f_flat(*_axpy(h, v, leaves)))[0]
        minus = tree_flatten(f_flat(*_axpy(-h, v, leaves)))[0]
        return [(to_host(p) - to_host(m)) / (2 * h) for p, m in zip(plus, minus)]

    # Richardson extrapolation of two central differences cancels their O(eps^2)
    # error term, so functions with large third derivatives (a few steps of a
    # recurrence) are checked against an accurate number, not a biased one.
    coarse, fine = central(eps), central(eps / 2)
    fd = [(4 * f - c) / 3 for f, c in zip(fine, coarse)]
    if "fwd" in modes:
        _, t_out = jvp(f_flat, tuple(leaves), tuple(v))
        t_leaves = tree_flatten(t_out)[0]
        for j, (t, d) in enumerate(zip(t_leaves, fd)):
            _close(to_host(t), d, atol, rtol,
                   f"JVP of {_name(f)} (output leaf {j}) vs finite differences")
    if "rev" in modes:
        _, vjp_fn = vjp(f_flat, *leaves)
        cts = vjp_fn(tree_unflatten(out_tree, u))
        _close(_inner(cts, v), _inner(u, fd), atol, rtol,
               f"<vjp(u), v> of {_name(f)} vs <u, finite-difference J v>")
        if "fwd" in modes:
            _close(_inner(cts, v), _inner(u, t_leaves), atol, rtol,
                   f"<vjp(u), v> vs <u, jvp(v)> of {_name(f)}")


def _name(f):
    return getattr(f, "__name__", repr(f))
