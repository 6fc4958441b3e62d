"""CPU per page of the fetch engine against bare aiohttp, bare httpx and Scrapy, on one nginx.

    .venv/bin/python benchmarks/bench_transports.py [--hosts 1000] [--pages 20]
        [--concurrency 64] [--repeat 3] [--page-kib 20] [--clients engine,aiohttp,httpx,scrapy]

Starts Debian's nginx (``/usr/sbin/nginx``) on loopback with a generated configuration in a
temporary folder: one ``listen`` per host address (``127.1.x.y``, so ``--hosts`` distinct
hosts on one port), static pages of about ``--page-kib`` KiB each (distinct content) and a
``robots.txt`` that disallows a path nobody asks for. The page URLs of every host are
shuffled once and every client fetches all of them at the same concurrency, each run in a
fresh process of its own:

- ``engine``: ``tasks.fetch.engine.fetch_batch_sync`` with production politeness except the
  delays (zero): one request per host at a time, robots.txt fetched and obeyed, the address
  guard, the response guards, BLAKE2b record hashing, history rows;
- ``aiohttp``: ``asyncio.gather`` behind a semaphore over one ``aiohttp.ClientSession``
  (the ceiling: no robots.txt, no politeness, no bookkeeping);
- ``httpx``: the same over one ``httpx.AsyncClient`` (httpx's own transport);
- ``scrapy``: a minimal spider, ``CONCURRENT_REQUESTS`` the same, one request per host,
  robots.txt obeyed (skipped with a message when Scrapy is not installed:
  ``pip install -e '.[bench]'``).

CPU per page is the client process's own user + system time (``resource.getrusage``) over
the fetch, divided by pages; pages/s is pages over wall time; nginx's own CPU per page is
read from ``/proc``. Where the machine allows, nginx is pinned to one core and each client
to another (``os.sched_setaffinity``). Every figure is the median of ``--repeat`` runs and
is shown as a ratio to bare aiohttp measured in the same invocation: on a shared machine the
ratios are the figures to trust. ``--base-tree DIR`` adds the client ``base``: the engine of
another checkout (a ``git worktree`` of the commit before a change, its own code on
``PYTHONPATH``), run in turn with the others on the same nginx, for a same-run before/after.
Nothing leaves 127.0.0.0/8.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ("engine", "aiohttp", "httpx", "scrapy")
NGINX_PATHS = ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
USER_AGENT = "recrawler-bench/0.1 (+https://example.invalid/recrawler)"

NGINX_CONFIG = """
daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log error;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; multi_accept on; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    keepalive_timeout 65;
    open_file_cache max=1000;
    types {{ text/html html; text/plain txt; }}
    default_type application/octet-stream;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    server {{
{listens}
        root {prefix}/www;
        etag on;
    }}
}}
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})


# ---------------------------------------------------------------------- clients


def run_engine(urls: list[str], concurrency: int) -> dict[str, object]:
    from tasks.fetch.engine import fetch_batch_sync
    from tasks.fetch.settings import FetchSettings

    settings = FetchSettings(
        concurrency=concurrency,
        delay_factor=0.0,
        min_delay_s=0.0,
        max_delay_s=0.0,
        allowed_networks=("127.0.0.0/8",),  # nginx is on loopback
    )
    cpu, wall = _cpu(), time.perf_counter()
    result = fetch_batch_sync(urls, settings=settings)
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    outcomes = result.metrics.outcomes
    return {"seconds": wall, "cpu_s": cpu, "ok": outcomes.get("ok", 0), "outcomes": outcomes}


def run_aiohttp(urls: list[str], concurrency: int) -> dict[str, object]:
    import aiohttp

    async def main() -> int:
        semaphore = asyncio.Semaphore(concurrency)
        connector = aiohttp.TCPConnector(limit=concurrency)
        headers = {"User-Agent": USER_AGENT}
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

            async def one(url: str) -> bool:
                async with semaphore, session.get(url) as response:
                    body = await response.read()
                    return response.status == 200 and bool(body)

            return sum(await asyncio.gather(*(one(u) for u in urls)))

    cpu, wall = _cpu(), time.perf_counter()
    ok = asyncio.run(main())
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    return {"seconds": wall, "cpu_s": cpu, "ok": ok}


def run_httpx(urls: list[str], concurrency: int) -> dict[str, object]:
    """Bare httpx with its own pool: ``bench_fetch.py``'s peer, the same code."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_fetch import run_bare

    return run_bare(urls, concurrency)


def run_scrapy(urls: list[str], concurrency: int) -> dict[str, object]:
    """The same spider as ``bench_fetch.py``'s (one request per host, robots.txt obeyed)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_fetch import run_scrapy as spider

    return spider(urls, concurrency)


