"""LLVM IR compiled to machine code and called: every compiled function of fgrad.

`fgrad.compiler.kernel_ir` writes each fused kernel's loop as LLVM IR, and
`fgrad.compiler.program` a whole graph's; the random, LU, convolution and
pooling kernels are IR too. This module gives the IR to LLVM through
llvmlite (which imports in about 0.05 s; numba, built on it and which
compiled fgrad's kernels before, took 0.35-0.8 s to start a process, then
about a second of CPU to type and lower `jit-elem`'s two kernels where LLVM
needs 0.1 s):

- `compile_ir` optimises the IR at -O3 for the host CPU (loop strength
  reduction off: `_llvm`), in an LLVM context of its own (another thread may be compiling), and emits machine code; the
  disk cache keeps that code (`fgrad.compiler.kernel_cache`), keyed by the
  IR, the CPU and its features, LLVM's and llvmlite's versions (and what else
  the caller names: `compile_ir`), so a second process loads a kernel in
  about a millisecond;
- each kernel lives in an execution engine of its own, freed with it, and is
  called through ctypes, which releases the GIL for the call;
- arrays are passed as objects, not as data pointers: reading
  ``a.ctypes.data`` from Python costs about 3 us an array, more than a small
  kernel's whole call, so the kernel reads each array's data pointer from
  NumPy's array structure itself, at the offset `array_data_offset` finds
  once per process by comparing with NumPy's own figure (where it finds none,
  `available` is False and jit runs without kernels).
"""
import ctypes
import functools
import hashlib
import importlib.util
import logging
import sys
import time

import numpy as np

from fgrad.compiler.kernel_cache import read_object, write_object

# the machine code's format: 3 since loop strength reduction is off
_FORMAT = 3
# ctypes types of the parameter kinds `compile_ir` takes
_ARGTYPES = {"i64": ctypes.c_int64, "array": ctypes.py_object}
_log = logging.getLogger("fgrad.jit")
# each loaded function's LLVM context, kept reachable until its engine is
# closed (`NativeFunction.__del__`): a function in a reference cycle is freed
# by the cycle collector, which finalises the objects of the cycle in any
# order, and a context disposed before its engine crashes the process
_CONTEXTS = {}


def available():
    """Whether kernels can be compiled here: llvmlite installed, and NumPy's
    array structure read as `array_data_offset` expects.

    >>> available() == (importlib.util.find_spec("llvmlite") is not None
    ...                 and array_data_offset() is not None)
    True
    """
    return _llvmlite_installed() and array_data_offset() is not None


def unavailable_reason():
    """Why `available` is False, in words (what to do), or None where it is
    True.

    >>> (unavailable_reason() is None) == available()
    True
    """
    if not _llvmlite_installed():
        return "llvmlite is not installed (pip install llvmlite)"
    if array_data_offset() is None:
        return "this NumPy's array objects are not laid out as fgrad reads them"
    return None


@functools.lru_cache(maxsize=1)
def say_unavailable():
    """Log, once a process, why nothing is compiled here (`unavailable_reason`):
    jit asks at every graph it would compile (`fgrad.compiler.cpu_fusion`'s
    kernels, `fgrad.compiler.program`'s programs), and runs NumPy calls."""
    _log.info("fgrad.jit: no kernels or programs are compiled: %s; jitted functions "
              "run NumPy calls", unavailable_reason())


@functools.lru_cache(maxsize=1)
def _llvmlite_installed():
    return importlib.util.find_spec("llvmlite") is not None


@functools.lru_cache(maxsize=1)
def array_data_offset():
    """The byte offset of the data pointer in a NumPy array object (16 on
    CPython: right after the object header), or None if it cannot be found.
    Found by reading candidate offsets of a few arrays, views among them, and
    comparing with the address NumPy reports for each.

    >>> array_data_offset() in (None, 16, 24, 32, 40, 48)
    True
    """
    base = np.arange(12.0).reshape(3, 4)
    probes = [np.empty(3), base[1], base[:, ::-1], np.zeros(0, np.int8)]
    expected = [p.__array_interface__["data"][0] for p in probes]
    for offset in range(8, 64, 8):
        if all(ctypes.c_void_p.from_address(id(p) + offset).value == want
               for p, want in zip(probes, expected)):
            return offset
    return None


def start():
    """Load LLVM (llvmlite) and look up the host CPU: the start-up a process
    pays before its first kernel; the seconds it took, 0.0 when done before.

    >>> not available() or start() >= 0.0
    True
    """
    first = _llvm.cache_info().currsize == 0
    seconds = _llvm()[2]
    return seconds if first else 0.0


@functools.lru_cache(maxsize=1)
def _llvm():
    """``(llvmlite.binding, the host's (triple, CPU, features), seconds)``."""
    start_time = time.perf_counter()
    import llvmlite
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # no loop strength reduction (a pass of LLVM's code generator): on
    # fgrad's loops it took up to 70% of the code generator's time (hmc's
    # normal draws: 0.27 s of 0.37 s; ode-lv-jit's program 0.27 s of 0.63 s)
    # and the code ran as fast or faster without it (rwm-vmap8 2.3 -> 1.8
    # ms of CPU a call, the other loop rows alike within 5%). The option is
    # LLVM's, for the process: other llvmlite users in it (numba) get it too
    llvm.set_option("fgrad", "-disable-lsr")
    host = (llvm.get_process_triple(), llvm.get_host_cpu_name(),
            llvm.get_host_cpu_features().flatten(),
            f"llvm {llvm.llvm_version_info} llvmlite {llvmlite.__version__}")
    return llvm, host, time.perf_counter() - start_time


