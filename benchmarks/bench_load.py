"""Load: a cycle's fetch of 100,000 pages over 2,000 sandbox hosts, a tenth of them failing.

    .venv/bin/python benchmarks/bench_load.py [--hosts 2000] [--pages 50] [--share 0.1]
        [--layout spread|grouped] [--small-hosts 500] [--parallel 4] [--max-hosts 40]
        [--window 60] [--delay-factor 1] [--runs small,healthy,failing]

One sandbox server process (``flows/evaluation/load/faulty_sandbox.py``: one loopback
address per host, all on one port) where every tenth host throttles (429 or 503 with an
enforced Retry-After) or fails (TCP resets, 500s, pages slower than the client's timeout),
and one fresh client process per run, each fetching a cycle through the cycle's own path
(catalog, plan, ``split_plan``, ``run_host_batch`` for ``parallel`` host batches at a time,
``commit_cycle``; ``flows/evaluation/load/cycle_run.py``). Runs, in one invocation:

- ``healthy``: only the healthy hosts (the baseline);
- ``failing``: every host, failing ones included (``--hosts`` x ``--pages`` pages);
- ``small``: the first ``--small-hosts`` hosts, failing ones included (a quarter of the
  pages by default), to show that peak memory does not grow with the cycle's size;
- ``failing-next``: the next cycle on ``failing``'s data root (its history), in a fresh
  process: the split now knows which hosts struggled (``tasks.cycle.host_record``) and packs them
  into batches of their own, after the others;
- ``failing-notail``: as ``failing`` with ``tail_host_share`` 0, so a batch keeps its
  active place until its last host is done (the behaviour before ``tasks.fetch.batch_slots``).

``--layout spread`` puts failing hosts in every host batch (failures nobody predicted);
``grouped`` puts them last in the cycle's packing order, so they fill batches of their own
(what packing by known host health would do). For each run: the client's peak RSS
(sampled every 50 ms, while fetching and with the commit) and outcomes;
from the server's request log, politeness for every host (concurrency over the limit, gaps
shorter than the pacing rule, Retry-After not waited; ``log_checks.py``) and the healthy
hosts' throughput (their pages answered 200 over the time from the run's start to the
last of them). Delays are scaled down about 20x from the defaults (``--min-delay`` 0.05 s
instead of 1 s, a 2 s timeout instead of 30 s, Retry-After of 2-3 s, a 60 s batch window)
so a run takes minutes; the pacing factor is 1, as in ``bench_cycle.py``; the server's
simulated clock stands still. Record hashes are BLAKE2b of the body (no extraction), and
WARC archiving is off: this measures fetching and batching.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

from flows.evaluation.load.faulty_sandbox import retry_after_by_host  # noqa: E402
from flows.evaluation.load.log_checks import (  # noqa: E402
    PacingRules,
    check_politeness,
    throughput,
)
from flows.evaluation.load.server_process import ServerProcess  # noqa: E402

RUNS = ("small", "healthy", "failing", "failing-next", "failing-notail")
SEED = 8  # the fetch settings' seed (jitter, probes)


# ---------------------------------------------------------------------- client process


def client(job_path: Path) -> int:
    """One cycle's fetch of the job's URLs in this fresh process; prints a JSON result."""
    from flows.evaluation.load.cycle_run import fetch_cycle, loopback_settings, prepare_cycle

    job = json.loads(job_path.read_text())
    urls = job["urls"]
    settings = loopback_settings(**job["settings"])
    keep = job.get("root") is not None  # a later run continues on this root's history
    root = Path(job["root"]) if keep else Path(tempfile.mkdtemp(prefix="bench-load-root-"))
    cycle = job.get("cycle", 0)
    specs = prepare_cycle(
        root, urls, cycle=cycle, max_urls=job["max_urls"], max_hosts=job["max_hosts"]
    )
    try:
        result = fetch_cycle(
            root, specs, settings, cycle=cycle, parallel=job["parallel"], window_s=job["window"]
        )
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    metrics = result.batch_metrics
    print(
        json.dumps(
            {
                "pages": len(urls),
                "batches": len(specs),
                "started": result.started,
                "fetch_s": result.fetch_s,
                "commit_s": result.commit_s,
                "rows": result.rows,
                "outcomes": result.outcomes,
                "failures": list(result.failures),
                "fetch_rss": result.fetch_rss_bytes,
                "peak_rss": result.peak_rss_bytes,
                "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "max_queue_depth": max((m["max_queue_depth"] for m in metrics), default=0),
                "admission_rejections": sum(m["admission_rejections"] for m in metrics),
                "retries": sum(m["retries"] for m in metrics),
                "batch_seconds": sorted(m["elapsed_s"] for m in metrics),
                "tail_seconds": sorted(
                    m["tail_at_s"] for m in metrics if m.get("tail_at_s") is not None
                ),
            }
        )
    )
    return 0


# ---------------------------------------------------------------------- driver


def fetch_settings(args: argparse.Namespace, *, tail: bool = True) -> dict[str, Any]:
    """The engine's settings scaled down ~20x (every other knob at its default)."""
    timeout = args.timeout
    return {
        "tail_host_share": args.tail_share if tail else 0.0,
        "concurrency": args.concurrency,
        "min_delay_s": args.min_delay,
        "max_delay_s": timeout,
        "delay_factor": args.delay_factor,
        "request_timeout_s": timeout,
        "connect_timeout_s": timeout,
        "robots_timeout_s": max(timeout, 5.0),  # a loaded client must not lose whole hosts
        "throttle_backoff_s": 3.0,
        "throttle_backoff_cap_s": 180.0,
        "retry_base_s": args.min_delay,
        "retry_cap_s": 3.0,
        "seed": SEED,
    }


