"""Einstein summation: one primitive whose contraction order comes from opt_einsum.

``einsum_p`` takes its subscripts in explicit form with every ellipsis already
spelled out as letters (``"abij,jk->abik"``), and its contraction path as a
parameter. The path is chosen by opt_einsum once per (subscripts, shapes) and
kept in a bounded ``functools.lru_cache``; so is the compiled contraction.
`einsum` binds one equation per step of the path (a printed graph shows which
pairs are contracted in which order), so reverse mode keeps the intermediates
and each step's VJP is a pairwise product too.

The VJP of an einsum is an einsum: the cotangent of operand ``k`` contracts the
output cotangent with every other operand into ``k``'s subscripts, through the
same binding function (so it picks its own cached path and differentiates
again). Two details make every NumPy subscript form work:

- a letter repeated within operand ``k`` (a diagonal, ``"ii->i"``) cannot be an
  einsum output, so its repeats are renamed to fresh letters tied to it by
  identity matrices (Kronecker deltas), which put the cotangent on the diagonal;
- a letter that only operand ``k`` has (summed away, ``"ij->i"``) is absent from
  everything else, so the contraction leaves it out and the result is broadcast
  along it.
"""
import functools

import numpy as np
import opt_einsum

from fgrad.core.backend import array_module
from fgrad.primitives.batching import move_axis
from fgrad.core.trace import Primitive, ShapedArray, Zero, get_aval

from fgrad.primitives.base import dummy

FAMILY = "primitives/einsum.py"

_CACHE_SIZE = 512


def split_subscripts(subscripts):
    """``"ij,jk->ik"`` -> ``(("ij", "jk"), "ik")``."""
    inputs, output = subscripts.split("->")
    return tuple(inputs.split(",")), output


@functools.lru_cache(maxsize=_CACHE_SIZE)
def contraction_path(subscripts, shapes):
    """opt_einsum's pairwise contraction order for these subscripts and shapes.

    A tuple of tuples of operand positions (hashable, so it can be a primitive
    parameter): ``((0, 1), (0, 1))`` contracts the first two operands, then the
    result with the third.
    """
    if len(shapes) == 1:
        return ((0,),)
    path, _ = opt_einsum.contract_path(subscripts, *shapes, shapes=True,
                                       optimize="auto")
    return tuple(tuple(int(i) for i in step) for step in path)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _expression(subscripts, shapes, path):
    # opt_einsum's compiled contraction: the parsing and the choice of BLAS calls
    # for each pairwise step happen here once, not on every call.
    return opt_einsum.contract_expression(subscripts, *shapes, optimize=list(path))


def _letter_sizes(subscripts, avals):
    inputs, output = split_subscripts(subscripts)
    if len(inputs) != len(avals):
        raise ValueError(f"einsum: {len(inputs)} operand subscripts in "
                         f"{subscripts!r} but {len(avals)} operands")
    sizes = {}
    for k, (letters, aval) in enumerate(zip(inputs, avals)):
        if len(letters) != aval.ndim:
            raise ValueError(f"einsum: operand {k} has {aval.ndim} dimensions but "
                             f"subscripts {letters!r} name {len(letters)}")
        for letter, size in zip(letters, aval.shape):
            if sizes.setdefault(letter, size) != size:
                raise ValueError(
                    f"einsum: label {letter!r} has size {size} in operand {k} but "
                    f"{sizes[letter]} earlier in {subscripts!r}")
    for letter in output:
        if letter not in sizes:
            raise ValueError(f"einsum: output label {letter!r} appears in no operand "
                             f"of {subscripts!r}")
    return sizes


def _einsum_abstract(*avals, subscripts, path):
    sizes = _letter_sizes(subscripts, avals)
    output = split_subscripts(subscripts)[1]
    return ShapedArray(tuple(sizes[c] for c in output),
                       np.result_type(*(dummy(a) for a in avals)))


def _einsum_impl(*operands, subscripts, path):
    shapes = tuple(o.shape for o in operands)
    # opt_einsum runs each pairwise step with the backend module named here
    backend = array_module(*operands).__name__
    return _expression(subscripts, shapes, path)(*operands, backend=backend)


einsum_p = Primitive("einsum", _einsum_impl, _einsum_abstract, family=FAMILY)


