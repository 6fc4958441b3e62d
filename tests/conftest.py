import os
import tempfile

# Prefect must never touch the user's profile or phone home from tests.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prefect-home-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


def pytest_sessionstart(session):
    """Say which SIMD code numpy dispatches to (exp/log may round differently), even -q."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(_numpy_dispatch())


def _numpy_dispatch() -> str:
    import numpy as np

    try:
        from numpy._core._multiarray_umath import (
            __cpu_baseline__,
            __cpu_dispatch__,
            __cpu_features__,
        )
    except ImportError:  # numpy < 2 or a private name moved: say what we can
        return f"numpy {np.__version__}"
    used = [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]
    disabled = os.environ.get("NPY_DISABLE_CPU_FEATURES", "")
    return (
        f"numpy {np.__version__} SIMD: baseline {' '.join(__cpu_baseline__) or '-'}, "
        f"dispatched {' '.join(used) or 'none beyond the baseline'}"
        + (f" (NPY_DISABLE_CPU_FEATURES={disabled})" if disabled else "")
    )
