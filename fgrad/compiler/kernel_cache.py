"""The disk cache of compiled code: machine code kept between processes.

Kernels and programs LLVM compiles (`fgrad.compiler.native`) are kept in a
per-user directory, so a second process loads them instead of compiling:

- the directory is ``$FGRAD_KERNEL_CACHE`` if set (``0`` or ``off`` turns the
  disk cache off), else ``$XDG_CACHE_HOME/fgrad/kernels`` (``~/.cache/...``);
  it is created with mode 0700, and a directory that is not the user's own,
  or that others may read or write, is not used;
- one file per compiled function, its machine code behind the SHA-256 of
  its key and itself (`read_object`, `write_object`), named by a key its caller makes
  of what the code depends on (the IR, the CPU, LLVM's version, the BLAS
  provider);
- a file is checked before it is used: a truncated or corrupt one is deleted,
  and the code compiled again;
- a file is written under a temporary name and renamed into place in one
  step, so two processes filling the cache at once each compile, one rename
  wins, and nobody ever reads half a file.
"""
import hashlib
import logging
import os
import tempfile

CACHE_ENV = "FGRAD_KERNEL_CACHE"
_OBJECT_SUFFIX = ".o"
_log = logging.getLogger("fgrad.jit")


def cache_dir():
    """The disk cache's directory (created private), or None when it is off or
    unsafe to use.

    >>> root = cache_dir()
    >>> root is None or os.stat(root).st_mode & 0o777 == 0o700
    True
    """
    configured = os.environ.get(CACHE_ENV)
    if configured is not None and configured.strip().lower() in ("0", "off", "false", "no"):
        return None
    if configured:
        root = os.path.abspath(os.path.expanduser(configured))
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
            os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "fgrad", "kernels")
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        info = os.stat(root)
    except OSError as error:
        _log.warning("fgrad.jit: kernel cache %s unusable (%s); compiling in memory",
                     root, error)
        return None
    if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o077):
        _log.warning("fgrad.jit: kernel cache %s is not private to this user (owner "
                     "%d, mode %o); compiling in memory. Remove it or set %s.",
                     root, info.st_uid, info.st_mode & 0o777, CACHE_ENV)
        return None
    return root


def read_object(key):
    """The bytes `write_object` kept under ``key`` (a hex digest), or None
    when the disk cache is off, holds none, or holds a damaged file (which
    is then deleted)."""
    root = cache_dir()
    if root is None:
        return None
    path = os.path.join(root, key + _OBJECT_SUFFIX)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    digest, body = data[:64], data[64:]
    if digest != _object_digest(key, body):
        _log.warning("fgrad.jit: kernel cache file %s is incomplete or corrupt; "
                     "compiling it again", path)
        try:
            os.remove(path)
        except OSError:
            pass                        # removed by another process already
        return None
    return body


def write_object(key, body):
    """Keep ``body`` (bytes) under ``key`` in the disk cache, if it is on;
    a file another process wrote under it meanwhile is replaced whole."""
    root = cache_dir()
    if root is None:
        return
    _replace_file(root, key + _OBJECT_SUFFIX, _object_digest(key, body) + body)


def _object_digest(key, body):
    # of the key too: a file renamed to another key's name (machine code for
    # another IR) is discarded, never loaded: LLVM trusts an object file, and
    # a function of another signature would crash the process
    return hashlib.sha256(key.encode() + b"\n" + body).hexdigest().encode()


def _replace_file(root, name, data):
    """Write ``data`` (bytes) to ``root/name``: under a temporary name, then
    renamed over whatever is there, in one step."""
    handle, staging = tempfile.mkstemp(prefix=f".build-{name[:12]}-", dir=root)
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        os.replace(staging, os.path.join(root, name))
    except OSError as error:
        _log.warning("fgrad.jit: could not keep %s in %s (%s)", name, root, error)
        try:
            os.remove(staging)
        except OSError:
            pass
