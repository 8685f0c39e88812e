"""The disk cache of compiled code: private, verified, safe to fill at once.

One file of machine code for each function LLVM compiles (`fgrad.compiler.native`:
what jit's kernels tier, `_run`, leaves)."""
import logging
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from fgrad.compiler import kernel_cache


# one small kernel, compiled in a fresh interpreter: the process reports
# whether it loaded the entry or compiled it
_CHILD = textwrap.dedent("""
    import io, logging
    import numpy as np, fgrad, fgrad.numpy as fnp
    log = io.StringIO()
    logging.getLogger("fgrad.jit").addHandler(logging.StreamHandler(log))
    logging.getLogger("fgrad.jit").setLevel(logging.DEBUG)
    f = fgrad.jit(lambda x: fnp.sum(fnp.tanh(x * 3.0) + x))
    x = np.linspace(-1, 1, 7)
    assert np.isclose(f(x), np.sum(np.tanh(x * 3.0) + x))
    print("loaded" if "from the disk cache" in log.getvalue() else
          "built" if "compiled" in log.getvalue() else "neither")
""")


def _run(cache, n=1):
    # fused kernels, not a program
    env = dict(os.environ, FGRAD_KERNEL_CACHE=str(cache), FGRAD_JIT_FUSE="1",
               FGRAD_JIT_PROGRAM="0")
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


def _entries(cache):
    return [e for e in os.listdir(cache) if not e.startswith(".")]


def _object_key(cache):
    (entry,) = _entries(cache)
    assert entry.startswith("native-") and entry.endswith(".o")
    return entry[:-len(".o")]


def test_the_directory_is_private_and_a_second_process_loads_instead_of_compiling(
        tmp_path, monkeypatch):
    cache = tmp_path / "kernels"
    assert _run(cache) == ["built"]
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    key = _object_key(cache)
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(cache))
    assert kernel_cache.read_object(key)[:4] == b"\x7fELF" or sys.platform != "linux"
    assert _run(cache) == ["loaded"]


@pytest.mark.parametrize("damage", ["truncate", "corrupt", "empty"])
def test_a_damaged_machine_code_file_is_detected_and_rebuilt(tmp_path, monkeypatch, caplog,
                                                             damage):
    cache = tmp_path / "kernels"
    assert _run(cache) == ["built"]
    key = _object_key(cache)
    path = cache / (key + ".o")
    whole = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(whole[:len(whole) // 2])
    elif damage == "corrupt":
        blob = bytearray(whole)
        blob[len(blob) // 2] ^= 0xFF
        path.write_bytes(bytes(blob))
    else:
        path.write_bytes(b"")
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(cache))
    with caplog.at_level(logging.WARNING, logger="fgrad.jit"):
        assert kernel_cache.read_object(key) is None
    assert "corrupt" in caplog.text and not path.exists()
    assert _run(cache) == ["built"]
    assert path.read_bytes() == whole       # the same machine code, whole again
    assert _run(cache) == ["loaded"]


def test_two_processes_filling_the_cache_at_once_leave_one_whole_entry(tmp_path, monkeypatch):
    cache = tmp_path / "kernels"
    # each compiles, or loads what the other finished first
    assert set(_run(cache, n=2)) <= {"built", "loaded"}
    key = _object_key(cache)
    assert not [e for e in os.listdir(cache) if e.startswith(".")]   # no leftovers
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(cache))
    assert kernel_cache.read_object(key) is not None                # checksum whole
    assert _run(cache) == ["loaded"]


def test_a_directory_others_can_write_is_not_used(tmp_path, monkeypatch, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(shared))
    assert kernel_cache.cache_dir() is None
    assert "not private" in caplog.text
    monkeypatch.setenv(kernel_cache.CACHE_ENV, "off")
    assert kernel_cache.cache_dir() is None
