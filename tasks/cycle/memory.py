"""Process memory policy for the big vectorized passes.

glibc hands every large freed block (over 32 MiB at most) back to the operating system,
so each new array of a multi-million-page pass is faulted in afresh, page by page. On
virtual machines a first-touch fault is expensive (measured here: about 10 us per 4 KiB,
which made faulting, not arithmetic, most of the estimation time at 10 million pages).
Keeping freed memory in the process heap (up to 2 GiB free at its top) lets the next
array reuse it. The cost: the process keeps most of its peak resident size until it
exits, which suits batch runs (the CLI and each Prefect flow run, a process of its own).
Library functions never call this; the entry points do.

Every thread allocates from the one main heap (one malloc arena): each worker thread of
the estimate's blocks otherwise gets an arena of its own, whose 64 MiB heaps glibc unmaps
when they empty whatever the trim threshold, so each block's arrays were faulted in afresh
(10 M pages planned, load 6-8, alternating: 49.4 -> 41.8 s of CPU, peak 6.4 -> 6.0 GiB,
medians of 3; the big vectorized passes allocate too seldom for one arena's lock to matter).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
#: free memory kept at the heap's top before glibc trims it: mallopt takes a C int, so the
#: largest is 2 GiB - 1 (``1 << 40``, passed before, reached glibc masked to 0: a trim at
#: every free, each next array faulted in afresh)
_KEEP_TOP = (1 << 31) - 1


def keep_freed_memory() -> bool:
    """Tell glibc to serve large blocks from the heap, trim it only past 2 GiB free at its
    top and keep one arena for every thread; True if applied."""
    try:
        # glibc's own soname first: ``find_library`` runs ``ldconfig -p`` in a subprocess
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        name = ctypes.util.find_library("c")
        if not name:
            return False
        try:
            libc = ctypes.CDLL(name)
        except OSError:
            return False
    try:
        mallopt = libc.mallopt
    except AttributeError:  # not glibc (musl, macOS): nothing to tune
        return False
    ok = (
        bool(mallopt(_M_MMAP_MAX, 0))
        and bool(mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(_KEEP_TOP)))
        and bool(mallopt(_M_ARENA_MAX, 1))
    )
    log.debug("glibc keeps freed memory: %s", ok)
    return ok
