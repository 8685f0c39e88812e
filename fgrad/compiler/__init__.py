"""Layer 4, the compiler: staged graphs in, fast callables out.

- `passes`: graph-to-graph rewrites (call inlining, constant folding, symbolic
  zeros and ones, common subexpressions, dead code).
- `codegen`: Python source for a graph, with buffer reuse; `compile_graph`.
- `fusion`: elementwise groups and the backend kernels they become.
- `cpu_fusion`: the same groups on NumPy as LLVM kernels (under jit).
- `kernel_ir`: those kernels' loops, written as LLVM IR.
- `complex_ir`: complex values in that IR, each operation NumPy's algorithm.
- `native`: LLVM IR compiled to machine code (through llvmlite) and called.
- `kernel_cache`: the private disk cache of compiled machine code.
- `random_ir`: the random draws' loops (Threefry-2x32 words made into bits,
  uniforms, normals and keys), written as LLVM IR, for `random_kernels` and
  `program`.
- `random_kernels`: the random draws of `fgrad.primitives.random` on NumPy,
  one pass each.
- `lu_kernels`: LU factors kept for `fgrad.primitives.linalg`'s solves on
  NumPy, so a gradient factors each matrix once.
- `lu_ir`: the LLVM IR that factors several small matrices at once, one per
  SIMD lane, calls ``getrf`` on each of a stack, and solves with the
  factors, for `lu_kernels`.
- `conv_kernels`: `fgrad.primitives.nn`'s im2col and col2im as compiled
  loops on NumPy.
- `pool_kernels`: `fgrad.primitives.nn`'s max pooling and its gradient as
  compiled loops on NumPy.
- `buffer_plan`: every intermediate of a program at an offset in one arena,
  dead buffers reused.
- `blas`: the addresses of SciPy's BLAS and LAPACK routines that compiled
  code calls.
- `program`: a whole graph as one LLVM function (straight-line code lowered,
  everything else called back into NumPy); jit's ``program`` tier.
- `native_steps`: the steps of a program that the modules below lower.
- `program_linalg`: a program's einsums as products, and its factorizations
  and solves as LAPACK calls.
- `program_indexing`: a program's gathers and scatters of one index array
  as loops.
- `parallel`: independent large equations run on worker threads.
- `tiers`: a jitted graph runs NumPy calls at once while its kernels and
  program compile on a background thread.

The compiler knows graphs and primitives' ``impl`` columns, never tracing.
"""
# the NumPy backend's random, LU, convolution and pooling kernels install themselves
# in the primitives below
from fgrad.compiler import (  # noqa: E402,F401
    conv_kernels, lu_kernels, pool_kernels, random_kernels,
)
