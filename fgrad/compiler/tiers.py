"""Tiered compilation: a graph runs at once; its compiled forms are built on a thread.

A graph `fgrad.jit` runs on NumPy arrays goes through up to three tiers, each
faster than the one before and dearer to build, all compiled by LLVM
(through llvmlite, `fgrad.compiler.native`):

- ``"numpy"``: the generated code, one NumPy call per equation
  (`fgrad.compiler.codegen`); built at the first call in milliseconds, with no
  compiler involved;
- ``"kernels"``: the same code with each fusable elementwise group one fused
  kernel (`fgrad.compiler.cpu_fusion`);
- ``"program"``: unless ``FGRAD_JIT_PROGRAM=0``, the whole graph as one
  function (`fgrad.compiler.program`), loops, products and callouts
  included, where `fgrad.compiler.program.pays` estimates it faster than the
  kernels' code (``FGRAD_JIT_PROGRAM=all``: wherever it compiles).

Compiles start at the second call (the first, which staged the graph,
returns before any starts). The program, where one may be built, comes
first: lowered, and estimated against the kernels planned (not built), it is
built in their place where it pays, and the kernels, which it would replace,
are not built at all, nor those of the loop bodies and branches that it runs
(their tiers wait for it: `holders_of`). The kernels are built, and are the
last tier, where it does not pay (the program is estimated again against
them, and built after them where it pays then) or its compile fails, and
where no program may be built.

With ``compile="background"`` (the default) the kernels and the program are
built on a compile thread while the calls go on in the best tier ready; a
finished tier replaces the running one in one attribute store, so a call runs
one tier or the next, whole, whichever thread makes it. ``"sync"`` builds
them on the calling thread at the first call, as jit did before it had tiers;
``"never"`` stays in the NumPy tier (no compiler is loaded). The environment
variable ``FGRAD_JIT_COMPILE`` sets the default.

The compile thread is a daemon: a process that exits while it compiles does
not wait for it (`atexit` also drops the compiles not started). Its compiles
run in the order asked for; `wait_all` waits for all of them.

While a job runs, the interpreter's switch interval is shortened
(`COMPILE_SWITCH_INTERVAL`), so that the compile thread and a caller running
Python take turns at the GIL at a fine grain; it is restored afterwards.

Each compile is logged (logger ``fgrad.jit``, level INFO) with its tier, its
time and its thread, and kept in `Tiers.seconds`.
"""
import atexit
import collections
import logging
import os
import sys
import threading
import time
import weakref

from fgrad.compiler.codegen import generate
from fgrad.compiler.cpu_fusion import fuse_for_cpu, plan_kernels
from fgrad.compiler.native import start as start_llvm
from fgrad.compiler.parallel import parallel_or_sequential
from fgrad.compiler.program import compile_program, pays, program_steps
from fgrad.compiler.program import enabled as program_enabled
from fgrad.compiler.program_loops import loop_graphs

COMPILE_ENV = "FGRAD_JIT_COMPILE"
# the key, in a loop body's or branch's ``graph.compiled``, of the tiers of
# the graphs holding it that may build it into their programs (`holders_of`)
_HOLDERS = "held by"
# the interpreter's switch interval while a compile job runs (seconds; the
# default is 0.005). The compile thread lets go of the GIL at every file it
# reads and every call into LLVM, and a caller running Python meanwhile then
# keeps it for a whole interval before the compile thread may go on: beside
# jit-chain's calls, LLVM's start-up (0.04 s alone) took 0.45 s. A shorter
# interval lets the two take turns at a finer grain; it is restored after.
COMPILE_SWITCH_INTERVAL = 2e-4
MODES = ("background", "sync", "never")
# tier names, from the first to the last
TIERS = ("numpy", "kernels", "program")
_log = logging.getLogger("fgrad.jit")


