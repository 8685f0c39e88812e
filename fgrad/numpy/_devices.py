"""Devices in the Array API standard's sense, for traced values.

Array API code makes its new arrays where its input lives:
``xp.zeros(n, device=x.device)``, ``xp.asarray(y, device=x.device)``
(scikit-learn moves ``y`` next to ``X`` so at the start of ``fit``). A NumPy
array made there could not hold a traced value, and would make such code see
two namespaces (NumPy's and fgrad.numpy's). So a tracer's ``device`` is a
`TracedDevice`: equal to the device its data is on (``"cpu"`` for NumPy data),
and naming the transformation the value belongs to, and arrays created on it
are constants of that transformation: tracers of ``fgrad.numpy``, which
``x[i] = v`` may update.
"""
import functools

from fgrad.core.backend import array_module, asarray_on
from fgrad.core.errors import DeviceError
from fgrad.core.trace import Tracer


class TracedDevice:
    """The device of a traced value: where its data is, and its transformation.

    It compares (and hashes) as the plain device, so ``x.device == "cpu"``
    holds for a traced value of NumPy data, as for the NumPy array.

    >>> import fgrad, numpy as np
    >>> float(fgrad.grad(lambda x: float(x.device == "cpu") * x)(1.0))
    1.0
    """

    __slots__ = ("where", "owner", "module")

    def __init__(self, where, owner, module):
        self.where, self.owner, self.module = where, owner, module

    def __eq__(self, other):
        return self.where == (other.where if isinstance(other, TracedDevice) else other)

    def __hash__(self):
        return hash(self.where)

    def __repr__(self):
        return repr(self.where)

    def __str__(self):
        return str(self.where)


def traced_device(x):
    """``x.device`` of the tracer ``x`` (installed as the property)."""
    value = x
    while isinstance(value, Tracer):
        value = value.carried()
    # a value staged by jit has no data: it runs where its inputs are (the host)
    module = array_module(value) if value is not None else array_module()
    return TracedDevice(getattr(value, "device", "cpu"), x.owner, module)


def place(out, device):
    """``out`` on ``device``: a constant of its transformation for a
    `TracedDevice`, else ``out`` itself, which must already be there (fgrad
    moves data only in `fgrad.device_put`)."""
    if device is None:
        return out
    if isinstance(device, TracedDevice):
        if isinstance(out, Tracer) and out.owner is device.owner:
            return out
        if not isinstance(out, Tracer):
            out = asarray_on(device.module, out)
        return device.owner.lift(out)
    here = getattr(out, "device", "cpu")
    if device == here or str(device).lower() == str(here).lower():
        return out
    if isinstance(out, Tracer):
        return out.to_device(device)        # its DeviceError says to move inputs first
    raise DeviceError(f"device={device!r} was asked of data on {here!r}: fgrad does not "
                      "move data implicitly. Move it first with "
                      "fgrad.device_put(x, 'gpu') or fgrad.device_put(x, 'cpu').")


def on_device(create):
    """``create`` (a function making an array from nothing, or like another
    array) taking the standard's ``device=`` keyword (see `place`)."""
    @functools.wraps(create)
    def created(*args, **kwargs):
        if not kwargs:                      # the common call: NumPy's, one frame above
            return create(*args)
        device = kwargs.pop("device", None)
        out = create(*args, **kwargs)
        return out if device is None else place(out, device)
    return created
