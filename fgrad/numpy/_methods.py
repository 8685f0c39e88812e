"""The array protocol of tracers: operators, indexing and methods.

They live here, not in `fgrad.core.trace`, because they call fgrad.numpy functions and
the core must not depend on any primitive.
"""
from fgrad.core.trace import Tracer, get_aval
from fgrad.numpy._products import matmul
from fgrad.numpy._temporaries import reusing_operator
from fgrad.primitives import elementwise as ew
from fgrad.primitives import indexing, products, reductions, shape
from fgrad.primitives.array_likes import lift


def _swap(fn):
    return lambda self, other: fn(other, self)


_BINARY = {"add": ew.add, "sub": ew.subtract, "mul": ew.multiply,
           "truediv": ew.divide, "pow": ew.power, "matmul": matmul,
           "mod": ew.remainder, "floordiv": ew.floor_divide}
# the binding functions take (x, y), so they serve as the methods themselves
for _name, _fn in _BINARY.items():
    setattr(Tracer, f"__{_name}__", _fn)
    setattr(Tracer, f"__r{_name}__", _swap(_fn))
# a dead temporary's buffer takes the result of these (fgrad.numpy._temporaries)
for _name, _prim in {"add": ew.add_p, "sub": ew.subtract_p, "mul": ew.multiply_p,
                     "truediv": ew.divide_p}.items():
    setattr(Tracer, f"__{_name}__", reusing_operator(_BINARY[_name], _prim))

for _name, _fn in {"lt": ew.less, "le": ew.less_equal, "gt": ew.greater,
                   "ge": ew.greater_equal, "eq": ew.equal, "ne": ew.not_equal}.items():
    setattr(Tracer, f"__{_name}__", _fn)

# NumPy's bitwise operators, on booleans the logical ones (a loop's `a & ~b` test)
for _name, _fn in {"and": ew.bitwise_and, "or": ew.bitwise_or,
                   "xor": ew.bitwise_xor}.items():
    setattr(Tracer, f"__{_name}__", _fn)
    setattr(Tracer, f"__r{_name}__", _swap(_fn))
Tracer.__invert__ = ew.invert

Tracer.__neg__ = ew.negative
Tracer.__pos__ = lambda self: self
Tracer.__abs__ = lambda self: ew.absolute(self)
Tracer.__getitem__ = lambda self, index: indexing.getitem(self, index)
# elementwise __eq__ makes tracers unhashable, as NumPy arrays are
Tracer.__hash__ = None


def _axes_arg(args):
    if len(args) == 1 and (args[0] is None or isinstance(args[0], (tuple, list))):
        return args[0]
    return args or None


Tracer.T = property(lambda self: shape.transpose(self))
Tracer.mT = property(lambda self: shape.swap_last_axes(self))
Tracer.real = property(lambda self: ew.real(self))
Tracer.conj = lambda self: ew.conj(self)
Tracer.sum = lambda self, axis=None, keepdims=False: reductions.sum_(self, axis, keepdims)
Tracer.mean = lambda self, axis=None, keepdims=False: reductions.mean(self, axis, keepdims)
Tracer.prod = lambda self, axis=None, keepdims=False: reductions.prod(self, axis, keepdims)
Tracer.max = lambda self, axis=None, keepdims=False: reductions.max_(self, axis, keepdims)
Tracer.min = lambda self, axis=None, keepdims=False: reductions.min_(self, axis, keepdims)
Tracer.reshape = lambda self, *shp: shape.reshape(
    self, shp[0] if len(shp) == 1 and not isinstance(shp[0], int) else shp)
Tracer.transpose = lambda self, *axes: shape.transpose(self, _axes_arg(axes))
Tracer.squeeze = lambda self, axis=None: shape.squeeze(self, axis)
Tracer.ravel = lambda self: shape.reshape(self, (-1,))
Tracer.flatten = Tracer.ravel
Tracer.dot = lambda self, other: products.dot(self, lift(other))
Tracer.astype = lambda self, dtype: ew.convert_element_type(self, dtype)
Tracer.copy = lambda self: self
Tracer.__round__ = lambda self, ndigits=None: round(float(self), ndigits)
del get_aval
