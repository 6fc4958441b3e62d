import os
import tempfile

from tests.numpy_dispatch import describe

# Prefect must never touch the user's profile or phone home from tests.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prefect-home-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


def pytest_sessionstart(session):
    """Say which SIMD code numpy dispatches to (exp/log may round differently), even -q."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(describe())