def run_once(
    name: str, hosts: list[int], server: ServerProcess, args: argparse.Namespace
) -> dict[str, Any]:
    urls = server.urls(hosts, args.pages)
    root = server.workdir / "root-failing"  # the failing run's history, for failing-next
    job = {
        "root": str(root) if name in ("failing", "failing-next") else None,
        "cycle": 1 if name == "failing-next" else 0,
        "urls": urls,
        "settings": fetch_settings(args, tail=not name.endswith("-notail")),
        "parallel": args.parallel,
        "max_urls": args.max_urls,
        "max_hosts": args.max_hosts,
        "window": args.window,
    }
    job_path = server.workdir / f"job-{name}.json"
    job_path.write_text(json.dumps(job))
    server.dump_log()  # start the run with an empty log
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, __file__, "--client", str(job_path)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"run {name} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    log = server.dump_log()
    settings = fetch_settings(args)
    rules = PacingRules(
        min_delay_s=settings["min_delay_s"],
        max_delay_s=settings["max_delay_s"],
        delay_factor=settings["delay_factor"],
        host_limit=1,
        retry_after_s=retry_after_by_host(server.faults, server.scale),
    )
    politeness = check_politeness(log, rules)
    healthy = [i for i in hosts if i not in server.faults]
    rate = throughput(log, healthy, result["started"])
    result.update(
        name=name,
        hosts=len(hosts),
        failing_hosts=len(hosts) - len(healthy),
        healthy_pages=rate.pages,
        healthy_span_s=rate.span_s,
        healthy_pages_per_s=rate.pages_per_s,
        healthy_planned=len(healthy) * args.pages,
        politeness=politeness.summary(),
        violations=politeness.violations,
        repeats_after_reset=politeness.repeats_after_reset,
        violation_examples=list(politeness.examples),
        logged_requests=len(log),
    )
    return result


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace, wall: float) -> None:
    mb = 1024 * 1024
    print(
        "\nrun              hosts  failing   pages  fetch s  healthy ok     healthy pages/s"
        "  RSS MB fetching  + commit"
    )
    for name, r in results.items():
        print(
            f"{name:<16} {r['hosts']:5d}  {r['failing_hosts']:7d}  {r['pages']:6d}  "
            f"{r['fetch_s']:7.1f}  {r['healthy_pages']:6d}/{r['healthy_planned']:<6d}"
            f"  {r['healthy_pages_per_s']:11.0f}  {r['fetch_rss'] / mb:13.0f}"
            f"  {r['peak_rss'] / mb:8.0f}"
        )
    for name, r in results.items():
        print(f"\n{name}: outcomes {r['outcomes']}; retries {r['retries']}")
        print(f"  politeness: {r['politeness']}")
        for example in r["violation_examples"]:
            print(f"    {example}")
        print(
            f"  max queue depth {r['max_queue_depth']} (batch bound {args.max_urls} + robots), "
            f"admission rejections {r['admission_rejections']}; ru_maxrss "
            f"{r['maxrss'] / mb:.0f} MB; commit {r['commit_s']:.1f} s; "
            f"batches {r['batches']} (median {_median(r['batch_seconds']):.1f} s, "
            f"max {max(r['batch_seconds'], default=0):.1f} s); "
            f"{len(r['tail_seconds'])} reached their tail (median at "
            f"{_median(r['tail_seconds']):.1f} s)"
        )
        if r["failures"]:
            print(f"  FAILED batches: {r['failures'][:3]}")
    for run in ("failing", "failing-next", "failing-notail"):
        if "healthy" in results and run in results:
            ratio = results[run]["healthy_pages_per_s"] / results["healthy"]["healthy_pages_per_s"]
            print(
                f"\nhealthy hosts' throughput with failing hosts present ({run}) / without: "
                f"{ratio:.2f}"
            )
    if "small" in results and "failing" in results:
        small, big = results["small"], results["failing"]
        print(
            f"peak RSS while fetching, {big['pages']:,} pages / {small['pages']:,} pages: "
            f"{big['fetch_rss'] / small['fetch_rss']:.2f} (with the commit: "
            f"{big['peak_rss'] / small['peak_rss']:.2f})"
        )
    print(f"total wall time {wall:.0f} s")
    print(
        "\nreproduce: .venv/bin/python benchmarks/bench_load.py "
        f"--hosts {args.hosts} --pages {args.pages} --share {args.share} --layout {args.layout} "
        f"--small-hosts {args.small_hosts} --parallel {args.parallel} "
        f"--max-hosts {args.max_hosts} --max-urls {args.max_urls} --window {args.window} "
        f"--concurrency {args.concurrency} --delay-factor {args.delay_factor} "
        f"--min-delay {args.min_delay} --timeout {args.timeout} --tail-share {args.tail_share} "
        f"--runs {','.join(results)}"
    )


