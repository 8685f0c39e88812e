"""Layer 1, the core: what every other layer is written against.

- `trace`: `Primitive` and its dispatch table, `bind`, `Trace`/`Tracer`, trace
  levels, abstract values (`ShapedArray`) and symbolic zeros.
- `graph`: the graph IR (variables, literals, equations, graphs), its printer
  and checker. Staging builds it, the compiler rewrites it, transforms replay it.
- `tree`: pytrees. `errors`: every exception fgrad raises. `backend`: the
  array module (NumPy, CuPy, registered others) of a set of arguments.

Nothing here imports from any other part of fgrad.
"""