def default_mode():
    """``FGRAD_JIT_COMPILE`` (``background``, ``sync`` or ``never``), else
    ``background``.

    >>> default_mode() in MODES
    True
    """
    value = os.environ.get(COMPILE_ENV, "").strip().lower()
    return value if value in MODES else "background"


class CompileQueue:
    """Daemon threads (at most ``threads``) that run compile jobs in order."""

    def __init__(self, threads=1):
        self.threads = threads
        self._jobs = collections.deque()
        self._running = 0
        self._workers = 0
        self._closed = False
        # the switch intervals before and while jobs run (`COMPILE_SWITCH_INTERVAL`)
        self._interval = None
        self._lock = threading.Condition()

    def submit(self, job, cancel=None):
        """Run ``job()`` on a compile thread; False once the process is
        exiting. ``cancel()`` is called instead if the job is dropped."""
        with self._lock:
            if self._closed:
                return False
            self._jobs.append((job, cancel))
            if self._workers < self.threads and self._workers <= self._running:
                self._workers += 1
                threading.Thread(target=self._work, name="fgrad-compile",
                                 daemon=True).start()
            self._lock.notify()
        return True

    def _work(self):
        # (not given a lower priority: a thread the system runs less often
        # would keep the callers waiting for their tiers)
        while True:
            with self._lock:
                while not self._jobs and not self._closed:
                    self._lock.wait()
                if self._closed:
                    self._workers -= 1
                    return
                job, _ = self._jobs.popleft()
                self._running += 1
                if self._running == 1:          # the first job of a busy spell
                    before = sys.getswitchinterval()
                    sys.setswitchinterval(min(before, COMPILE_SWITCH_INTERVAL))
                    # as read back: the interpreter keeps whole microseconds
                    self._interval = (before, sys.getswitchinterval())
            try:
                job()
            finally:
                with self._lock:
                    self._running -= 1
                    if not self._running and sys.getswitchinterval() == self._interval[1]:
                        sys.setswitchinterval(self._interval[0])    # unless changed since
                    self._lock.notify_all()

    def wait(self, timeout=None):
        """Wait until no job is queued or running; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._jobs or self._running:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def close(self):
        """Drop the jobs not started (the process is exiting)."""
        with self._lock:
            self._closed = True
            dropped = list(self._jobs)
            self._jobs.clear()
            self._lock.notify_all()
        for _, cancel in dropped:
            if cancel is not None:
                cancel()


# the process's compile thread: the one piece of state tiers share
_QUEUE = CompileQueue()
atexit.register(_QUEUE.close)


def in_background(job):
    """Run ``job()`` on the compile thread, after the compiles asked for
    before it; False (and ``job`` not run) once the process is exiting. A
    failing job is logged and leaves the thread running.

    >>> in_background(lambda: None) and wait_all()
    True
    """
    def guarded():
        try:
            job()
        except Exception:
            _log.exception("fgrad: a background compile failed; the code it would "
                           "have replaced goes on running")
    return _QUEUE.submit(guarded)


def compile_as_configured(job):
    """Run the compile ``job()`` as ``FGRAD_JIT_COMPILE`` says (`default_mode`):
    on the compile thread (``background``), at once on the calling thread
    (``sync``), or not at all (``never``). For compiles outside a jitted
    function's tiers (an eager gradient's fused sweep, its forward kernels).

    >>> done = []
    >>> compile_as_configured(lambda: done.append(1)) and wait_all()
    True
    >>> done == ([] if default_mode() == "never" else [1])
    True
    """
    mode = default_mode()
    if mode == "sync":
        job()
        return True
    return mode == "background" and in_background(job)


def wait_all(timeout=None):
    """Wait until every compile asked for so far has finished (tests and
    benchmarks); False on timeout.

    >>> wait_all()
    True
    """
    return _QUEUE.wait(timeout)


def holders_of(graph):
    """The `Tiers` of the graphs that hold loop body or branch ``graph`` and
    may build it into their programs: its kernels wait for them
    (`Tiers.start`)."""
    return graph.compiled.get(_HOLDERS, ())


def _loop_graphs_in(graph):
    """The loop bodies, predicates and branches of ``graph``, at any depth."""
    found = []
    for eqn in graph.eqns:
        for inner in loop_graphs(eqn):
            found += [inner] + _loop_graphs_in(inner)
    return found


class Tiers:
    """One optimised graph's code in tiers; ``fn`` runs the best one built.

    ``tier`` names it; ``seconds`` maps each tier built to its compile time
    (LLVM's start-up, when this graph's compile paid it, under
    ``"llvm start-up"``), ``cpu_seconds`` to the compiling thread's CPU
    time; ``compiled`` is the per-equation code (the
    `fgrad.compiler.codegen.Compiled` of the kernels tier once built, else
    of the NumPy tier); ``program`` is the `fgrad.compiler.program.Program`
    once built. ``fuse`` (llvmlite installed, not turned off) allows the
    compiled tiers, ``whole`` the program tier (a loop body or branch,
    run by its control-flow primitive, gets none: the program of the graph
    that holds the loop lowers it); ``mode`` is one of `MODES`. With
    ``parallel`` each per-equation tier runs on the thread pool of
    `fgrad.compiler.parallel` (where it has an equation worth a thread), and
    the program as it is: the tiers and the calls at which they are built
    are those of the sequential code, so a call computes the bits that the
    sequential code's call computes.

    Where a program may be built, it is asked for first, and built in place
    of the kernels where it is estimated to pay against the kernels planned
    (`fgrad.compiler.program.pays`): the kernels, which it would replace,
    are built only where it does not pay or its compile fails. Until then the
    graph's loop bodies and branches (whose tiers name this one among
    ``held_by``, `holders_of`) build no kernels either: the program runs
    them.
    """

    def __init__(self, graph, xp, name, fuse, whole, mode, parallel=False, held_by=()):
        self.graph, self.xp, self.name, self.mode = graph, xp, name, mode
        self.parallel = parallel
        self.compiled = generate(graph, xp)
        self.seconds, self.cpu_seconds = {}, {}
        self.program, self.error = None, None
        self.tier = "numpy"
        self._fuse = fuse and mode != "never"
        # one native program: None (off), or which graphs get one ("paying",
        # the default, or "all")
        self._program = program_enabled() if whole and self._fuse else None
        self._queued = set()        # tiers asked for and not finished
        self._done = set()          # tiers built, or found not to pay
        self._lock = threading.Condition()
        self.fn = self._runner(self.compiled)
        # the tiers of the graphs that hold this loop body (`holders_of`); the
        # loop bodies' tiers that wait for this graph's program, and whether
        # it has let them go (the kernels are its last tier)
        self._held_by = held_by
        self._holding, self._let_go = weakref.WeakSet(), False
        # `plan_kernels`' plans, made once for the program's estimate and the
        # kernels both (`_kernel_plans`; jit-chain: 6 ms a plan, 14 ms the
        # kernels' compile), let go once the kernels are built
        self._plans = None
        if self._program:
            for inner in _loop_graphs_in(graph):
                inner.compiled.setdefault(_HOLDERS, weakref.WeakSet()).add(self)

    def __call__(self, *args):
        return self.fn(*args)

    @property
    def source(self):
        return self.compiled.source

    def _runner(self, code):
        """What a call runs of the per-equation ``code``."""
        return (parallel_or_sequential(code, self.xp) if self.parallel else code).fn

    # -- building ------------------------------------------------------------

    def start_at_next_call(self):
        """Ask for the tiers (`start`) when the next call begins: the first
        call (it has just staged the graph) then returns without a compile
        thread starting beside it, which cost it about 1 ms, and a first call
        is no slower than with ``compile="never"``."""
        current = self.fn

        def first_of_the_rest(*args):
            with self._lock:
                if self.fn is first_of_the_rest:    # not replaced by a tier meanwhile
                    self.fn = current
            self.start()
            return current(*args)
        self.fn = first_of_the_rest

    def start(self):
        """Ask for the program (which asks for the kernels where it is not
        built in their place), else for the kernels unless a graph holding
        this loop body may build it into its program (idempotent)."""
        if self._fuse:
            if self._program:
                self._ask("program")
            elif not self._held():
                self._ask("kernels")

    def _held(self):
        """Whether every graph holding this loop body (none: False) may still
        build it into its program; each that may keeps it, to start it if it
        lets it go."""
        holders = list(self._held_by)
        return bool(holders) and all(holder._hold(self) for holder in holders)

    def _hold(self, inner):
        with self._lock:
            if not self._let_go:
                self._holding.add(inner)
            return not self._let_go

    def _let_go_of_loops(self):
        """No program replaces the kernels: the loop bodies held build theirs."""
        with self._lock:
            self._let_go = True
            held = list(self._holding)
        for inner in held:
            inner.start()

    def _claim(self, tier):
        """Mark ``tier`` asked for; False if it was asked for or built already."""
        with self._lock:
            if tier in self._queued or tier in self._done:
                return False
            self._queued.add(tier)
            return True

    def _ask(self, tier):
        if not self._claim(tier):
            return
        if self.mode == "sync":
            self._build(tier)
            return
        # the queued job holds the tiers weakly: a jitted function dropped
        # before its turn (made and called once, in a loop) compiles nothing,
        # and the compiles of the functions still in use do not wait behind it
        tiers = weakref.ref(self)

        def build():
            alive = tiers()
            if alive is not None:
                alive._build(tier)

        def cancel():
            alive = tiers()
            if alive is not None:
                alive._promote(tier, None, None, None)
        if not _QUEUE.submit(build, cancel):
            self._promote(tier, None, None, None)     # exiting: not compiled

    def _build(self, tier):
        if tier == "kernels":
            self._build_kernels()
        else:
            self._build_program()

    def _build_kernels(self):
        thread = threading.current_thread().name
        code = fn = seconds = None
        try:
            plans, self._plans = self._kernel_plans(), ()
            if plans:               # else nothing to compile: LLVM not needed
                self._start_llvm(thread)
                start_time, cpu_start = time.perf_counter(), time.thread_time()
                code = generate(fuse_for_cpu(self.graph, plans), self.xp)
                fn, seconds = code.fn, time.perf_counter() - start_time
                self._compiled("kernels", seconds, time.thread_time() - cpu_start,
                               f"{len(plans)} kernel{'s' * (len(plans) != 1)}", thread)
        except Exception as error:  # noqa: BLE001 -- LLVM refused: keep the tier running
            code = fn = seconds = None
            self._failed("kernels", error)
            if self.mode == "sync":
                self._promote("kernels", None, None, None)
                raise
        self._promote("kernels", code, fn, seconds)

    def _build_program(self):
        """The program where it pays; asked for before the kernels, in their
        place: they are built (and the program estimated again against them)
        only where it is not estimated to pay against the kernels planned, or
        after its compile failed."""
        thread = threading.current_thread().name
        fn = seconds = steps = None
        try:
            try:
                # the lowering counts as compile time (LLVM's start-up apart)
                lowering, lowering_cpu = time.perf_counter(), time.thread_time()
                steps = program_steps(self.graph)
                lowering, lowering_cpu = (time.perf_counter() - lowering,
                                          time.thread_time() - lowering_cpu)
                fn, seconds = self._program_if_it_pays(steps, lowering, lowering_cpu, thread)
            except Exception as error:  # noqa: BLE001 -- LLVM refused: the kernels go on
                fn, steps = None, None
                self._failed("program", error)
            if fn is None:
                self._let_go_of_loops()
            if fn is None and self._claim("kernels"):
                self._build_kernels()
                if steps is not None:       # estimated again against the kernels built
                    try:
                        fn, seconds = self._program_if_it_pays(steps, lowering, lowering_cpu,
                                                               thread)
                    except Exception as error:  # noqa: BLE001
                        fn = None
                        self._failed("program", error)
            if fn is None and steps is not None:
                _log.info("fgrad.jit: %s: program tier not built: its callouts cost "
                          "more than the %d calls it would replace, or make large "
                          "arrays (fgrad.compiler.program.pays)", self.name,
                          len(self.compiled.graph.eqns))
        finally:
            self._promote("program", None, fn, seconds)

    def _program_if_it_pays(self, steps, lowering, lowering_cpu, thread):
        """``(fn, seconds)`` of the program of ``steps`` where it is estimated
        to pay against the kernels (those planned, before they are built),
        else ``(None, None)``."""
        if self._program != "all":
            if "kernels" in self._done:
                paying = pays(steps, self.compiled.graph)
            else:
                paying = pays(steps, self.graph, self._kernel_plans())
            if not paying:
                return None, None
        self._start_llvm(thread)
        start_time = time.perf_counter() - lowering
        cpu_start = time.thread_time() - lowering_cpu
        self.program = compile_program(self.graph, steps)
        seconds = time.perf_counter() - start_time
        callouts = len(self.program.callouts)
        self._compiled("program", seconds, time.thread_time() - cpu_start,
                       f"{len(self.graph.eqns)} equations, {callouts} callout"
                       + "s" * (callouts != 1), thread)
        return self.program.call, seconds

    def _kernel_plans(self):
        """`plan_kernels` of the graph, planned at the first asking."""
        if self._plans is None:
            self._plans = plan_kernels(self.graph)
        return self._plans

    def _compiled(self, tier, seconds, cpu_seconds, what, thread):
        # said before the tier runs, so that a caller waiting for it finds
        # the line logged
        _log.info("fgrad.jit: %s: %s tier compiled in %.2f s (%s, %s thread)",
                  self.name, tier, seconds, what, thread)
        self.cpu_seconds[tier] = cpu_seconds

    def _failed(self, tier, error):
        self.error = error
        _log.warning("fgrad.jit: %s: %s tier failed (%s: %s); running the %s tier",
                     self.name, tier, type(error).__name__,
                     str(error).splitlines()[0][:200] if str(error) else "", self.tier)

    def _start_llvm(self, thread):
        """Load LLVM (`fgrad.compiler.native.start`), counting its start-up,
        when this graph's compile pays it, against this graph."""
        cpu_start = time.thread_time()
        startup = start_llvm()
        if startup:
            self.seconds["llvm start-up"] = startup
            self.cpu_seconds["llvm start-up"] = time.thread_time() - cpu_start
            _log.info("fgrad.jit: llvm loaded in %.2f s (%s thread)", startup, thread)

    def _promote(self, tier, code, fn, seconds):
        with self._lock:
            self._queued.discard(tier)
            self._done.add(tier)
            if seconds is not None:
                self.seconds[tier] = seconds
            if code is not None:        # the kernels, also when the program runs
                self.compiled = code
            if fn is not None and TIERS.index(tier) > TIERS.index(self.tier):
                self.tier = tier
                self.fn = fn if code is None else self._runner(code)
            self._lock.notify_all()

    def finish(self, timeout=None, program=True):
        """Build every tier left (`start`) and wait for them; False on
        timeout. ``program=False`` builds the kernels (also where the
        program replaced them), not the program."""
        if program:
            self.start()
        elif self._fuse:
            self._ask("kernels")
        return self.wait(timeout)

    def wait(self, timeout=None):
        """Wait for the tiers asked for, and those of the loop bodies this
        graph let go of; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._queued:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._lock.wait(left)
            inner = list(self._holding) if self._let_go else []
        return all(tiers.wait(None if deadline is None else max(0.0, deadline -
                                                                 time.monotonic()))
                   for tiers in inner)

    @property
    def compiling(self):
        """Whether a tier is asked for and not built yet."""
        return bool(self._queued)

    def __repr__(self):
        return f"<Tiers of {self.name}: {self.tier}>"
