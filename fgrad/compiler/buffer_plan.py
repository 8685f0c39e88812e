"""Buffer planning: every intermediate of a straight-line program in one arena.

Shapes are static under `fgrad.jit`, so the memory a compiled program needs
is known before it runs. `plan_buffers` walks the program's steps in order
(each step reads some values and writes others), finds when each value
written lives (from its step to the step that reads it last), and gives it
an offset in one arena that no value living at the same time has, so that a
later value reuses the bytes of a dead one (XLA's buffer assignment: first
fit over the live intervals, in program order, or largest first where that
packs them tighter). A step may also write a
value into the buffer of one it reads, where the step says that is safe (an
elementwise loop reads each element before it writes it), and a view (a
reshape of a contiguous value) shares its source's buffer, which then lives
as long as either does.

The arena's size is the largest total of live bytes at any step plus the
gaps the placement leaves, less what lives in the outputs' own memory before
they are written; `BufferPlan.peak_live_bytes` is that total, the memory the
interpreted tier needs for the same values at least.
"""
import collections

# every buffer starts at a multiple of this (a cache line, and any SIMD load's alignment)
ALIGNMENT = 64
# the most buffers a plan also places largest-first (quadratic in their number)
MAX_REORDERED = 4000


Step = collections.namedtuple("Step", "reads writes in_place views")
Step.__doc__ = """One step of a program, as the buffer plan sees it.

``reads`` and ``writes`` are the values it reads and writes (any hashable
keys); ``in_place`` maps a value written to the values read whose buffer
it may take if that buffer dies at this step; ``views`` maps a value
written to the value read whose buffer it shares (nothing is written)."""


class BufferPlan:
    """Where each value lives: ``offsets`` maps a value to its byte offset in
    the arena, or in the region ``homes`` names for it (`plan_buffers`);
    ``arena_bytes`` is the arena's size, ``peak_live_bytes`` the most bytes
    live at once; ``in_place`` lists the ``(step, value, taken)`` writes
    into a dying buffer and ``views`` the values that share one."""

    __slots__ = ("offsets", "arena_bytes", "peak_live_bytes", "in_place", "views", "homes")

    def __init__(self, offsets, arena_bytes, peak_live_bytes, in_place, views, homes):
        self.offsets, self.arena_bytes = offsets, arena_bytes
        self.peak_live_bytes, self.in_place, self.views = peak_live_bytes, in_place, views
        self.homes = homes

    def __repr__(self):
        return (f"<BufferPlan: {len(self.offsets)} values in {self.arena_bytes} bytes, "
                f"{self.peak_live_bytes} live at most>")


