"""Throughput of the sandbox web server, measured from a separate client process.

Starts ``python -m sandbox`` (1,000 hosts x 20 pages by default) in its own process, then
fetches every page in shuffled order with concurrency 64 and reports pages/s and CPU per page
for the client and for the server (read from /proc). Two clients:

- ``httpx``: a bare ``asyncio.gather`` over one ``httpx.AsyncClient`` (what the fetch engine
  is compared with); httpx is CPU-bound on its own core long before the server is.
- ``raw``: a minimal keep-alive HTTP/1.1 client on asyncio streams that takes one host at a
  time and fetches its pages over one connection (accepting gzip, not decoding it), to push
  the server toward its own limit.

The server's capacity on one core is ``pages / server CPU seconds``. Reproduce with::

    .venv/bin/python benchmarks/bench_sandbox.py [--hosts 1000] [--pages-per-host 20] \
        [--concurrency 64] [--client httpx|raw|both] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

_TICKS = os.sysconf("SC_CLK_TCK")


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _start_server(args: argparse.Namespace, manifest: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "sandbox",
        "--hosts",
        str(args.hosts),
        "--pages-per-host",
        str(args.pages_per_host),
        "--port",
        "0",
        "--manifest",
        str(manifest),
        "--log-max-entries",
        str(args.hosts * args.pages_per_host + 10),
    ]
    if args.no_gzip:
        command.append("--no-gzip")
    root = Path(__file__).resolve().parents[1]
    server = subprocess.Popen(command, cwd=root, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not manifest.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the sandbox server did not start (see python -m sandbox)")
        time.sleep(0.05)
    return server


async def _fetch_httpx(urls: list[str], concurrency: int) -> int:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
        semaphore = asyncio.Semaphore(concurrency)

        async def one(url: str) -> int:
            async with semaphore:
                response = await client.get(url)
                return response.status_code

        statuses = await asyncio.gather(*(one(u) for u in urls))
    return sum(s == 200 for s in statuses)


async def _fetch_raw(urls: list[str], concurrency: int) -> int:
    by_host: dict[str, list[str]] = {}
    for url in urls:
        parts = urlsplit(url)
        by_host.setdefault(parts.netloc, []).append(parts.path)
    queue: asyncio.Queue[tuple[str, list[str]]] = asyncio.Queue()
    for item in by_host.items():
        queue.put_nowait(item)
    ok = 0
    request = "GET {path} HTTP/1.1\r\nHost: {netloc}\r\nAccept-Encoding: gzip\r\n\r\n"

    async def worker() -> None:
        nonlocal ok
        while not queue.empty():
            netloc, paths = queue.get_nowait()
            host, port = netloc.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            for path in paths:
                writer.write(request.format(path=path, netloc=netloc).encode())
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                ok += head.startswith(b"HTTP/1.1 200")
            writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ok


def _measure(name: str, urls: list[str], concurrency: int, server_pid: int) -> dict[str, float]:
    fetch = _fetch_httpx if name == "httpx" else _fetch_raw
    server_cpu0, client_cpu0 = _process_cpu(server_pid), time.process_time()
    start = time.perf_counter()
    ok = asyncio.run(fetch(urls, concurrency))
    wall = time.perf_counter() - start
    server_cpu = _process_cpu(server_pid) - server_cpu0
    client_cpu = time.process_time() - client_cpu0
    return {
        "pages": len(urls),
        "ok": ok,
        "seconds": wall,
        "pages_per_s": len(urls) / wall,
        "client_cpu_ms_per_page": 1e3 * client_cpu / len(urls),
        "server_cpu_ms_per_page": 1e3 * server_cpu / len(urls),
        "server_pages_per_cpu_s": len(urls) / server_cpu if server_cpu else float("inf"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1_000)
    parser.add_argument("--pages-per-host", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--client", choices=["httpx", "raw", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-gzip", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    clients = ["httpx", "raw"] if args.client == "both" else [args.client]
    with tempfile.TemporaryDirectory() as tmp:
        manifest_path = Path(tmp) / "sandbox.json"
        server = _start_server(args, manifest_path)
        try:
            manifest = json.loads(manifest_path.read_text())
            urls = list(manifest["page_urls"])
            random.Random(args.seed).shuffle(urls)
            print(
                f"sandbox: {manifest['hosts']} hosts x {args.pages_per_host} pages on port "
                f"{manifest['port']} (pid {server.pid}); concurrency {args.concurrency}, "
                f"gzip {'off' if args.no_gzip else 'on'}"
            )
            for _ in range(args.rounds):
                for name in clients:
                    r = _measure(name, urls, args.concurrency, server.pid)
                    print(
                        f"{name:>5}: {r['pages']} pages ({r['ok']} ok) in {r['seconds']:.2f} s = "
                        f"{r['pages_per_s']:,.0f} pages/s; client CPU "
                        f"{r['client_cpu_ms_per_page']:.3f} ms/page; server CPU "
                        f"{r['server_cpu_ms_per_page']:.3f} ms/page "
                        f"(= {r['server_pages_per_cpu_s']:,.0f} pages per server CPU-second)"
                    )
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    print(
        "reproduce: .venv/bin/python benchmarks/bench_sandbox.py "
        f"--hosts {args.hosts} --pages-per-host {args.pages_per_host} "
        f"--concurrency {args.concurrency} --client {args.client}"
        + (" --no-gzip" if args.no_gzip else "")
    )


if __name__ == "__main__":
    main()
