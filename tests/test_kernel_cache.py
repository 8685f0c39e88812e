"""The disk cache of compiled CPU kernels: private, verified, safe to fill at once.

Two kinds of entry: a directory of numba's cache files for each numba
function (whole graphs, LU and random kernels: `_in_process` builds one), and
one file of machine code for each fused kernel LLVM compiles directly
(`fgrad.compiler.native`: what jit's kernels tier, `_run`, leaves)."""
import os
import stat
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")

import logging  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

from fgrad.compiler import kernel_cache  # noqa: E402

_SOURCE = textwrap.dedent("""
    def kernel(n, in0, out0):
        for i in range(n):
            out0[i] = np.float64(np.tanh(in0[i]) * 2.0)
        return ()
""")
_SIGNATURE = numba.types.Tuple(())(numba.types.intp, numba.float64[::1], numba.float64[::1])


def _in_process(cache, monkeypatch, caplog):
    """Load or build the small kernel here; say which happened."""
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(cache))
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="fgrad.jit"):
        fn = kernel_cache.load_or_build(_SOURCE, _SIGNATURE)
    x, out = np.linspace(-1, 1, 5), np.empty(5)
    fn(5, x, out)
    np.testing.assert_allclose(out, np.tanh(x) * 2.0, rtol=1e-15)
    return "loaded" if "from the disk cache" in caplog.text else "built"

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
    # fused kernels, not a whole-graph function (tests/test_whole_graph.py)
    env = dict(os.environ, FGRAD_KERNEL_CACHE=str(cache), FGRAD_JIT_FUSE="1",
               FGRAD_JIT_WHOLE_GRAPH="0")
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


@pytest.mark.parametrize("damage", ["truncate", "corrupt", "foreign", "no manifest"])
def test_a_damaged_entry_is_detected_and_rebuilt(tmp_path, monkeypatch, caplog, damage):
    cache = tmp_path / "kernels"
    assert _in_process(cache, monkeypatch, caplog) == "built"
    assert _in_process(cache, monkeypatch, caplog) == "loaded"
    (entry,) = _entries(cache)
    folder = cache / entry
    data = [folder / "__pycache__" / n for n in os.listdir(folder / "__pycache__")
            if n.endswith(".nbc")][0]
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:100])
    elif damage == "corrupt":
        blob = bytearray(data.read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        data.write_bytes(bytes(blob))
    elif damage == "foreign":       # a whole entry, but made for another kernel
        manifest = (folder / "MANIFEST").read_text()
        (folder / "MANIFEST").write_text(manifest.replace(entry, "0" * len(entry)))
    else:
        (folder / "MANIFEST").unlink()
    assert not kernel_cache.verify(str(folder), entry)
    assert _in_process(cache, monkeypatch, caplog) == "built"
    assert "corrupt" in caplog.text
    assert kernel_cache.verify(str(folder), entry)      # whole again
    assert _in_process(cache, monkeypatch, caplog) == "loaded"


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


def test_an_alias_finds_an_entry_without_numba_and_a_bad_one_finds_none(tmp_path, monkeypatch):
    # the whole-graph tier asks, before numba is loaded, whether its function
    # is on disk (fgrad.compiler.tiers): only a whole entry holding that
    # source, named by an intact alias file, counts
    cache = tmp_path / "kernels"
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(cache))
    alias = kernel_cache.alias_key(_SOURCE, "intp, float64[1d C], float64[1d C]")
    assert alias != kernel_cache.alias_key(_SOURCE, "intp, float32[1d C], float32[1d C]")
    assert not kernel_cache.is_cached_as(alias, _SOURCE)            # an empty cache
    kernel_cache.load_or_build(_SOURCE, _SIGNATURE, alias=alias)
    assert kernel_cache.is_cached_as(alias, _SOURCE)
    assert not kernel_cache.is_cached_as(alias, _SOURCE + "# another kernel\n")
    named = cache / (alias + ".alias")
    key = named.read_text().strip()
    for damage in [b"", b"not a key", b"\xff" * 40, b"f" * 40]:    # the last names no entry
        named.write_bytes(damage)
        assert not kernel_cache.is_cached_as(alias, _SOURCE)
    named.write_text(key)
    assert kernel_cache.is_cached_as(alias, _SOURCE)
    (cache / key / "MANIFEST").unlink()                             # a stale alias
    assert not kernel_cache.is_cached_as(alias, _SOURCE)
    kernel_cache.load_or_build(_SOURCE, _SIGNATURE, alias=alias)     # rebuilt, named again
    assert kernel_cache.is_cached_as(alias, _SOURCE)
