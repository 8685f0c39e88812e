"""Compiling fused CPU kernels with numba, and keeping them on disk.

`load_or_build` turns a kernel's Python source into a numba function compiled
for one signature (GIL released, NumPy's error model). A compilation is kept
in a per-user directory, so a second process loads it instead of compiling:

- the directory is ``$FGRAD_KERNEL_CACHE`` if set (``0`` or ``off`` turns the
  disk cache off), else ``$XDG_CACHE_HOME/fgrad/kernels`` (``~/.cache/...``);
  it is created with mode 0700, and a directory that is not the user's own,
  or that others may read or write, is not used;
- one entry per kernel, a directory named by the SHA-256 of its source, its
  signature and the numba, Python and machine versions. It holds the source
  file, numba's own cache files for it, and a ``MANIFEST`` that fgrad writes
  last, with that key and the SHA-256 of every other file;
- an entry is loaded only when its manifest names the same key and every
  checksum matches. A truncated, corrupt or foreign entry is moved aside and
  deleted, and the kernel is compiled again — numba never reads its files;
- an entry is built in a private temporary directory and renamed into place
  in one step, so two processes filling the cache at once each compile, one
  rename wins, and nobody ever sees half an entry;
- an entry's key needs numba imported (its version, the signature's types);
  a caller that must know whether an entry exists before paying numba's
  start-up names it also by an `alias_key` (numba's installed version read
  from its metadata, the signature in words): `load_or_build` then leaves a
  file ``<alias>.alias`` naming the entry, which `is_cached_as` reads.

Kernels LLVM compiles directly (`fgrad.compiler.native`) are kept as one file
each, machine code behind the SHA-256 of its key and itself (`read_object`,
`write_object`), under the same rules: checked before it is used, discarded
when it does not match, written under a temporary name and renamed.
"""
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import uuid

import numpy as np

CACHE_ENV = "FGRAD_KERNEL_CACHE"
_MANIFEST = "MANIFEST"
_ALIAS_SUFFIX = ".alias"
_FORMAT = 1
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


def start_numba():
    """Import numba and fill its CPU target's registries, the start-up every
    process that compiles or loads a kernel pays once; returns the seconds it
    took, 0.0 when done before. `fgrad.compiler.tiers` calls it on the
    compile thread, so that ``import fgrad`` and the first calls never pay it.

    >>> import importlib.util
    >>> importlib.util.find_spec("numba") is None or start_numba() >= 0.0
    True
    """
    first = _numba_start_up.cache_info().currsize == 0
    seconds = _numba_start_up()
    return seconds if first else 0.0


@functools.lru_cache(maxsize=1)
def _numba_start_up():
    start = time.perf_counter()
    import numba  # noqa: F401
    from numba.core.registry import cpu_target
    cpu_target.target_context.refresh()
    return time.perf_counter() - start


def entry_key(source, signature):
    """The name of a kernel's cache entry: what its compiled code depends on
    (40 hex digits of a SHA-256)."""
    import numba
    text = "\n".join([f"format {_FORMAT}", f"numba {numba.__version__}",
                      f"python {sys.version}", f"machine {platform.machine()}",
                      f"signature {signature}", source])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def alias_key(source, described):
    """A name for ``source`` compiled for the signature ``described`` (its
    types in words, as exact as the signature) that, unlike the entry's own
    key, needs no numba imported; None when numba is not installed.

    >>> key = alias_key("def kernel(): pass", "float64[2d C]")
    >>> key is None or (len(key) == 46 and key.startswith("alias-"))
    True
    """
    version = _installed_numba()
    if version is None:
        return None
    text = "\n".join([f"format {_FORMAT}", f"numba {version}", f"python {sys.version}",
                      f"machine {platform.machine()}", f"described {described}", source])
    return "alias-" + hashlib.sha256(text.encode()).hexdigest()[:40]


@functools.lru_cache(maxsize=1)
def _installed_numba():
    try:
        return importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return None


def is_cached_as(alias, source):
    """Whether the disk cache holds a valid entry for ``source`` under the
    `alias_key` ``alias``, checked without importing numba: the alias file
    names an entry, the entry is whole and holds ``source``. A missing or
    damaged alias file, or one naming an entry gone or changed, says False.

    >>> is_cached_as("alias-" + "0" * 40, "def kernel(): pass")    # doctest: +SKIP
    False
    """
    root = cache_dir()
    if root is None or alias is None:
        return False
    try:
        with open(os.path.join(root, alias + _ALIAS_SUFFIX), "rb") as f:
            key = f.read(64).decode("ascii").strip()
        if not re.fullmatch("[0-9a-f]{40}", key):
            return False
        entry = os.path.join(root, key)
        with open(os.path.join(entry, "kernel.py"), encoding="utf-8") as f:
            same = f.read() == _kernel_file(source)
    except (OSError, UnicodeDecodeError):
        return False
    return same and verify(entry, key)


