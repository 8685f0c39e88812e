"""Running generated CUDA elementwise kernels on the CPU, for tests without a GPU.

`make_kernel` has the signature of CuPy's ``ElementwiseKernel`` (in_params,
out_params, operation, name) and returns a callable that evaluates the kernel's
*C source* with NumPy: a small recursive-descent parser reads each statement
(``double t0 = sin(in0);``) and evaluates it over whole arrays with C's meaning
(casts, ``?:``, ``||``, the math library), so a wrong template in
`fgrad.compiler.fusion` gives wrong numbers here, not a silently corrected result.

Like CuPy, a call broadcasts its inputs, refuses an array whose dtype is not the
declared one, and returns a tuple of freshly allocated outputs. ``unwrap`` and
``wrap`` move between the backend's arrays and NumPy (for the stand-in device).
"""
import re

import numpy as np

_DTYPES = {"bool": np.bool_, "signed char": np.int8, "short": np.int16,
           "int": np.int32, "long long": np.int64, "unsigned char": np.uint8,
           "unsigned short": np.uint16, "unsigned int": np.uint32,
           "unsigned long long": np.uint64, "float": np.float32, "double": np.float64}
_TYPE_WORDS = {"bool", "signed", "unsigned", "char", "short", "int", "long", "float",
               "double"}

# C math functions, each the NumPy function with the same meaning in C
_FUNCTIONS = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "exp": np.exp,
    "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "cbrt": np.cbrt,
    "fabs": np.fabs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "rint": np.rint, "pow": np.power, "atan2": np.arctan2, "hypot": np.hypot,
    "fmod": np.fmod, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "signbit": np.signbit,
}

_TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:e[+-]?\d+)?|\d+e[+-]?\d+)|(\d+)(ull|ll)?|"
                    r"([A-Za-z_]\w*)|(\|\||&&|==|!=|<=|>=|[-+*/()?:<>!,;=]))")


def _tokens(text):
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise SyntaxError(f"cannot read kernel source at {text[pos:pos + 20]!r}")
        pos = m.end()
        flt, integer, _, name, op = m.groups()
        if flt is not None:
            out.append(("num", float(flt)))
        elif integer is not None:
            out.append(("num", int(integer)))
        elif name is not None:
            out.append(("name", name))
        else:
            out.append(("op", op))
    return out


class _Parser:
    def __init__(self, tokens, env):
        self.tokens, self.pos, self.env = tokens, 0, env

    def peek(self, k=0):
        i = self.pos + k
        return self.tokens[i] if i < len(self.tokens) else ("end", None)

    def take(self, expected=None):
        tok = self.peek()
        if expected is not None and tok[1] != expected:
            raise SyntaxError(f"expected {expected!r}, found {tok[1]!r}")
        self.pos += 1
        return tok

    def type_name(self):
        """A C type starting here (consumed), or None."""
        words, k = [], 0
        while self.peek(k)[0] == "name" and self.peek(k)[1] in _TYPE_WORDS:
            words.append(self.peek(k)[1])
            k += 1
        if not words:
            return None
        self.pos += k
        return _DTYPES[" ".join(words)]

    def statement(self):
        dtype = self.type_name()
        target = self.take()[1]
        self.take("=")
        value = self.expression()
        self.take(";")
        if dtype is None:                 # an output: assigned in its declared type
            dtype = self.env[target].dtype.type
        with np.errstate(all="ignore"):
            self.env[target] = np.asarray(value).astype(dtype)

    def expression(self):
        cond = self.binary(0)
        if self.peek()[1] == "?":
            self.take()
            a = self.expression()
            self.take(":")
            b = self.expression()
            return np.where(np.asarray(cond).astype(bool), a, b)
        return cond

    _LEVELS = [("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"),
               ("*", "/")]

    def binary(self, level):
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek()[0] == "op" and self.peek()[1] in self._LEVELS[level]:
            op = self.take()[1]
            right = self.binary(level + 1)
            left = _apply(op, left, right)
        return left

    def unary(self):
        tok = self.peek()
        if tok[1] == "-":
            self.take()
            return np.negative(self.unary())
        if tok[1] == "!":
            self.take()
            return np.logical_not(self.unary())
        if tok[1] == "(":
            save = self.pos
            self.take()
            dtype = self.type_name()
            if dtype is not None:
                self.take(")")
                with np.errstate(all="ignore"):
                    return np.asarray(self.unary()).astype(dtype)[()]
            self.pos = save
        return self.primary()

    def primary(self):
        kind, value = self.take()
        if kind == "num":
            return value
        if kind == "op" and value == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if kind == "name":
            if value in ("true", "false"):
                return np.bool_(value == "true")
            if self.peek()[1] == "(":
                self.take()
                args = [self.expression()]
                while self.peek()[1] == ",":
                    self.take()
                    args.append(self.expression())
                self.take(")")
                return _FUNCTIONS[value](*args)
            return self.env[value]
        raise SyntaxError(f"unexpected {value!r} in kernel source")


def _apply(op, a, b):
    if op == "||":
        return np.logical_or(a, b)
    if op == "&&":
        return np.logical_and(a, b)
    if op == "/" and not (np.asarray(a).dtype.kind == "f" or np.asarray(b).dtype.kind == "f"):
        raise NotImplementedError("integer division is never generated")
    fn = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
          ">": np.greater, ">=": np.greater_equal, "+": np.add, "-": np.subtract,
          "*": np.multiply, "/": np.divide}[op]
    return fn(a, b)


def _params(text):
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        dtype, name = part.split()
        out.append((np.dtype(dtype), name))
    return out


def make_kernel(in_params, out_params, operation, name, unwrap=np.asarray,
                wrap=lambda a: a):
    """A CPU evaluation of the CuPy elementwise kernel with this source."""
    ins, outs = _params(in_params), _params(out_params)
    statements = [s.strip() + ";" for s in operation.split(";") if s.strip()]
    parsed = [_tokens(s) for s in statements]         # syntax errors surface here
    calls = []

    def kernel(*args):
        if len(args) != len(ins):
            raise TypeError(f"{name} takes {len(ins)} inputs, got {len(args)}")
        env = {}
        arrays = []
        for (dtype, pname), arg in zip(ins, args):
            if hasattr(arg, "shape") and not isinstance(arg, np.generic):
                a = unwrap(arg)
                if a.dtype != dtype:
                    raise TypeError(f"{name}: {pname} is declared {dtype} but got a "
                                    f"{a.dtype} array")
                arrays.append(a)
            else:
                a = np.asarray(arg, dtype)          # a scalar argument, as CuPy casts
            env[pname] = a
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        for dtype, oname in outs:
            env[oname] = np.empty(shape, dtype)
        with np.errstate(all="ignore"):
            for tokens in parsed:
                p = _Parser(tokens, env)
                p.statement()
                if p.pos != len(tokens):
                    raise SyntaxError(f"trailing tokens in {tokens}")
        calls.append(shape)
        return tuple(wrap(np.array(np.broadcast_to(env[o], shape), dtype=d))
                     for d, o in outs)

    kernel.calls = calls
    kernel.source = (in_params, out_params, operation, name)
    return kernel
