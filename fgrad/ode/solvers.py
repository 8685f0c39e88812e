"""Explicit Runge-Kutta solvers: a Butcher tableau, one step, and the dense
output between a step's two ends.

A solver is a small object with ``step`` (one step of size ``dt`` from ``(t,
y)`` with ``f = fun(t, y, args)`` known: the new state, the derivative there,
an error estimate and the stages) and ``interpolate`` (the solution at a
fraction ``theta`` of the step, from what ``step`` returned). The adaptive
loop, the step-size controller and the adjoint are elsewhere
(`fgrad.ode.integrate`), so every solver works with every one of them.

>>> import numpy as np, fgrad.ode
>>> y1, f1, err, ks = fgrad.ode.RK4().step(lambda t, y, a: -y, 0.0, np.ones(1),
...                                          -np.ones(1), 0.1, None)
>>> float(np.round(y1[0], 7))     # exp(-0.1), to the method's local error
0.9048375

The states are pytrees: every leaf is combined with the same coefficients.
"""
import numpy as np

from fgrad.tree import tree_map

__all__ = ["AbstractRungeKutta", "Euler", "Heun", "Midpoint", "RK4", "Dopri5", "Tsit5",
           "Dopri8"]


def weighted_sum(coeffs, k_leaves):
    """``sum(c * k)``, zero coefficients skipped (None if all are zero)."""
    acc = None
    for c, k in zip(coeffs, k_leaves):
        if c != 0.0:
            term = k if c == 1.0 else float(c) * k
            acc = term if acc is None else acc + term
    return acc


def combine(y, dt, coeffs, ks):
    """``y + dt * sum(c * k)`` over the stages ``ks`` (pytrees like ``y``)."""
    def leaf(y_leaf, *k_leaves):
        acc = weighted_sum(coeffs, k_leaves)
        return y_leaf if acc is None else y_leaf + dt * acc
    return tree_map(leaf, y, *ks[:len(coeffs)])


class AbstractRungeKutta:
    """An explicit Runge-Kutta method given by its Butcher tableau.

    Subclasses set ``a`` (the strictly lower-triangular stage matrix, as rows),
    ``b`` (the solution's weights), ``c`` (the stage times), ``b_error`` (the
    weights of the error estimate, ``b`` minus the embedded method's, or None
    for a method without one: a fixed step only), ``order``. A method whose
    last stage is its solution (``a[-1] == b``, ``c[-1] == 1``) gets the
    derivative at the step's end for free (FSAL); the others evaluate it, as
    the next step and the dense output need it.
    """
    a = ()
    b = ()
    c = ()
    b_error = None
    order = 1

    @property
    def adaptive(self):
        return self.b_error is not None

    @property
    def fsal(self):
        return len(self.a) > 0 and self.c[-1] == 1.0 and \
            np.array_equal(np.append(self.a[-1], 0.0), self.b)

    def step(self, fun, t, y, f, dt, args):
        """One step: ``(y1, f1, error or None, stages)``."""
        ks = [f]
        for row, c in zip(self.a, self.c[1:]):
            ks.append(fun(t + c * dt, combine(y, dt, row, ks), args))
        if self.fsal:
            y1, f1 = combine(y, dt, self.a[-1], ks[:-1]), ks[-1]
        else:
            y1 = combine(y, dt, self.b, ks)
            f1 = fun(t + dt, y1, args)
        err = None if self.b_error is None else \
            tree_map(lambda *k: dt * weighted_sum(self.b_error, k), *ks)
        return y1, f1, err, ks

    # the dense output's weights b_i(theta) as polynomials (a row of
    # coefficients per stage, highest power first), for a method that has one
    dense = None

    def interpolate(self, theta, dt, y0, y1, f0, f1, ks):
        """The solution at ``t + theta * dt``, ``0 <= theta <= 1``: the
        method's own interpolant ``y0 + dt * sum_i b_i(theta) k_i`` if it has
        one (``dense``), else cubic Hermite through the ends and their
        derivatives (fourth-order accurate)."""
        if self.dense is not None:
            # Horner's rule per stage; the stages with no weight are skipped
            used = [i for i, poly in enumerate(self.dense) if np.any(poly)]
            weights = []
            for i in used:
                w = float(self.dense[i][0])
                for c in self.dense[i][1:]:
                    w = w * theta + float(c)
                weights.append(w)

            def leaf(y, *k):
                acc = weights[0] * k[used[0]]
                for w, i in zip(weights[1:], used[1:]):
                    acc = acc + w * k[i]
                return y + dt * acc
            return tree_map(leaf, y0, *ks)
        h00 = (1.0 + 2.0 * theta) * (1.0 - theta) ** 2
        h10 = theta * (1.0 - theta) ** 2
        h01 = theta ** 2 * (3.0 - 2.0 * theta)
        h11 = theta ** 2 * (theta - 1.0)
        return tree_map(lambda a, b, fa, fb: h00 * a + h01 * b + dt * (h10 * fa + h11 * fb),
                        y0, y1, f0, f1)

    def __repr__(self):
        return f"{type(self).__name__}()"

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