RUNNERS = {
    "engine": run_engine,
    "aiohttp": run_aiohttp,
    "httpx": run_httpx,
    "scrapy": run_scrapy,
}


def missing_peer(name: str) -> str | None:
    """Why the peer ``name`` cannot run here, or None."""
    if name == "scrapy":
        try:
            import scrapy  # noqa: F401
        except ImportError:
            return (
                "scrapy skipped: Scrapy is not installed "
                "(pip install -e '.[bench]', or make bench-transports)"
            )
    return None


# ---------------------------------------------------------------------- nginx


def find_nginx() -> str | None:
    return shutil.which("nginx") or next((p for p in NGINX_PATHS if os.path.exists(p)), None)


def host_addresses(count: int) -> list[str]:
    """``count`` distinct loopback addresses, 127.1.0.1 onwards (x.y.0 and x.y.255 skipped)."""
    out = []
    for index in range(count):
        high, low = divmod(index, 254)
        out.append(f"127.1.{high}.{low + 1}")
    return out


def _port_free(addresses: list[str], port: int) -> bool:
    for address in addresses:
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True


def _free_port(addresses: list[str]) -> int:
    for _ in range(20):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if _port_free(addresses, port):
            return port
    raise RuntimeError("no port free on every host address")


def write_site(prefix: Path, pages: int, page_kib: int, seed: int) -> None:
    www = prefix / "www"
    (www / "p").mkdir(parents=True)
    (prefix / "tmp").mkdir()
    (www / "robots.txt").write_text("User-agent: *\nDisallow: /private/\n")
    rng = random.Random(seed)
    words = ["price", "stock", "item", "colour", "size", "review", "shipping", "offer"]
    for page in range(pages):
        parts = [f"<html><head><title>page {page}</title></head><body><h1>page {page}</h1>"]
        size = sum(len(p) for p in parts)
        while size < page_kib * 1024:
            text = " ".join(rng.choice(words) for _ in range(12))
            block = f"<p>{text} {rng.randrange(10**6)}</p>\n"
            parts.append(block)
            size += len(block)
        parts.append("</body></html>\n")
        (www / "p" / f"{page}.html").write_text("".join(parts))


