"""Property-test specs for the NumPy surface of issue 17: array-likes that hold
traced values, creation from traced values, and the names added to match NumPy.

Imported at the end of `primitive_specs`, into whose `SPECS` it registers
(keyed by the fgrad.numpy name, so the coverage test finds them). References
are NumPy's own functions.
"""
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from primitive_specs import SPECS, Case, arrays, shapes

import fgrad.numpy as fnp


def _pair(max_dims=2):
    return hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=max_dims,
                                             max_side=3).flatmap(
        lambda bs: st.tuples(arrays(bs.input_shapes[0]), arrays(bs.input_shapes[1])))


# -- array-likes holding traced values -------------------------------------------------

# lists as NumPy code writes them (a Python float in one makes it float64, as in
# NumPy: those cases skip the float32 check)
SPECS["mean_of_list"] = shapes(max_dims=2).flatmap(
    lambda s: st.tuples(arrays(s), arrays(s))).map(
    lambda ab: Case(lambda a, b: fnp.mean([a, b, fnp.sin(a)], axis=0), ab,
                    lambda a, b: np.mean([a, b, np.sin(a)], axis=0)))
SPECS["append_list"] = st.tuples(arrays(()), arrays((3,))).map(
    lambda xy: Case(lambda x, y: fnp.append([x, 1.0], y), xy,
                    lambda x, y: np.append([x, 1.0], y), float32=False))
# nested lists mixing tracers and integer constants
SPECS["array_nested_list"] = st.tuples(arrays(()), arrays(())).map(
    lambda xy: Case(lambda x, y: fnp.array([[x, 0], [y * x, x]]) @ fnp.array([y, 2.0]), xy,
                    lambda x, y: np.array([[x, 0], [y * x, x]]) @ np.array([y, 2.0]),
                    float32=False))
SPECS["concatenate_nested_list"] = st.tuples(arrays(()), arrays((2,))).map(
    lambda xy: Case(lambda x, y: fnp.concatenate([[x, 1.0], y, (x * x,)]), xy,
                    lambda x, y: np.concatenate([[x, 1.0], y, (x * x,)]),
                    float32=False))


# -- creation from traced values ----------------------------------------------------------

@st.composite
def _full(draw):
    shape = draw(shapes(max_dims=2))
    fill = draw(arrays(shape[draw(st.integers(0, len(shape))):]))
    return Case(lambda g: fnp.full(shape, g), (fill,), lambda g: np.full(shape, g))


SPECS["full"] = _full()
SPECS["full_like_traced_fill"] = st.tuples(arrays((2, 3)), arrays((3,))).map(
    lambda xg: Case(lambda x, g: fnp.full_like(x, g) * x, xg,
                    lambda x, g: np.full_like(x, g) * x))


@st.composite
def _linspace(draw):
    (s_start, s_stop), _ = draw(hnp.mutually_broadcastable_shapes(
        num_shapes=2, max_dims=2, max_side=3))
    start, stop = draw(arrays(s_start)), draw(arrays(s_stop))
    num = draw(st.integers(1, 5))
    endpoint = draw(st.booleans())
    axis = draw(st.integers(-1, 0))
    return Case(lambda a, b: fnp.linspace(a, b, num, endpoint=endpoint, axis=axis),
                (start, stop),
                lambda a, b: np.linspace(a, b, num, endpoint=endpoint, axis=axis),
                tol={"rtol": 1e-6, "atol": 1e-6})


SPECS["linspace"] = _linspace()