def tableau_rows(*rows):
    """A Butcher tableau's rows as float arrays."""
    return tuple(np.array(r, dtype=float) for r in rows)


class Euler(AbstractRungeKutta):
    """Forward Euler: first order, one evaluation a step, fixed steps only.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Euler(), 0.0, 1.0, 0.5,
    ...                       np.ones(1))
    >>> sol.ys
    array([[0.25]])
    """
    a, b, c, order = (), np.array([1.0]), np.array([0.0]), 1


class Heun(AbstractRungeKutta):
    """Heun's method (explicit trapezoid), second order, with Euler embedded
    for an error estimate: adaptive.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Heun(), 0.0, 1.0, 0.5,
    ...                       np.ones(1))
    >>> sol.ys
    array([[0.390625]])
    """
    a, b, c, order = tableau_rows([1.0]), np.array([0.5, 0.5]), np.array([0.0, 1.0]), 2
    b_error = np.array([-0.5, 0.5])


class Midpoint(AbstractRungeKutta):
    """The explicit midpoint method, second order, with Euler embedded.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Midpoint(), 0.0, 1.0, 0.5,
    ...                       np.ones(1))
    >>> sol.ys
    array([[0.390625]])
    """
    a, b, c, order = tableau_rows([0.5]), np.array([0.0, 1.0]), np.array([0.0, 0.5]), 2
    b_error = np.array([-1.0, 1.0])


class RK4(AbstractRungeKutta):
    """The classical fourth-order Runge-Kutta method, fixed steps only.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.RK4(), 0.0, 1.0, 0.1,
    ...                       np.ones(1))
    >>> float(abs(sol.ys[0, 0] - np.exp(-1.0))) < 1e-6
    True
    """
    a = tableau_rows([0.5], [0.0, 0.5], [0.0, 0.0, 1.0])
    b, c, order = np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]), np.array([0.0, 0.5, 0.5, 1.0]), 4


