import os
import tempfile

# Prefect must never touch the user's profile or phone home from tests.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prefect-home-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
