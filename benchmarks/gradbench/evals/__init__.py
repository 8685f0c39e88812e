"""One module per GradBench eval, each exporting that eval's functions.

Every module is what a user of fgrad would write: the eval's primal function in
``fgrad.numpy``, and its derivative by ``grad``, ``jacfwd``, ``jvp``, ``vmap``
and ``jit``; no derivative is written by hand.  Each function is decorated with
`benchmarks.gradbench.tool.timed`, which turns it into a callable of the
message's JSON input.
"""