class Dopri5(AbstractRungeKutta):
    """Dormand-Prince 5(4): fifth order, an embedded fourth-order estimate,
    seven stages of which the last is the next step's first (FSAL), and its
    own fourth-order dense output (Shampine's). The method of
    `jax.experimental.ode.odeint` and SciPy's ``RK45``.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Dopri5(), 0.0, 1.0, None,
    ...                       np.ones(1), stepsize_controller=fgrad.ode.PIDController(
    ...                           rtol=1e-10, atol=1e-10))
    >>> float(abs(sol.ys[0, 0] - np.exp(-1.0))) < 1e-9
    True
    """
    a = tableau_rows([1 / 5], [3 / 40, 9 / 40], [44 / 45, -56 / 15, 32 / 9],
              [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
              [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
              [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84])
    b = np.array([35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0])
    c = np.array([0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0])
    # the embedded weights of JAX's odeint and diffrax (not the 5179/57600 set of
    # Dormand and Prince's paper), so that the steps are theirs
    b_error = b - np.array([1951 / 21600, 0, 22642 / 50085, 451 / 720, -12231 / 42400,
                            649 / 6300, 1 / 60])
    order = 5
    # the solution at the step's middle, from the stages (Shampine, 1986)
    mid = np.array([6025192743 / 30085553152, 0, 51252292925 / 65400821598,
                    -2691868925 / 45128329728, 187940372067 / 1594534317056,
                    -1776094331 / 19743644256, 11237099 / 235043384]) / 2

    def interpolate(self, theta, dt, y0, y1, f0, f1, ks):
        """The quartic through both ends, their derivatives and the midpoint."""
        y_mid = combine(y0, dt, self.mid, ks)

        def leaf(y0, y1, ym, f0, f1):
            a = 2.0 * dt * (f1 - f0) - 8.0 * (y0 + y1) + 16.0 * ym
            b = dt * (5.0 * f0 - 3.0 * f1) + 18.0 * y0 + 14.0 * y1 - 32.0 * ym
            c = dt * (f1 - 4.0 * f0) - 11.0 * y0 - 5.0 * y1 + 16.0 * ym
            return (((a * theta + b) * theta + c) * theta + dt * f0) * theta + y0
        return tree_map(leaf, y0, y1, y_mid, f0, f1)


def _polynomials(factored):
    """Coefficients (highest power first) of each ``b_i(theta)`` given as
    ``(scale, [roots], [quadratic factors (p, q) of theta^2 + p theta + q])``."""
    out = []
    for scale, roots, quadratics in factored:
        poly = np.poly1d([scale])
        for r in roots:
            poly = poly * np.poly1d([1.0, -r])
        for p, q in quadratics:
            poly = poly * np.poly1d([1.0, p, q])
        out.append(np.pad(poly.coeffs, (4 - poly.order, 0)))
    return np.array(out)          # every weight is a quartic


class Tsit5(AbstractRungeKutta):
    """Tsitouras' 5(4) pair (2011): fifth order, seven stages with FSAL, an
    embedded fourth-order estimate, and its own fourth-order dense output.
    diffrax's recommended default for non-stiff problems.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Tsit5(), 0.0, 1.0, None,
    ...                       np.ones(1), stepsize_controller=fgrad.ode.PIDController(
    ...                           rtol=1e-10, atol=1e-10))
    >>> float(abs(sol.ys[0, 0] - np.exp(-1.0))) < 1e-9
    True
    """
    # Tsitouras (2011), Table 1 (to double precision)
    a = tableau_rows(
        [0.161],
        [-0.008480655492356989, 0.335480655492357],
        [2.897153057105493, -6.359448489975075, 4.3622954328695815],
        [5.325864828439257, -11.748883564062828, 7.4955393428898365, -0.09249506636175525],
        [5.86145544294642, -12.92096931784711, 8.159367898576159, -0.071584973281401,
         -0.028269050394068383],
        [0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742,
         -3.290069515436081, 2.324710524099774])
    b = np.append(a[-1], 0.0)
    c = np.array([0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0])
    b_error = b - np.array([0.09468075576583945, 0.009183565540343254, 0.4877705284247616,
                            1.234297566930479, -2.7077123499835256, 1.866628418170587,
                            1 / 66])
    order = 5
    # the dense-output weights b_i(theta), factored as the paper gives them
    dense = _polynomials([
        (-1.0530884977290216, [0.0, 1.3299890189751412], [(-1.4364028541716351,
                                                             0.7139816917074209)]),
        (0.1017, [0.0, 0.0], [(-2.1966568338249754, 1.2949852507374631)]),
        (2.490627285651252793, [0.0, 0.0], [(-2.38535645472061657, 1.57803468208092486)]),
        (-16.54810288924490272, [0.0, 0.0, 1.21712927295533244, 0.61620406037800089], []),
        (47.37952196281928122, [0.0, 0.0, 1.203071208372362603, 0.658047292653547382], []),
        (-34.87065786149660974, [0.0, 0.0, 1.2, 2.0 / 3.0], []),
        (2.5, [0.0, 0.0, 1.0, 0.6], []),
    ])


class Dopri8(AbstractRungeKutta):
    """Prince and Dormand's 8(7) pair (1981, RK8(7)13M): eighth order, an
    embedded seventh-order estimate, thirteen stages and one more for the
    derivative at the end (FSAL). For smooth problems at tight tolerances,
    where it takes the fewest steps. Its dense output is a seventh-degree
    polynomial in the step's fourteen stages (diffrax's), at no extra
    evaluations.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Dopri8(), 0.0, 1.0, None,
    ...                       np.ones(1), stepsize_controller=fgrad.ode.PIDController(
    ...                           rtol=1e-12, atol=1e-12))
    >>> float(abs(sol.ys[0, 0] - np.exp(-1.0))) < 1e-11
    True
    """
    a = tableau_rows(
        [1 / 18],
        [1 / 48, 1 / 16],
        [1 / 32, 0, 3 / 32],
        [5 / 16, 0, -75 / 64, 75 / 64],
        [3 / 80, 0, 0, 3 / 16, 3 / 20],
        [29443841 / 614563906, 0, 0, 77736538 / 692538347, -28693883 / 1125000000,
         23124283 / 1800000000],
        [16016141 / 946692911, 0, 0, 61564180 / 158732637, 22789713 / 633445777,
         545815736 / 2771057229, -180193667 / 1043307555],
        [39632708 / 573591083, 0, 0, -433636366 / 683701615, -421739975 / 2616292301,
         100302831 / 723423059, 790204164 / 839813087, 800635310 / 3783071287],
        [246121993 / 1340847787, 0, 0, -37695042795 / 15268766246, -309121744 / 1061227803,
         -12992083 / 490766935, 6005943493 / 2108947869, 393006217 / 1396673457,
         123872331 / 1001029789],
        [-1028468189 / 846180014, 0, 0, 8478235783 / 508512852, 1311729495 / 1432422823,
         -10304129995 / 1701304382, -48777925059 / 3047939560, 15336726248 / 1032824649,
         -45442868181 / 3398467696, 3065993473 / 597172653],
        [185892177 / 718116043, 0, 0, -3185094517 / 667107341, -477755414 / 1098053517,
         -703635378 / 230739211, 5731566787 / 1027545527, 5232866602 / 850066563,
         -4093664535 / 808688257, 3962137247 / 1805957418, 65686358 / 487910083],
        [403863854 / 491063109, 0, 0, -5068492393 / 434740067, -411421997 / 543043805,
         652783627 / 914296604, 11173962825 / 925320556, -13158990841 / 6184727034,
         3936647629 / 1978049680, -160528059 / 685178525, 248638103 / 1413531060, 0],
        # the solution's weights: the fourteenth stage is the derivative at the end
        [14005451 / 335480064, 0, 0, 0, 0, -59238493 / 1068277825, 181606767 / 758867731,
         561292985 / 797845732, -1041891430 / 1371343529, 760417239 / 1151165299,
         118820643 / 751138087, -528747749 / 2220607170, 1 / 4])
    b = np.append(a[-1], 0.0)
    c = np.array([0, 1 / 18, 1 / 12, 1 / 8, 5 / 16, 3 / 8, 59 / 400, 93 / 200,
                  5490023248 / 9719169821, 13 / 20, 1201146811 / 1299019798, 1, 1, 1])
    b_error = b - np.array([13451932 / 455176623, 0, 0, 0, 0, -808719846 / 976000145,
                            1757004468 / 5645159321, 656045339 / 265891186,
                            -3867574721 / 1518517206, 465885868 / 322736535,
                            53011238 / 667516719, 2 / 45, 0, 0])
    order = 8
    # the dense output's weights, b_i(theta) = theta * p_i(theta) with p_i of
    # degree 5 (the interpolant diffrax uses for its Dopri8); every row sums
    # to b_i at theta = 1, and p_0(0) = 1 so the slope at the start is f0
    dense = np.hstack([np.array([
        [-6.3448349392860401388, 22.1396504998094068976, -30.0610568289666450593,
         19.9990069333683970610, -6.6910181737837595697, 1.0],
        [0.0] * 6, [0.0] * 6, [0.0] * 6, [0.0] * 6,
        [-39.6107919852202505218, 116.4422149550342161651, -121.4999627731334642623,
         52.2273532792945524050, -7.6142658045872677172, 0.0],
        [20.3761213808791436958, -67.1451318825957197185, 83.1721004639847717481,
         -46.8919164181093621583, 10.7281392630428866124, 0.0],
        [7.3347098826795362023, -16.5672243527496524646, 9.5724507555993664382,
         -0.1890893225010595467, 0.5526637063753648783, 0.0],
        [32.8801774352459155182, -89.9916014847245016028, 87.8406057677205645007,
         -35.7075975946222072821, 4.2186562625665153803, 0.0],
        [-10.1588990526426760954, 22.6237489648532849093, -17.4152107770762969005,
         6.2736448083240352160, -0.6627209125361597559, 0.0],
        [-12.5401268098782561200, 32.2362340167355370113, -28.5903289514790976966,
         10.3160881272450748458, -1.2636789001135462218, 0.0],
        [29.5553001484516038033, -82.1020315488359848644, 81.6630950584341412934,
         -34.7650769866611817349, 5.4106037898590422230, 0.0],
        [-41.7923486424390588923, 116.2662185791119533462, -114.9375291377009418170,
         47.7457971078225540396, -7.0321379067945741781, 0.0],
        [20.3006925822100825485, -53.9020777466385396792, 50.2558364226176017553,
         -19.0082099341608028453, 2.3537586759714983486, 0.0]]), np.zeros((14, 1))])
