"""The faulty sandbox in a process of its own, so the crawler under test gets a core to itself.

``python -m flows.evaluation.load.server_process --hosts N --pages P --share S --layout L
--seed K --workdir DIR`` serves the web of ``faulty_sandbox.load_web`` on loopback, writes
``DIR/manifest.json`` (port, every host's netloc, the failing hosts) once every page has
been rendered once, drains its request log into compact rows twice a second, and on SIGUSR1
writes the rows gathered so far to ``DIR/log-<n>.npz`` (n = 0, 1, ...) and forgets them.
SIGTERM stops it. ``ServerProcess`` is the caller's side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from flows.evaluation.load.faulty_sandbox import (
    CompactLog,
    FaultScale,
    FaultyServer,
    LogRow,
    fault_plan,
    load_web,
    log_row,
)
from tasks.store.durable import durable_file, durable_write_text

ROOT = Path(__file__).resolve().parents[3]


class ServerProcess:
    """Start the server process, read its log in pieces, stop it."""

    def __init__(
        self,
        workdir: Path,
        *,
        hosts: int,
        pages: int,
        share: float = 0.1,
        layout: str = "spread",
        seed: int = 8,
        scale: FaultScale | None = None,
        start_timeout_s: float = 600.0,
    ) -> None:
        self.workdir = workdir
        self.scale = scale or FaultScale()
        self.dumps = 0
        cmd = [
            sys.executable,
            "-m",
            "flows.evaluation.load.server_process",
            *("--hosts", str(hosts), "--pages", str(pages), "--share", str(share)),
            *("--layout", layout, "--seed", str(seed), "--workdir", str(workdir)),
            *("--scale", json.dumps(self.scale.__dict__)),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
        manifest = workdir / "manifest.json"
        deadline = time.monotonic() + start_timeout_s
        while not manifest.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"the sandbox server did not start: {' '.join(cmd)}")
            time.sleep(0.1)
        data = json.loads(manifest.read_text())
        self.port: int = data["port"]
        self.netlocs: list[str] = data["netlocs"]
        self.faults = {int(i): kind for i, kind in data["faults"].items()}

    def urls(self, hosts: list[int], pages: int) -> list[str]:
        return [f"http://{self.netlocs[i]}/p/{j}" for i in hosts for j in range(pages)]

    def dump_log(self, timeout_s: float = 120.0) -> CompactLog:
        """Every request logged since the last dump (the server drains twice a second)."""
        path = self.workdir / f"log-{self.dumps}.npz"
        self.dumps += 1
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the sandbox server did not dump its log")
            time.sleep(0.05)
        log = CompactLog.load(str(path))
        path.unlink()
        return log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _serve(server: FaultyServer, workdir: Path, faults: dict[int, str]) -> None:
    await server.start()
    assert server.responder is not None
    server.responder.warm()
    index = {netloc: i for i, netloc in enumerate(server.netlocs)}
    rows: list[LogRow] = []
    dumps = 0

    def drain() -> None:
        entries = server.log.entries()
        server.log.clear()  # the server appends from this thread too: nothing slips between
        rows.extend(log_row(e, index) for e in entries)

    def dump() -> None:
        nonlocal dumps
        drain()
        with durable_file(workdir / f"log-{dumps}.npz") as handle:
            CompactLog.from_rows(rows).save(handle)
        rows.clear()
        dumps += 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, dump)
    manifest = {"port": server.port, "netlocs": server.netlocs, "faults": faults}
    durable_write_text(workdir / "manifest.json", json.dumps(manifest))
    try:
        while not stop.is_set():
            drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        await server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the faulty sandbox web.")
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--pages", type=int, required=True)
    parser.add_argument("--share", type=float, default=0.1)
    parser.add_argument("--layout", default="spread")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--scale", default="{}", help="FaultScale fields as JSON")
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args(argv)
    from sandbox.cli import raise_open_file_limit

    raise_open_file_limit(args.hosts + 4_096)  # one listening socket per host
    scale = FaultScale(**json.loads(args.scale))
    faults = fault_plan(args.hosts, args.share, args.layout)
    web = load_web(args.hosts, args.pages, faults, seed=args.seed, scale=scale)
    server = FaultyServer(web, faults, scale=scale, seed=args.seed)
    asyncio.run(_serve(server, args.workdir, faults))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
