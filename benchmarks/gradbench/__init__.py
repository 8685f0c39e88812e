"""fgrad as a GradBench tool, and a runner that scores it against GradBench's own tools.

GradBench (https://github.com/gradbench/gradbench) pairs *evals* (programs that
send inputs and check answers) with *tools* (programs that compute them) over a
JSON-lines protocol on stdin/stdout.  This package holds:

- ``tool``: the fgrad tool, ``python -m benchmarks.gradbench.tool``, one module
  per eval in ``evals/``, each written with fgrad's transformations only;
- ``python -m benchmarks.gradbench --gradbench PATH``: drives GradBench's own
  eval drivers (from a checkout the user has) against fgrad, GradBench's JAX and
  PyTorch tools and its C++ ``manual`` tool, and prints one table per eval.

See README.md beside this file.
"""
