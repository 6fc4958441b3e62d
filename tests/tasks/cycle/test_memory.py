"""``keep_freed_memory``: glibc keeps what the process frees (the next array reuses it)."""

import ctypes
import ctypes.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks.cycle import memory

_PROBE = textwrap.dedent(
    """
    import ctypes, ctypes.util
    from tasks.cycle.memory import keep_freed_memory
    assert keep_freed_memory()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.sbrk.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    block = libc.malloc(256 << 20)  # served from the heap (no mmap), at its top
    grown = libc.sbrk(0)
    libc.free(block)
    print(grown - libc.sbrk(0))  # bytes trimmed off the heap's top by the free
    """
)


def test_the_trim_threshold_fits_mallopts_int():
    # mallopt takes a C int: a larger value is masked (1 << 40 became 0, a trim at every free)
    assert ctypes.c_int(memory._KEEP_TOP).value == memory._KEEP_TOP > 256 << 20


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not ctypes.util.find_library("c"),
    reason="glibc's malloc only",
)
def test_a_freed_block_stays_in_the_heap():
    root = str(Path(memory.__file__).resolve().parents[2])  # this tree's tasks package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, env=env
    )
    assert int(done.stdout.strip()) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's soname")
def test_the_policy_starts_no_process(monkeypatch):
    """Every flow run applies it: ``ctypes.util.find_library`` would run ``ldconfig -p``."""

    def spawned(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", spawned)
    memory.keep_freed_memory()
