"""Transformations that interpreter rules call back into, registered from above.

A few interpreter rules need a whole transformation of a user's function, and
those transformations live in the layer above this one (`fgrad.transforms`):

- reverse mode transposes a `custom_jvp` rule by running ``vjp`` over it;
- vmap hands a `custom_vjp`/`custom_jvp` function's rules to a differentiating
  trace below it batched, by wrapping them in ``vmap``.

The interpreters must not import the transforms layer (it imports them), so the
transforms layer registers these functions here when it is imported
(``fgrad/transforms/__init__.py``), and the rules look them up when they run,
which is always after ``import fgrad``. Registration happens once, at import;
nothing else writes here.
"""
from fgrad.core.errors import FgradError

_REGISTERED = {}
NAMES = ("vjp", "vmap")


def register(**functions):
    """Register the transformations named in `NAMES` (``register(vjp=vjp)``)."""
    for name, fn in functions.items():
        if name not in NAMES:
            raise ValueError(f"unknown interpreter callback {name!r}; known: {NAMES}")
        _REGISTERED[name] = fn


def transformation(name):
    """The registered transformation ``name``; an error if fgrad.transforms is absent."""
    try:
        return _REGISTERED[name]
    except KeyError:
        raise FgradError(
            f"the interpreters need fgrad's {name!r} transformation, which registers "
            "itself when fgrad.transforms is imported: import fgrad first.") from None
