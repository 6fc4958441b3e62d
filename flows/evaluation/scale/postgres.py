"""A throwaway PostgreSQL cluster for a test: Debian's binaries, a temporary folder, loopback.

``PostgresCluster()`` makes its own folder under ``/tmp`` (a pytest ``tmp_path`` sits below a
root-only folder the ``postgres`` user cannot enter), runs ``initdb`` into ``<folder>/data``
(trust authentication for local connections only: the socket directory is the folder
itself, and TCP listens on 127.0.0.1 at a free port, never the default 5432), ``pg_ctl
start`` and creates one database. ``close()`` (or leaving the ``with`` block, also when the
test failed) stops it with ``pg_ctl stop -m immediate``, kills the postmaster's process
group and removes the folder, so nothing outlives the test. PostgreSQL refuses to run as
root: as root, the cluster runs as the ``postgres`` user Debian's package creates (the
folder is handed to it).

``have_postgres()`` says whether the package is there (``apt-get install -y postgresql``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


DATABASE = "prefect"


def postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``pg_ctl``, if any."""
    root = Path("/usr/lib/postgresql")
    if not root.is_dir():
        return None
    found = [p / "bin" for p in root.iterdir() if (p / "bin" / "pg_ctl").exists()]
    return (
        max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
        if found
        else None
    )


class PostgresCluster:
    """One cluster, one database, one superuser; started by ``start()``, ended by ``close()``."""

    def __init__(self, bin_dir: Path | None = None) -> None:
        found = bin_dir or postgres_bin()
        if found is None:
            raise FileNotFoundError(
                "no PostgreSQL under /usr/lib/postgresql (apt-get install postgresql)"
            )
        self.bin = found
        self.folder = Path(tempfile.mkdtemp(prefix="recrawl-pg-", dir="/tmp"))
        self.data = self.folder / "data"
        self.socket_dir = self.folder  # short enough for a unix socket path (< 108 bytes)
        self.port = free_port()
        self.log = self.folder / "postgres.log"
        self._as_root = os.geteuid() == 0
        self.user = "postgres" if self._as_root else pwd.getpwuid(os.geteuid()).pw_name
        self._started = False

    # -- life cycle ------------------------------------------------------------------------
    def __enter__(self) -> PostgresCluster:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, timeout: float = 60) -> None:
        if self._as_root:
            entry = pwd.getpwnam(self.user)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            self.folder.chmod(0o700)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--auth=trust",  # local socket and 127.0.0.1 only (listen_addresses below)
            "--encoding=UTF8",
            "--no-sync",  # a throwaway cluster: no fsync of the catalog at creation
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.socket_dir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            str(int(timeout)),
            "start",
        )
        self._started = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", str(self.socket_dir), "-p", str(self.port)],
                capture_output=True,
                check=False,
            )
            if ready.returncode == 0:
                break
            time.sleep(0.2)
        else:
            raise TimeoutError(f"PostgreSQL not ready in {timeout} s:\n{self.log_text()}")
        self.psql(f"CREATE DATABASE {DATABASE}")

    def close(self) -> None:
        """Stop the server (immediate: a throwaway cluster), then kill whatever is left."""
        if not self._started:
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        self._started = False
        pid = self.postmaster_pid()
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "20", "stop")
        if pid is not None:  # pg_ctl starts the postmaster in a session of its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- use -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """SQLAlchemy URL for Prefect (asyncpg over TCP on loopback, no password: trust)."""
        return f"postgresql+asyncpg://{self.user}@127.0.0.1:{self.port}/{DATABASE}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        done = self._run(
            "psql",
            "-h",
            str(self.socket_dir),
            "-p",
            str(self.port),
            "-U",
            self.user,
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-c",
            sql,
        )
        return done

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        return None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def _run(self, program: str, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin / program), *args],
            capture_output=True,
            check=False,
            timeout=120,
            preexec_fn=self._demote(),
            cwd=self.folder,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "TZ": "UTC"},
        )
        output = (done.stdout + done.stderr).decode(errors="replace")
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} failed ({done.returncode}):\n{output}\n{self.log_text()}"
            )
        return done.stdout.decode(errors="replace")

    def _demote(self) -> Callable[[], None] | None:
        if not self._as_root:
            return None
        entry = pwd.getpwnam(self.user)

        def demote() -> None:
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)

        return demote


def have_postgres() -> bool:
    """Debian's package is installed (and, as root, its ``postgres`` user exists)."""
    if postgres_bin() is None:
        return False
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return os.geteuid() != 0
    return True
