"""Where a value came from: the user's line behind an equation or an error.

Error messages (a concretization under jit) and NaN hunting (`debug_nans`) name
the line of the user's code that applied a primitive. That line is the
innermost stack frame outside fgrad's own files, which live in two folders: the
package and, in a source checkout, ``primitives/`` beside it.
"""
import linecache
import os
import sys

from fgrad.core.trace import Tracer

FGRAD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRIMITIVES_DIR = os.path.join(os.path.dirname(FGRAD_DIR), "primitives")


def _is_fgrads(filename):
    # fgrad's files, and the code jit generates (codegen's "<fgrad.jit ...>")
    return filename.startswith((FGRAD_DIR, PRIMITIVES_DIR, "<fgrad."))


def user_source():
    """``(filename, lineno)`` of the innermost frame outside fgrad's own code."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not _is_fgrads(name):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


def user_stacklevel():
    """The ``stacklevel`` that points a warning issued by the caller at the
    user's line, however many of fgrad's frames lie between."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_fgrads(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def describe_source(source):
    """``source`` (from `user_source`) as ``file:line: `code```, for messages."""
    if source is None:
        return "an unknown line"
    filename, lineno = source
    code = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}" + (f": `{code}`" if code else "")


def _where_called():
    source = user_source()
    return "" if source is None else f" at {describe_source(source)}"


Tracer.where_called = staticmethod(_where_called)
