"""Fetch throughput: the engine vs a bare httpx ceiling vs Scrapy, on the same sandbox web.

    .venv/bin/python benchmarks/bench_fetch.py [--hosts 1000] [--pages 20] [--concurrency 64]
                                               [--repeat 2] [--clients engine,bare,scrapy]

Starts the sandbox web in its own process (``python -m sandbox``, one loopback address per
host, no latency), shuffles its page URLs once, and has each client fetch all of them at the
same concurrency, each client in a fresh process of its own:

- ``engine``: ``tasks.fetch.engine.fetch_batch`` with politeness delays set to zero (still one
  request per host at a time, robots.txt fetched and obeyed, guard rails on);
- ``bare``: ``asyncio.gather`` over one ``httpx.AsyncClient`` behind a semaphore (the ceiling:
  no robots.txt, no politeness, no bookkeeping), httpx's own transport;
- ``bare-aio``: the same httpx client on ``httpx-aiohttp``'s transport (what the engine used
  until it talked to aiohttp directly; ``benchmarks/bench_transports.py`` compares the engine
  with bare aiohttp itself, on nginx);
- ``scrapy``: a minimal Scrapy spider with the same concurrency, one request per host at a
  time and robots.txt obeyed, like the engine (Scrapy's own defaults otherwise).

Pages/s is pages over wall time; CPU per page is the client process's own user + system time
(``resource.getrusage``) over the fetch, divided by pages. Needs Scrapy (``pip install -e
'.[bench]'``). The server and the client each get one of the machine's two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ("engine", "bare", "bare-aio", "scrapy")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------- clients


def run_engine(urls: list[str], concurrency: int) -> dict[str, object]:
    from sandbox import SANDBOX_NETWORKS
    from tasks.fetch.engine import fetch_batch_sync
    from tasks.fetch.settings import FetchSettings

    settings = FetchSettings(
        concurrency=concurrency,
        delay_factor=0.0,
        min_delay_s=0.0,
        max_delay_s=0.0,
        allowed_networks=SANDBOX_NETWORKS,  # the sandbox is on loopback
    )
    cpu, wall = _cpu(), time.perf_counter()
    result = fetch_batch_sync(urls, settings=settings)
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    outcomes = result.metrics.outcomes
    return {"seconds": wall, "cpu_s": cpu, "ok": outcomes.get("ok", 0), "outcomes": outcomes}


def run_bare(urls: list[str], concurrency: int, *, aio: bool = False) -> dict[str, object]:
    import httpx

    async def main() -> int:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        transport = None
        if aio:
            from httpx_aiohttp import AiohttpTransport

            transport = AiohttpTransport(limits=limits, trust_env=False)
        semaphore = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(limits=limits, timeout=30.0, transport=transport) as client:

            async def one(url: str) -> bool:
                async with semaphore:
                    response = await client.get(url)
                    return response.status_code == 200 and bool(response.content)

            return sum(await asyncio.gather(*(one(u) for u in urls)))

    cpu, wall = _cpu(), time.perf_counter()
    ok = asyncio.run(main())
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    return {"seconds": wall, "cpu_s": cpu, "ok": ok}


def run_scrapy(urls: list[str], concurrency: int) -> dict[str, object]:
    import scrapy
    from scrapy.crawler import CrawlerProcess

    class PagesSpider(scrapy.Spider):  # type: ignore[misc]
        name = "pages"

        async def start(self):  # type: ignore[no-untyped-def]
            for url in urls:
                yield scrapy.Request(url, callback=self.parse, dont_filter=True)

        def parse(self, response):  # type: ignore[no-untyped-def]
            return None

    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
            "DOWNLOAD_DELAY": 0,
            "ROBOTSTXT_OBEY": True,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "USER_AGENT": "recrawler-bench/0.1 (+https://example.invalid/recrawler)",
        }
    )
    crawler = process.create_crawler(PagesSpider)
    process.crawl(crawler)
    cpu, wall = _cpu(), time.perf_counter()
    process.start()
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    stats = crawler.stats.get_stats()
    ok = int(stats.get("downloader/response_status_count/200", 0)) - len(
        {u.split("/p/")[0] for u in urls}
    )  # minus one robots.txt per host
    return {"seconds": wall, "cpu_s": cpu, "ok": ok}


RUNNERS = {
    "engine": run_engine,
    "bare": run_bare,
    "bare-aio": lambda urls, concurrency: run_bare(urls, concurrency, aio=True),
    "scrapy": run_scrapy,
}


# ---------------------------------------------------------------------- driver


def start_sandbox(hosts: int, pages: int, workdir: Path) -> tuple[subprocess.Popen[bytes], dict]:
    manifest = workdir / "sandbox.json"
    cmd = [
        sys.executable,
        "-m",
        "sandbox",
        "--hosts",
        str(hosts),
        "--pages-per-host",
        str(pages),
        "--manifest",
        str(manifest),
        "--log-max-entries",
        "1000",
    ]
    server = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not manifest.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError("the sandbox server did not start")
        time.sleep(0.2)
    return server, json.loads(manifest.read_text())


def run_client(name: str, urls_file: Path, concurrency: int) -> dict[str, object]:
    cmd = [
        sys.executable,
        __file__,
        "--client",
        name,
        "--urls-file",
        str(urls_file),
        "--concurrency",
        str(concurrency),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"client {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=20, help="pages per host")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--client", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--urls-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.client:  # inside a client process
        urls = args.urls_file.read_text().split()
        result = RUNNERS[args.client](urls, args.concurrency)
        result["pages"] = len(urls)
        print(json.dumps(result))
        return 0

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown client(s): {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmp:
        workdir = Path(tmp)
        server, manifest = start_sandbox(args.hosts, args.pages, workdir)
        try:
            urls = list(manifest["page_urls"])
            random.Random(args.seed).shuffle(urls)
            urls_file = workdir / "urls.txt"
            urls_file.write_text("\n".join(urls))
            print(
                f"sandbox: {args.hosts} hosts x {args.pages} pages = {len(urls)} URLs "
                f"(shuffled), concurrency {args.concurrency}, {args.repeat} run(s) per client"
            )
            results: dict[str, list[dict[str, object]]] = {c: [] for c in clients}
            for run in range(args.repeat):
                for name in clients:
                    result = run_client(name, urls_file, args.concurrency)
                    results[name].append(result)
                    print(
                        f"  run {run + 1} {name:<7} {len(urls) / result['seconds']:8.0f} pages/s "
                        f"{1000 * result['cpu_s'] / len(urls):6.3f} ms CPU/page  ok={result['ok']}",
                        flush=True,
                    )
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
    report(results, len(urls), args)
    return 0


def report(
    results: dict[str, list[dict[str, object]]], pages: int, args: argparse.Namespace
) -> None:
    def median(values: list[float]) -> float:
        ordered = sorted(values)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    rate = {n: median([pages / float(r["seconds"]) for r in rs]) for n, rs in results.items()}
    cpu = {n: median([1000 * float(r["cpu_s"]) / pages for r in rs]) for n, rs in results.items()}
    print("\nclient   pages/s   ms CPU/page   (medians)")
    for name in results:
        print(f"{name:<8} {rate[name]:8.0f}   {cpu[name]:10.3f}")
    if "engine" in rate:
        for other in ("bare", "bare-aio", "scrapy"):
            if other in rate:
                print(
                    f"engine/{other}: {rate['engine'] / rate[other]:.2f}x pages/s, "
                    f"{cpu['engine'] / cpu[other]:.2f}x CPU/page"
                )
    print(
        "\nreproduce: .venv/bin/python benchmarks/bench_fetch.py "
        f"--hosts {args.hosts} --pages {args.pages} --concurrency {args.concurrency} "
        f"--repeat {args.repeat} --clients {','.join(results)}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
