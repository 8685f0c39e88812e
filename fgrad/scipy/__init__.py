"""scipy functions over fgrad primitives (the optional extra ``fgrad[scipy]``).

``fgrad.scipy.special``, ``fgrad.scipy.stats``, ``fgrad.scipy.linalg``,
``fgrad.scipy.signal``, ``fgrad.scipy.integrate``, ``fgrad.scipy.optimize`` and
``fgrad.scipy.sparse`` (with ``sparse.linalg``: ``spsolve``, ``splu``, ``cg``,
``gmres``, ``eigsh``, ...) mirror their SciPy namesakes and differentiate in both
modes to any order (``integrate.odeint`` and ``integrate.solve_ivp``: reverse
mode, first order, by the adjoint method; ``optimize``: by the implicit function
theorem at the solution). Their implementations call SciPy, imported when a
function is first used, which runs on the CPU: CuPy arrays use ``cupyx.scipy``
where it has the function, and fail otherwise. What is not provided, and why,
is `fgrad.scipy.not_provided.NOT_PROVIDED`.
"""
from fgrad.scipy import integrate, linalg, optimize, signal, sparse, special, stats  # noqa: F401
