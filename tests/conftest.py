import atexit
import os
import shutil
import tempfile

from tests.numpy_dispatch import describe

# Prefect must never touch the user's profile or phone home from tests.
if "PREFECT_HOME" not in os.environ:
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="prefect-home-")
    # ours: removed when the session ends (each pytest run left one in the temp folder)
    atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


def pytest_sessionstart(session):
    """Say which SIMD code numpy dispatches to (exp/log may round differently), even -q."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(describe())