def start_nginx(
    nginx: str, prefix: Path, addresses: list[str], cpu: int | None
) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port(addresses)
    listens = "\n".join(f"        listen {a}:{port};" for a in addresses)
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONFIG.format(prefix=prefix, listens=listens))
    proc = subprocess.Popen(
        [nginx, "-p", str(prefix), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(proc.pid, {cpu})
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection((addresses[-1], port), timeout=0.2).close()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"nginx did not start: {err.strip()}") from None
            time.sleep(0.05)


def process_cpu(pid: int) -> float:
    """User + system seconds of process ``pid`` so far (from /proc; 0.0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# ---------------------------------------------------------------------- driver


def run_client(
    name: str,
    urls_file: Path,
    concurrency: int,
    cpu: int | None,
    profile: Path | None = None,
    base_tree: Path | None = None,
) -> dict[str, object]:
    """One client run in a fresh process; ``base`` is the engine of ``base_tree``'s checkout."""
    root = base_tree if name == "base" and base_tree is not None else ROOT
    cmd = [
        sys.executable,
        str(root / "benchmarks" / "bench_transports.py"),
        "--client",
        "engine" if name == "base" else name,
        "--urls-file",
        str(urls_file),
        "--concurrency",
        str(concurrency),
    ]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"client {name} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _cores() -> tuple[int | None, int | None]:
    """(nginx's core, the client's core), or (None, None) where pinning is not possible."""
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    return cores[0], cores[1]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=20, help="pages per host")
    parser.add_argument("--page-kib", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--client", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--urls-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile",
        type=Path,
        help="write a cProfile of each client run to DIR/<client>-<run>.prof (slows it)",
    )
    parser.add_argument(
        "--base-tree",
        type=Path,
        help="also run the engine of this checkout (client 'base') for a same-run A/B",
    )
    args = parser.parse_args()

    if args.client:  # inside a client process
        _pin(args.cpu)
        urls = args.urls_file.read_text().split()
        if args.profile:
            import cProfile

            with cProfile.Profile() as profile:
                result = RUNNERS[args.client](urls, args.concurrency)
            profile.dump_stats(str(args.profile))
        else:
            result = RUNNERS[args.client](urls, args.concurrency)
        result["pages"] = len(urls)
        print(json.dumps(result))
        return 0

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown client(s): {', '.join(unknown)}")
    if args.base_tree is not None:
        if not (args.base_tree / "benchmarks" / "bench_transports.py").is_file():
            parser.error(f"--base-tree {args.base_tree}: no benchmarks/bench_transports.py there")
        args.base_tree = args.base_tree.resolve()
        clients.insert(0, "base")
    if not 1 <= args.hosts <= 254 * 250 or args.pages < 1 or args.repeat < 1:
        parser.error("--hosts must be 1..63500, --pages and --repeat at least 1")
    nginx = find_nginx()
    if nginx is None:
        print("bench_transports: nginx not installed (apt-get install nginx)", file=sys.stderr)
        return 2
    for name in list(clients):
        why = missing_peer(name)
        if why is not None:
            print(why)
            clients.remove(name)
    server_cpu, client_cpu = _cores()
    addresses = host_addresses(args.hosts)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-transports-") as tmp:
        prefix = Path(tmp)
        write_site(prefix, args.pages, args.page_kib, args.seed)
        server, port = start_nginx(nginx, prefix, addresses, server_cpu)
        try:
            urls = [f"http://{a}:{port}/p/{p}.html" for a in addresses for p in range(args.pages)]
            random.Random(args.seed).shuffle(urls)
            urls_file = prefix / "urls.txt"
            urls_file.write_text("\n".join(urls))
            pinned = (
                f"nginx on core {server_cpu}, clients on core {client_cpu}"
                if client_cpu is not None
                else "no pinning (fewer than 2 cores allowed)"
            )
            print(
                f"nginx {nginx}: {args.hosts} hosts x {args.pages} pages of ~{args.page_kib} KiB "
                f"= {len(urls)} URLs (shuffled), concurrency {args.concurrency}, "
                f"{args.repeat} run(s) per client, {pinned}; load average {load:.1f}"
            )
            results: dict[str, list[dict[str, object]]] = {c: [] for c in clients}
            for run in range(args.repeat):
                # Alternate the order: no client always runs right after the same one.
                for name in clients if run % 2 == 0 else clients[::-1]:
                    before = process_cpu(server.pid)
                    profile = None
                    if args.profile:
                        args.profile.mkdir(parents=True, exist_ok=True)
                        profile = args.profile / f"{name}-{run + 1}.prof"
                    result = run_client(
                        name, urls_file, args.concurrency, client_cpu, profile, args.base_tree
                    )
                    result["server_cpu_s"] = process_cpu(server.pid) - before
                    results[name].append(result)
                    seconds, cpu_s = float(result["seconds"]), float(result["cpu_s"])
                    print(
                        f"  run {run + 1} {name:<8} {len(urls) / seconds:8.0f} pages/s "
                        f"{1000 * cpu_s / len(urls):7.3f} ms CPU/page  ok={result['ok']}"
                        + (f"  {result['outcomes']}" if "outcomes" in result else ""),
                        flush=True,
                    )
        finally:
            server.terminate()
            server.wait(timeout=30)
    report(results, len(urls), args, os.getloadavg()[0])
    return 0


def report(
    results: dict[str, list[dict[str, object]]],
    pages: int,
    args: argparse.Namespace,
    load: float,
) -> None:
    def per_page(rs: list[dict[str, object]], key: str) -> float:
        return median([1000 * float(r[key]) / pages for r in rs])

    rate = {n: median([pages / float(r["seconds"]) for r in rs]) for n, rs in results.items()}
    cpu = {n: per_page(rs, "cpu_s") for n, rs in results.items()}
    server = {n: per_page(rs, "server_cpu_s") for n, rs in results.items()}
    base = "aiohttp" if "aiohttp" in results else None
    print(f"\nmedians of {args.repeat}; ratios to bare aiohttp in this run")
    print("client    pages/s   ms CPU/page   CPU vs aiohttp   pages/s vs aiohttp   nginx ms/page")
    for name in results:
        cpu_ratio = f"{cpu[name] / cpu[base]:.2f}x" if base else "-"
        rate_ratio = f"{rate[name] / rate[base]:.2f}x" if base else "-"
        print(
            f"{name:<8} {rate[name]:8.0f}   {cpu[name]:11.3f}   {cpu_ratio:>14}   "
            f"{rate_ratio:>18}   {server[name]:13.3f}"
        )
    print(f"load average at the end: {load:.1f}")
    print(
        "\nreproduce: .venv/bin/python benchmarks/bench_transports.py "
        f"--hosts {args.hosts} --pages {args.pages} --page-kib {args.page_kib} "
        f"--concurrency {args.concurrency} --repeat {args.repeat} "
        f"--clients {','.join(c for c in results if c != 'base')}"
        + (f" --base-tree {args.base_tree}" if args.base_tree else "")
    )


if __name__ == "__main__":
    raise SystemExit(main())
