"""Array-likes that hold traced values: ``fnp.mean([a, b])``, ``fnp.append([x, 1.0], y)``.

Every public function of `fgrad.numpy` takes nested lists/tuples holding
tracers where NumPy takes array_like (`fgrad.primitives.array_likes.lift`
stacks them into one traced array). The elementwise functions do it in their
own slow path (their eager fast path for arrays stays one type check); every
other function is wrapped here by `accepts_array_likes`. Lists holding no
tracer pass through untouched (shapes, axes, index lists).
"""
import functools

from fgrad.primitives.array_likes import lift, lift_elements


def accepts_array_likes(fn, sequence_of_arrays=False):
    """``fn`` taking lists/tuples that hold tracers where it takes arrays.

    ``sequence_of_arrays`` marks functions whose list arguments are sequences of
    separate arrays (``concatenate``, ``stack``): each element is lifted alone.

    >>> import fgrad
    >>> mean = accepts_array_likes(lambda a: a.mean())
    >>> float(fgrad.grad(lambda a, b: mean([a, b]), (0, 1))(1.0, 3.0)[1])
    0.5
    """
    convert = lift_elements if sequence_of_arrays else lift

    @functools.wraps(fn)
    def with_array_likes(*args, **kwargs):
        for a in args:
            if type(a) is list or type(a) is tuple:
                args = tuple(convert(a) for a in args)
                break
        if kwargs:
            kwargs = {k: lift(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)
    return with_array_likes


def wrap_namespace(namespace, sequence_functions):
    """Wrap, in place, every public function of ``namespace`` (a module's
    ``globals()``) defined by fgrad, with `accepts_array_likes`.

    NumPy's own objects (creation functions, dtypes, ``finfo``) and classes stay
    as they are; aliases (``abs``, ``absolute``) stay one object.
    """
    wrapped = {}
    for name, obj in list(namespace.items()):
        if name.startswith("_") or isinstance(obj, type) or not callable(obj) \
                or not (getattr(obj, "__module__", None) or "").startswith("fgrad") \
                or hasattr(obj, "__wrapped__") or getattr(obj, "lifts_array_likes", False):
            continue
        if id(obj) not in wrapped:
            wrapped[id(obj)] = accepts_array_likes(obj, name in sequence_functions)
        namespace[name] = wrapped[id(obj)]