def einsum(subscripts, *operands):
    """Contract explicit subscripts without ellipsis (``"ij,jk->ik"``) along
    opt_einsum's path, one ``einsum_p`` equation per step of it.

    The path is looked up in (or added to) the per-(subscripts, shapes) cache.
    More than two operands are contracted step by step, each step's result an
    operand of the next: the steps are pairwise products that go to BLAS in
    both passes, and reverse mode keeps their intermediates, so the gradient of
    a chain ``A B C D`` costs two products per step (as by hand through the
    intermediates) instead of a whole contraction per operand.

    >>> import numpy as np
    >>> einsum("ij,jk->ik", np.eye(2), np.ones((2, 3))).shape
    (2, 3)
    """
    shapes = tuple(get_aval(o).shape for o in operands)
    path = contraction_path(subscripts, shapes)
    if len(path) == 1:
        return einsum_p.bind(*operands, subscripts=subscripts, path=path)
    inputs, output = split_subscripts(subscripts)
    terms, values = list(inputs), list(operands)
    for step in path:
        taken = [(terms.pop(i), values.pop(i)) for i in sorted(step, reverse=True)]
        if terms:
            # a letter survives the step if a later operand or the output has it;
            # ordered as it first appears among the step's operands (opt_einsum's
            # order, which its pairwise BLAS calls produce without a transpose)
            later = set("".join(terms) + output)
            joined = "".join(t for t, _ in reversed(taken))
            kept = "".join(sorted({c for c in joined if c in later}, key=joined.find))
        else:
            kept = output
        step_subscripts = ",".join(t for t, _ in reversed(taken)) + "->" + kept
        step_shapes = tuple(get_aval(v).shape for _, v in reversed(taken))
        terms.append(kept)
        values.append(einsum_p.bind(*(v for _, v in reversed(taken)),
                                    subscripts=step_subscripts,
                                    path=contraction_path(step_subscripts, step_shapes)))
    return values[0]


# -- derivative rules ------------------------------------------------------------


def _fresh_letters(used):
    i = 0
    while True:
        letter = opt_einsum.get_symbol(i)
        if letter not in used:
            used.add(letter)
            yield letter
        i += 1


def _operand_cotangent(k, ct, operands, subscripts):
    inputs, output = split_subscripts(subscripts)
    sizes = _letter_sizes(subscripts, [get_aval(o) for o in operands])
    target = inputs[k]
    dtype = get_aval(ct).dtype
    fresh = _fresh_letters(set(subscripts))
    terms = [s for j, s in enumerate(inputs) if j != k] + [output]
    args = [o for j, o in enumerate(operands) if j != k] + [ct]
    # Repeated letters of the target become fresh ones tied by deltas.
    seen, renamed = set(), []
    for letter in target:
        if letter in seen:
            new = next(fresh)
            terms.append(letter + new)
            args.append(identity_like(ct, sizes[letter], dtype))
            renamed.append(new)
        else:
            seen.add(letter)
            renamed.append(letter)
    available = set("".join(terms))
    kept = "".join(c for c in renamed if c in available)
    result = einsum(",".join(terms) + "->" + kept, *args)
    if len(kept) != len(renamed):
        # letters only this operand had: the cotangent is constant along them
        result = reshape(result, tuple(sizes[target[i]] if c in available else 1
                                       for i, c in enumerate(renamed)))
        result = broadcast_to(result, get_aval(operands[k]).shape)
    return cast_like(result, get_aval(operands[k]))


def _einsum_vjp(ct, ans, needed, *operands, subscripts, path):
    return tuple(_operand_cotangent(k, ct, operands, subscripts) if need else None
                 for k, need in enumerate(needed))


def _einsum_jvp(tangents, ans, *operands, subscripts, path):
    total = None
    for k, t in enumerate(tangents):
        if type(t) is Zero:
            continue
        args = operands[:k] + (t,) + operands[k + 1:]
        term = cast_like(einsum_p.bind(*args, subscripts=subscripts, path=path),
                         get_aval(ans))
        total = term if total is None else total + term
    return total


einsum_p.def_vjp_joint(_einsum_vjp)
einsum_p.def_jvp_joint(_einsum_jvp)


def _einsum_batch(args, dims, subscripts, path):
    # the batch axis becomes one more label, shared by the mapped operands and
    # leading the output
    inputs, output = split_subscripts(subscripts)
    label = next(_fresh_letters(set(subscripts)))
    terms, operands = [], []
    for letters, x, d in zip(inputs, args, dims):
        if d is None:
            terms.append(letters)
            operands.append(x)
        else:
            terms.append(label + letters)
            operands.append(move_axis(x, d, 0))
    return einsum(",".join(terms) + "->" + label + output, *operands), 0


einsum_p.batch = _einsum_batch


# -- identity matrices on the operands' backend -------------------------------------

identity_like_p = Primitive(
    "identity_like",
    lambda like, n, dtype: array_module(like).eye(n, dtype=dtype),
    lambda like, n, dtype: ShapedArray((n, n), dtype), nondiff=True, family=FAMILY)
# the same identity for every example: the batch axis of `like` is irrelevant
identity_like_p.batch = lambda args, dims, n, dtype: (
    identity_like_p.bind(args[0], n=n, dtype=dtype), None)


def identity_like(like, n, dtype=None):
    """The ``n x n`` identity on ``like``'s backend (no derivative).

    >>> import numpy as np
    >>> identity_like(np.ones(3), 2)
    array([[1., 0.],
           [0., 1.]])
    """
    dtype = get_aval(like).dtype if dtype is None else np.dtype(dtype)
    return identity_like_p.bind(like, n=int(n), dtype=dtype)


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.elementwise import cast_like  # noqa: E402
from fgrad.primitives.shape import broadcast_to, reshape  # noqa: E402
