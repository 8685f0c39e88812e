"""The NumPy backend's random draws as compiled loops.

`fgrad.primitives.random` defines every draw with array code, which runs on
any backend; on NumPy that code makes some seventy passes over the data (the
cipher's rounds), several times slower than NumPy's own generator. The loops
of `fgrad.compiler.random_ir` compute the same words and turn them into bits,
uniforms, normals or new keys in one pass, bit for bit as the array code;
tests check it.

Each (mode, dtype) loop is compiled by `fgrad.compiler.native` (llvmlite) on
first use and kept in its disk cache, so a second process loads it in about a
millisecond. Importing this module installs them in `fgrad.primitives.random`
(`register_cpu_kernels`); where llvmlite cannot compile them here, nothing
runs and the array code draws.
"""
import functools

import numpy as np

from fgrad.compiler import native
from fgrad.compiler.random_ir import define_draw
from fgrad.primitives import random as _random

# the dtype each kernel's output words are written as, per mode and width
_DTYPES = {(_random.UNIFORM, 32): np.float32, (_random.UNIFORM, 64): np.float64,
           (_random.NORMAL, 64): np.float64}


def draw_ir(mode, dtype, object_offset, name="random_draw"):
    """IR text of ``void name(i64 count, i64 n, keys, data, out)``: the loop
    of `fgrad.compiler.random_ir.define_draw`, its arrays NumPy array objects
    whose data pointer is read at byte ``object_offset`` (`fgrad.compiler.native`).
    """
    from llvmlite import ir
    i8p, i32p, i64 = ir.IntType(8).as_pointer(), ir.IntType(32).as_pointer(), ir.IntType(64)
    module = ir.Module(name=name)
    body = define_draw(ir, module, mode, dtype, name + "_loop")
    body.linkage = "internal"
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, i64] + [i8p] * 3), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    offset = ir.Constant(i64, object_offset)
    data = [b.load(b.bitcast(b.gep(obj, [offset]), i8p.as_pointer())) for obj in fn.args[2:]]
    b.call(body, list(fn.args[:2]) + [b.bitcast(data[0], i32p), b.bitcast(data[1], i32p),
                                       data[2]])
    b.ret_void()
    return str(module)


@functools.cache
def _kernel(mode, width):
    """The compiled loop drawing ``mode`` into words of ``width`` bits."""
    dtype = np.dtype(_DTYPES.get((mode, width), f"u{width // 8}"))
    return native.compile_ir(draw_ir(mode, dtype, native.array_data_offset()),
                             "random_draw", ["i64", "i64", "array", "array", "array"])


def _runner(width):
    def run(keys, data, out, mode):
        n = out.shape[1] // 2 if mode == _random.SPLIT else out.shape[1]
        _kernel(mode, width)(keys.shape[0], n, keys, data, out)
        return True
    run.__name__ = f"words{width}"
    return run


words32 = _runner(32)
words64 = _runner(64)
if native.available():
    _random.register_cpu_kernels(words32, words64)