def _median(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--pages", type=int, default=50, help="pages per host")
    parser.add_argument("--share", type=float, default=0.1, help="share of failing hosts")
    parser.add_argument(
        "--layout",
        choices=("spread", "grouped"),
        default="spread",
        help="failing hosts in every batch (spread) or in batches of their own (grouped)",
    )
    parser.add_argument("--small-hosts", type=int, default=500, help="hosts of the small run")
    parser.add_argument(
        "--parallel", type=int, default=4, help="host batches fetching at full speed at once"
    )
    parser.add_argument("--max-hosts", type=int, default=40, help="hosts per batch")
    parser.add_argument("--max-urls", type=int, default=2000, help="URLs per batch")
    parser.add_argument("--window", type=float, default=60.0, help="batch window, s (0: none)")
    parser.add_argument("--concurrency", type=int, default=16, help="workers per batch")
    parser.add_argument("--min-delay", type=float, default=0.05)
    parser.add_argument(
        "--delay-factor",
        type=float,
        default=1.0,
        help="pacing gap / last duration (1, as bench_cycle; the default 10 multiplies the "
        "client's own scheduling lag on a loaded machine)",
    )
    parser.add_argument("--timeout", type=float, default=2.0, help="request timeout, s")
    parser.add_argument(
        "--tail-share",
        type=float,
        default=0.25,
        help="FetchSettings.tail_host_share of the runs with a tail (0 turns it off)",
    )
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--client", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        return client(args.client)
    if args.window == 0:
        args.window = None
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = sorted(set(runs) - set(RUNS))
    if unknown:
        parser.error(f"unknown run(s): {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    if "failing-next" in runs and "failing" not in runs[: runs.index("failing-next")]:
        parser.error("run failing-next continues the failing run's history: list failing first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on the way out
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        server = ServerProcess(
            Path(tmp), hosts=args.hosts, pages=args.pages, share=args.share, layout=args.layout
        )
        print(
            f"sandbox: {args.hosts} hosts x {args.pages} pages, {len(server.faults)} failing "
            f"({args.share:.0%}); {args.parallel} batches of <= {args.max_hosts} hosts at once",
            flush=True,
        )
        results: dict[str, dict[str, Any]] = {}
        try:
            for name in runs:
                if name == "healthy":
                    hosts = [i for i in range(args.hosts) if i not in server.faults]
                elif name == "small":
                    hosts = list(range(min(args.small_hosts, args.hosts)))
                else:
                    hosts = list(range(args.hosts))
                results[name] = run_once(name, hosts, server, args)
                r = results[name]
                print(
                    f"  {name}: {r['pages']:,} pages in {r['fetch_s']:.1f} s, healthy "
                    f"{r['healthy_pages_per_s']:.0f} pages/s, peak RSS fetching "
                    f"{r['fetch_rss'] / 2**20:.0f} MB, {r['violations']} politeness violations",
                    flush=True,
                )
        finally:
            server.stop()
    report(results, args, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
