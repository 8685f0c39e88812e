"""Buffer planning: every intermediate of a straight-line program in one arena.

Shapes are static under `fgrad.jit`, so the memory a compiled program needs
is known before it runs. `plan_buffers` walks the program's steps in order
(each step reads some values and writes others), gives each value written an
offset in one arena, and frees it after the step that reads it last, so that
a later value reuses the bytes of a dead one (XLA's buffer assignment, in its
simplest form: first fit over the live intervals). A step may also write a
value into the buffer of one it reads, where the step says that is safe (an
elementwise loop reads each element before it writes it), and a view (a
reshape of a contiguous value) shares its source's buffer, which then lives
as long as either does.

The arena's size is at most the largest total of live bytes at any step plus
the gaps first fit leaves; `BufferPlan.peak_live_bytes` is that total, the
memory the interpreted tier needs for the same values at least.
"""
import collections

# every buffer starts at a multiple of this (a cache line, and any SIMD load's alignment)
ALIGNMENT = 64


Step = collections.namedtuple("Step", "reads writes in_place views")
Step.__doc__ = """One step of a program, as the buffer plan sees it.

``reads`` and ``writes`` are the values it reads and writes (any hashable
keys); ``in_place`` maps a value written to the values read whose buffer
it may take if that buffer dies at this step; ``views`` maps a value
written to the value read whose buffer it shares (nothing is written)."""


class BufferPlan:
    """Where each value lives: ``offsets`` maps a value to its byte offset in
    the arena, ``arena_bytes`` is the arena's size, ``peak_live_bytes`` the
    most bytes live at once; ``in_place`` lists the ``(step, value, taken)``
    writes into a dying buffer and ``views`` the values that share one."""

    __slots__ = ("offsets", "arena_bytes", "peak_live_bytes", "in_place", "views")

    def __init__(self, offsets, arena_bytes, peak_live_bytes, in_place, views):
        self.offsets, self.arena_bytes = offsets, arena_bytes
        self.peak_live_bytes, self.in_place, self.views = peak_live_bytes, in_place, views

    def __repr__(self):
        return (f"<BufferPlan: {len(self.offsets)} values in {self.arena_bytes} bytes, "
                f"{self.peak_live_bytes} live at most>")


def _aligned(n):
    return -(-n // ALIGNMENT) * ALIGNMENT


def plan_buffers(steps, nbytes, placed=()):
    """The `BufferPlan` of ``steps`` (`Step` s, in program order).

    ``nbytes(value)`` is a value's size; values in ``placed`` (the program's
    inputs and outputs, constants) have memory of their own and get no
    offset, and neither is anything never written. A value read but never
    written again after it dies is freed after its last reader.

    >>> steps = [Step(["x"], ["a"], {}, {}), Step(["a"], ["b"], {}, {}),
    ...          Step(["b"], ["c"], {}, {}), Step(["c"], ["y"], {}, {})]
    >>> plan = plan_buffers(steps, lambda v: 800, placed={"x", "y"})
    >>> plan.offsets == {"a": 0, "b": 832, "c": 0}      # c takes a's dead buffer
    True
    >>> plan.arena_bytes, plan.peak_live_bytes
    (1664, 1664)
    """
    placed = set(placed)
    root = {}                               # a view -> the value whose buffer it shares

    def owner(v):
        while v in root:
            v = root[v]
        return v

    last_read = {}
    for k, step in enumerate(steps):
        for v, source in step.views.items():
            root[v] = source
        for v in step.reads:
            last_read[owner(v)] = k
        for v in step.writes:
            last_read.setdefault(owner(v), k)
    root.clear()

    live = {}                               # buffer owner -> (offset, size)
    offsets, in_place, views = {}, [], []
    arena = peak = live_bytes = 0
    for k, step in enumerate(steps):
        dying = {owner(v) for v in step.reads
                 if owner(v) in live and last_read.get(owner(v)) == k}
        # a buffer the step reads through two values (a value and a view of
        # it) may be read at other elements than the one written: not taken
        read_twice = {v for v, n in collections.Counter(
            owner(v) for v in set(step.reads)).items() if n > 1}
        for v in step.writes:
            if v in placed:
                continue
            source = step.views.get(v)
            if source is not None and owner(source) not in placed:
                root[v] = owner(source)
                offsets[v] = offsets[root[v]]
                views.append(v)
                continue
            size = _aligned(nbytes(v))
            taken = next((owner(r) for r in step.in_place.get(v, ())
                          if owner(r) in dying and owner(r) not in read_twice
                          and live[owner(r)][1] == size), None)
            if taken is not None:           # the dying buffer passes to v
                dying.discard(taken)
                offset = live.pop(taken)[0]
                live_bytes -= size
                in_place.append((k, v, taken))
            else:
                offset = _first_fit(live.values(), size)
                arena = max(arena, offset + size)
            live[v] = (offset, size)
            offsets[v] = offset
            live_bytes += size
        peak = max(peak, live_bytes)
        for v in dying:
            live_bytes -= live.pop(v)[1]
        # a value written and never read is dead at once
        for v in step.writes:
            if v in live and last_read.get(v) == k and v not in step.reads:
                live_bytes -= live.pop(v)[1]
    return BufferPlan(offsets, arena, peak, in_place, views)


def _first_fit(blocks, size):
    """The lowest offset where ``size`` bytes fit between the live ``blocks``
    ((offset, size) pairs)."""
    at = 0
    for offset, length in sorted(blocks):
        if offset - at >= size:
            return at
        at = max(at, offset + length)
    return at