def _write_alias(root, alias, key):
    """Leave ``<alias>.alias`` naming the entry ``key``."""
    _replace_file(root, alias + _ALIAS_SUFFIX, (key + "\n").encode())


def _kernel_file(source):
    return "import numpy as np\n\n" + source


def load_or_build(source, signature, keep_module=False, linked=None, alias=None):
    """The numba function for ``source`` compiled for ``signature``: from the
    disk cache when a valid entry exists, else compiled (and stored). Used by
    `fgrad.compiler.cpu_fusion` and `fgrad.compiler.whole_graph`, which write
    the sources. ``keep_module=True`` leaves the kernel's module in
    ``sys.modules``: code that calls back into Python (numba's objmode) looks
    it up there at run time. ``linked`` maps names the source calls but does
    not define to the numba functions they stand for (compiled already): the
    source must identify each (its cache key is the text). ``alias``: its
    `alias_key`, if `is_cached_as` is to find it."""
    root = cache_dir()
    if root is None:
        return _compile(_module_from_text(source, linked), signature, cache=False)
    key = entry_key(source, signature)
    entry = os.path.join(root, key)
    fn = None
    if os.path.isdir(entry):
        if verify(entry, key):
            fn = _compile_file(entry, key, signature, keep_module, linked)
            _log.debug("fgrad.jit: kernel %s loaded from the disk cache", key)
        else:
            _discard(root, entry)
    if fn is None:
        fn = _build(root, entry, key, source, signature, keep_module, linked)
    if alias is not None:
        _write_alias(root, alias, key)
    return fn


def _compile(module, signature, cache):
    import numba
    return numba.njit(signature, nogil=True, error_model="numpy", cache=cache)(
        module.kernel)


def _module_from_text(source, linked=None):
    namespace = {"np": np, **(linked or {})}
    exec(compile(source, "<fgrad cpu kernel>", "exec"), namespace)

    class Module:
        kernel = namespace["kernel"]
    return Module


def _compile_file(directory, key, signature, keep_module=False, linked=None):
    """Compile (or load from numba's cache files) the kernel in ``directory``."""
    # the module's name is the same in every process: numba's cached code
    # refers to it, and looks it up in sys.modules while loading
    name = f"fgrad_kernel_{key}"
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, "kernel.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        for called, function in (linked or {}).items():
            setattr(module, called, function)
        fn = _compile(module, signature, cache=True)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if not keep_module:
        sys.modules.pop(name, None)
    return fn


def _files(directory):
    """Every file under ``directory`` but the manifest, relative, sorted."""
    found = []
    for folder, _, names in os.walk(directory):
        for name in names:
            path = os.path.relpath(os.path.join(folder, name), directory)
            if path != _MANIFEST:
                found.append(path)
    return sorted(found)


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def verify(entry, key):
    """Whether ``entry`` is complete and fgrad's own for ``key``.

    >>> verify("/nonexistent/entry", "0" * 40)
    False
    """
    try:
        with open(os.path.join(entry, _MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        files = _files(entry)
        return (isinstance(manifest, dict) and manifest.get("format") == _FORMAT
                and manifest.get("key") == key
                and manifest.get("files") == {p: _digest(os.path.join(entry, p))
                                              for p in files}
                and "kernel.py" in files and len(files) > 1)
    except (OSError, ValueError, UnicodeDecodeError):
        return False


def _discard(root, entry):
    _log.warning("fgrad.jit: kernel cache entry %s is incomplete or corrupt; "
                 "compiling it again", entry)
    trash = os.path.join(root, f".trash-{uuid.uuid4().hex}")
    try:
        os.rename(entry, trash)         # atomic: nobody loads it from now on
    except OSError:
        return                          # already moved by another process
    shutil.rmtree(trash, ignore_errors=True)


def _build(root, entry, key, source, signature, keep_module=False, linked=None):
    staging = tempfile.mkdtemp(prefix=f".build-{key[:12]}-", dir=root)
    try:
        with open(os.path.join(staging, "kernel.py"), "w", encoding="utf-8") as f:
            f.write(_kernel_file(source))
        fn = _compile_file(staging, key, signature, keep_module, linked)
        manifest = {"format": _FORMAT, "key": key,
                    "files": {p: _digest(os.path.join(staging, p))
                              for p in _files(staging)}}
        with open(os.path.join(staging, _MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        try:
            os.rename(staging, entry)   # in one step; fails if another won
        except OSError:
            pass
        _log.debug("fgrad.jit: kernel %s compiled", key)
        return fn
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_OBJECT_SUFFIX = ".o"


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
