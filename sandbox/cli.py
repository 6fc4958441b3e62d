"""Serve the sandbox web in the foreground: ``python -m sandbox`` and ``recrawl sandbox``.

For benchmarks the server must run in its own process (a client in the same process would
share its core), so this writes a JSON manifest once every address is bound: the port, the
API/proxy URL, the address rule and every page URL. A benchmark starts
``python -m sandbox --manifest FILE``, waits for the file, and stops the server with SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from sandbox.behaviour import HostBehaviour
from sandbox.clock import SimClock
from sandbox.log import RequestLog
from sandbox.server import SandboxServer
from sandbox.web import SandboxWeb, host_address

logger = logging.getLogger(__name__)

ADDRESS_RULE = "127.0.{1 + i // 250}.{1 + i % 250}"
_MAX_LISTED_URLS = 1_000_000


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``python -m sandbox`` and ``recrawl sandbox``."""
    parser.add_argument("--hosts", type=int, default=20, help="number of hosts (default 20)")
    parser.add_argument("--pages-per-host", type=int, default=50, help="pages per host")
    parser.add_argument("--port", type=int, default=0, help="one port for all hosts (0: free)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--manifest", type=Path, help="write a JSON manifest here once serving")
    parser.add_argument(
        "--days-per-second",
        type=float,
        default=0.0,
        help="simulated days that pass per real second (0: the clock stays still)",
    )
    parser.add_argument(
        "--start", help="simulated start time, ISO 8601 (default 2026-01-01T00:00:00Z)"
    )
    parser.add_argument("--latency", type=float, default=0.0, help="latency of every host, s")
    parser.add_argument("--no-gzip", action="store_true", help="never gzip responses")
    parser.add_argument(
        "--log-max-entries", type=int, default=200_000, help="request log size (oldest dropped)"
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip rendering every page once before serving (done by default)",
    )


def web_from_args(args: argparse.Namespace) -> SandboxWeb:
    """The web the options describe (bad values raise ValueError naming the option)."""
    if args.hosts < 1:
        raise ValueError(f"--hosts must be >= 1, got {args.hosts}")
    if args.pages_per_host < 1:
        raise ValueError(f"--pages-per-host must be >= 1, got {args.pages_per_host}")
    if args.days_per_second < 0:
        raise ValueError(f"--days-per-second must be >= 0, got {args.days_per_second}")
    start = None
    if args.start:
        try:
            start = datetime.fromisoformat(args.start.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"--start is not an ISO 8601 time: {args.start!r}") from exc
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
    clock = SimClock(start, speed=args.days_per_second * 86_400.0)
    default = HostBehaviour(latency_s=args.latency, gzip=not args.no_gzip)
    return SandboxWeb.generate(
        args.hosts, args.pages_per_host, seed=args.seed, default=default, clock=clock
    )


def manifest(server: SandboxServer) -> dict[str, object]:
    """What a separate process needs to use a running sandbox."""
    web = server.web
    urls: list[str] = []
    if sum(web.page_counts) <= _MAX_LISTED_URLS:
        urls = [
            f"http://{server.netlocs[i]}{path}"
            for i in range(web.n_hosts)
            for path in web.page_paths(i)
        ]
    return {
        "pid": os.getpid(),
        "port": server.port,
        "hosts": web.n_hosts,
        "pages_per_host": list(web.page_counts),
        "seed": web.seed,
        "api_url": server.gateway_url,
        "proxy_url": server.gateway_url,
        "host_address_rule": ADDRESS_RULE,
        "page_path_rule": "/p/{j} for j in range(pages_per_host[i])",
        "page_urls": urls,
    }


async def serve_foreground(
    web: SandboxWeb,
    port: int,
    *,
    manifest_path: Path | None = None,
    log_max_entries: int = 200_000,
    show_hosts: int = 0,
    warmup: bool = False,
) -> None:
    """Serve until SIGINT or SIGTERM; write the manifest (atomically) once bound and warm."""
    server = SandboxServer(web, port, log=RequestLog(log_max_entries))
    await server.start()
    try:
        if warmup and server.responder is not None:
            started = time.perf_counter()
            pages = server.responder.warm()
            logger.info("rendered %d pages in %.1f s", pages, time.perf_counter() - started)
        if manifest_path is not None:
            tmp = manifest_path.with_name(manifest_path.name + ".tmp")
            tmp.write_text(json.dumps(manifest(server)))
            tmp.replace(manifest_path)
        if show_hosts:
            _print_overview(server, show_hosts)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await server.close()
        print(f"sandbox: served {len(server.log)} logged requests; stopped", file=sys.stderr)


def _print_overview(server: SandboxServer, count: int) -> None:
    web = server.web
    speed = web.clock.speed / 86_400.0
    print(
        f"sandbox web: {web.n_hosts} hosts x {web.page_counts[0]} pages on port {server.port}; "
        f"simulated time {web.clock.now().isoformat()}, {speed:g} days per second"
    )
    print(f"scraping API: {server.gateway_url}/fetch?url=<url>   proxy: {server.gateway_url}")
    for i in range(min(count, web.n_hosts)):
        base = f"http://{host_address(i)}:{server.port}"
        print(f"  host {i}: {base}/  {base}/robots.txt  {base}/sitemap.xml  {base}/p/0")
    if web.n_hosts > count:
        print(f"  ... host i at http://{ADDRESS_RULE}:{server.port}/")
    print("Ctrl-C to stop.", flush=True)


def raise_open_file_limit(needed: int) -> None:
    """One socket per host: lift the soft descriptor limit toward the hard one if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        new = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox", description="Serve the sandbox web on loopback."
    )
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        web = web_from_args(args)
        raise_open_file_limit(args.hosts + 4_096)
        asyncio.run(
            serve_foreground(
                web,
                args.port,
                manifest_path=args.manifest,
                log_max_entries=args.log_max_entries,
                show_hosts=0 if args.manifest else 5,
                warmup=not args.no_warmup,
            )
        )
    except (ValueError, OSError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 2
    return 0