def _aligned(n):
    return -(-n // ALIGNMENT) * ALIGNMENT


def plan_buffers(steps, nbytes, placed=(), regions=(), movable=None):
    """The `BufferPlan` of ``steps`` (`Step` s, in program order).

    ``nbytes(value)`` is a value's size; values in ``placed`` (the program's
    inputs and outputs, constants) have memory of their own and get no
    offset, and neither is anything never written. A value read but never
    written again after it dies is freed after its last reader.

    ``regions`` are ``(name, size, step)`` triples: memory of its own (an
    output's array) that nothing uses before step ``step`` (which writes
    it). A buffer dead before that step whose values are all ``movable``
    may live there instead of in the arena (XLA lets temporaries use an
    output's buffer before it is written): ``BufferPlan.homes`` names the
    region of each value placed so, its offset then into the region.

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

    # the walk decides which values share a buffer (views, writes into a
    # dying operand) and when each buffer lives; offsets are chosen after it
    blocks = []                             # [size, first step, last step]
    block_of, live = {}, {}                 # value -> its block; live owner -> block
    in_place, views = [], []
    peak = live_bytes = 0

    def free(v, k):
        nonlocal live_bytes
        block = blocks[live.pop(v)]
        block[2] = k
        live_bytes -= block[0]

    for k, step in enumerate(steps):
        dying = {owner(v) for v in step.reads
                 if owner(v) in live and last_read.get(owner(v)) == k}
        # a buffer the step reads through two values (a value and a view of
        # it) may be read at other elements than the one written: not taken
        read_twice = {v for v, n in collections.Counter(
            owner(v) for v in set(step.reads)).items() if n > 1}
        for v in step.writes:
            # (a value a later step writes more of already has its buffer)
            if v in placed or v in block_of:
                continue
            source = step.views.get(v)
            if source is not None and owner(source) not in placed:
                root[v] = owner(source)
                block_of[v] = block_of[root[v]]
                views.append(v)
                continue
            size = _aligned(nbytes(v))
            taken = next((owner(r) for r in step.in_place.get(v, ())
                          if owner(r) in dying and owner(r) not in read_twice
                          and blocks[live[owner(r)]][0] == size), None)
            if taken is not None:           # the dying buffer passes to v
                dying.discard(taken)
                live[v] = live.pop(taken)
                in_place.append((k, v, taken))
            else:
                live[v] = len(blocks)
                blocks.append([size, k, k])
                live_bytes += size
            block_of[v] = live[v]
        peak = max(peak, live_bytes)
        for v in dying:
            free(v, k)
        # a value written and never read is dead at once
        for v in step.writes:
            if v in live and last_read.get(v) == k and v not in step.reads:
                free(v, k)
    for v in list(live):
        free(v, len(steps))
    values = collections.defaultdict(list)
    for v, b in block_of.items():
        values[b].append(v)
    home_of, block_offsets = _place_in_regions(
        blocks, regions, [b for b in range(len(blocks))
                          if movable is not None and all(map(movable, values[b]))])
    starts = sorted((b for b in range(len(blocks)) if b not in home_of),
                    key=lambda b: blocks[b][1])
    in_arena, arena = _place(blocks, starts)
    if len(blocks) <= MAX_REORDERED:
        # first fit in program order left gaps: largest first, which packs
        # the long-lived large buffers low and fits the small ones around
        # them (XLA's and TFLite's greedy-by-size heuristic), where smaller
        by_size = sorted(starts, key=lambda b: -blocks[b][0])
        other, other_arena = _place(blocks, by_size)
        if other_arena < arena:
            in_arena, arena = other, other_arena
    block_offsets.update(in_arena)
    offsets = {v: block_offsets[b] for v, b in block_of.items()}
    homes = {v: home_of[b] for v, b in block_of.items() if b in home_of}
    return BufferPlan(offsets, arena, peak, in_place, views, homes)


def _place(blocks, order):
    """Offsets of ``blocks`` (``[size, first step, last step]``), each placed
    in ``order`` at the lowest offset free of the blocks placed before it
    that live at some step it does: ``({block: offset}, arena size)``."""
    offsets, done, arena = {}, [], 0
    for b in order:
        offsets[b] = offset = _lowest_free(blocks, offsets, done, b)
        done.append(b)
        arena = max(arena, offset + blocks[b][0])
    return offsets, arena


def _place_in_regions(blocks, regions, movable):
    """``({block: region}, {block: offset})`` of the ``movable`` blocks that
    fit in ``regions`` (`plan_buffers`), largest regions and blocks first,
    each at the lowest offset free of the blocks placed there before it."""
    home_of, offsets = {}, {}
    by_size = sorted(movable, key=lambda b: -blocks[b][0])
    for name, size, step in sorted(regions, key=lambda r: -r[1]):
        inside = []
        for b in by_size:
            length, _, last = blocks[b]
            if b in home_of or last >= step or length > size:
                continue
            offset = _lowest_free(blocks, offsets, inside, b)
            if offset + length <= size:
                home_of[b], offsets[b] = name, offset
                inside.append(b)
    return home_of, offsets


def _lowest_free(blocks, offsets, placed, b):
    """The lowest offset where block ``b`` fits beside the ``placed`` blocks
    whose lifetimes overlap its own."""
    size, first, last = blocks[b]
    return _first_fit([(offsets[o], blocks[o][0]) for o in placed
                       if blocks[o][1] <= last and first <= blocks[o][2]], size)


def _first_fit(blocks, size):
    """The lowest offset where ``size`` bytes fit between the live ``blocks``
    ((offset, size) pairs)."""
    at = 0
    for offset, length in sorted(blocks):
        if offset - at >= size:
            return at
        at = max(at, offset + length)
    return at
