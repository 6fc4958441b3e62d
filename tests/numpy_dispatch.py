"""Which SIMD code numpy dispatches to: exp, log and friends may round differently per level.

``python -m tests.numpy_dispatch LEVEL`` exits 0 if numpy would dispatch to ``LEVEL``
(e.g. ``X86_V4``, numpy >= 2.4's name for the AVX-512 family) on this CPU under the
current ``NPY_DISABLE_CPU_FEATURES``, 1 if not; the Makefile's numerics passes use it to
skip a cap that changes nothing here.
"""

from __future__ import annotations

import os
import sys

import numpy as np


def dispatched() -> list[str] | None:
    """The dispatch targets numpy uses (None where this numpy does not say)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2, or the private names moved
        return None
    return [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]


def describe() -> str:
    """One line: numpy's version, SIMD baseline, the levels in use, and any cap set."""
    try:
        from numpy._core._multiarray_umath import __cpu_baseline__
    except ImportError:
        return f"numpy {np.__version__}"
    used = dispatched() or []
    disabled = os.environ.get("NPY_DISABLE_CPU_FEATURES", "")
    return (
        f"numpy {np.__version__} SIMD: baseline {' '.join(__cpu_baseline__) or '-'}, "
        f"dispatched {' '.join(used) or 'none beyond the baseline'}"
        + (f" (NPY_DISABLE_CPU_FEATURES={disabled})" if disabled else "")
    )


if __name__ == "__main__":
    used = dispatched()
    sys.exit(0 if used is None or sys.argv[1] in used else 1)