def _target_machine(llvm, host):
    # one per use: an execution engine takes its target machine over
    triple, cpu, features, _ = host
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, jit=True)


class NativeFunction:
    """A function `compile_ir` compiled and loaded. ``c_function`` is the
    ctypes function to call (it releases the GIL); the object keeps the
    machine code alive, and frees it when it goes. ``loaded`` says whether
    the code came from the disk cache, ``seconds`` what compiling or loading
    it took; ``key`` names its machine code in the disk cache, the SHA-256 of
    its IR and of ``keyed_on``, the lines naming everything else the code
    depends on (the CPU and its features, LLVM's and llvmlite's versions,
    NumPy's array layout, the options, and the caller's ``depends``)."""

    __slots__ = ("name", "key", "keyed_on", "c_function", "loaded", "seconds", "_engine")

    def __init__(self, name, key, c_function, engine, loaded, seconds, keyed_on=()):
        self.name, self.key, self.c_function, self._engine = name, key, c_function, engine
        self.loaded, self.seconds, self.keyed_on = loaded, seconds, keyed_on

    def __del__(self):
        if sys.is_finalizing():     # LLVM's bindings may be gone: leave it to the exit
            return
        # the machine code first, then the context it was made in
        self._engine.close()
        _CONTEXTS.pop(id(self._engine), None)

    def __call__(self, *args):
        return self.c_function(*args)

    def __repr__(self):
        return f"<native {self.name}>"


def compile_ir(text, name, params, key=None, unroll=True, slp=True, depends=()):
    """Function ``name`` of the LLVM IR ``text``, compiled for this CPU (or
    loaded from the disk cache), as a `NativeFunction`. ``params`` names its
    parameters' kinds in order: ``"i64"`` (a Python int) or ``"array"`` (a
    NumPy array, received as a pointer to the array object: see
    `array_data_offset`); it returns nothing.

    ``text`` may be a function that writes the IR, and ``key`` a string
    that determines what it writes: the disk cache is then looked up by the
    key, and the IR written only when the machine code is not there.
    ``unroll=False`` turns LLVM's loop unrolling off (a whole program's many
    loops of constant trip counts, unrolled, took most of its compile time);
    ``slp=False`` turns LLVM's straight-line (SLP) vectoriser off (on a whole
    program it found almost nothing to do, and took a sixth of LLVM's time).
    ``depends`` are lines naming what else the machine code depends on (the
    BLAS its calls reach, `fgrad.compiler.blas.provider`): the disk cache
    key includes them.

    >>> ir = 'define void @twice(i64 %n) {\\n  ret void\\n}\\n'
    >>> not available() or compile_ir(ir, "twice", ["i64"])(3) is None
    True
    """
    llvm, host, _ = _llvm()
    start_time = time.perf_counter()
    if key is None:
        key = text
    keyed_on = (f"format {_FORMAT}", *host, f"array data at {array_data_offset()}",
                *([] if unroll else ["no unrolling"]),
                *([] if slp else ["no straight-line vectorising"]), *depends)
    key = "native-" + hashlib.sha256("\n".join(keyed_on + (key,)).encode()).hexdigest()[:40]
    code = read_object(key)
    loaded = code is not None
    if not loaded:
        code = _machine_code(llvm, host, text() if callable(text) else text, unroll, slp)
        write_object(key, code)
    # an empty module in a context of its own starts the engine (which keeps
    # both); the machine code goes in as an object file
    context = llvm.create_context()
    engine = llvm.create_mcjit_compiler(
        llvm.parse_assembly("", context=context), _target_machine(llvm, host))
    _CONTEXTS[id(engine)] = context
    engine.add_object_file(llvm.ObjectFileRef.from_data(code))
    engine.finalize_object()
    address = engine.get_function_address(name)
    if not address:
        engine.close()
        _CONTEXTS.pop(id(engine))
        raise RuntimeError(f"LLVM compiled no function {name!r}")
    _log.debug("fgrad.jit: kernel %s %s", key,
               "loaded from the disk cache" if loaded else "compiled")
    c_type = ctypes.CFUNCTYPE(None, *[_ARGTYPES[p] for p in params])
    return NativeFunction(name, key, c_type(address), engine, loaded,
                          time.perf_counter() - start_time, keyed_on)


def _machine_code(llvm, host, text, unroll=True, slp=True):
    """The object code of IR ``text``, optimised as clang's -O3 would (loop
    vectorisation on; loop unrolling and straight-line vectorisation as
    ``unroll`` and ``slp`` say) for the host CPU."""
    module = llvm.parse_assembly(text, context=llvm.create_context())
    try:
        module.verify()
        machine = _target_machine(llvm, host)
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.slp_vectorization = slp
        tuning.loop_unrolling = unroll
        passes = llvm.create_pass_builder(machine, tuning)
        passes.getModulePassManager().run(module, passes)
        return machine.emit_object(module)
    finally:
        module.close()
