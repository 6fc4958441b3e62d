"""Benchmark: Prefect's orchestration overhead per cycle, on PostgreSQL against SQLite.

One recrawl cycle over 1,000 sandbox hosts (``--pages-per-host`` each) with one
``host:<h>`` tag per host (``host_shards=0``: 25 batches of 40 tags), and for reference with
16 shard tags, against a real ``prefect server start`` on a throwaway PostgreSQL cluster
(Debian's package, ``flows.evaluation.scale.postgres``) and against one on SQLite, in the
same run. Each cycle runs in a fresh process (``--one``) on a fresh data root; the sandbox
web is its own process. Per cycle: the flow's wall time, the union of the task bodies
(plan, split, limits, batches, commit, content, report), the orchestration overhead (flow
body minus task bodies: task runs, slot acquisition, futures) as a share of the flow body,
the slot calls (``tasks.fetch.batch_slots``: API clients built, acquisitions, 423 answers,
seconds in the calls), TLS contexts built in the flow process, and CPU seconds of the flow
process, the Prefect server and PostgreSQL.

    .venv/bin/python benchmarks/bench_orchestration.py [--hosts 1000] [--pages-per-host 10]

Needs ``apt-get install -y postgresql`` (skips PostgreSQL with a message without it).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_cycle import BOOTSTRAP, FETCH, start_sandbox, union  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)


def one_cycle(root: Path, manifest: dict[str, Any], shards: int) -> dict[str, Any]:
    """Run one cycle in this process (PREFECT_API_URL set by the caller); its figures."""
    import ssl

    contexts = [0]
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        contexts[0] += 1
        return real(*args, **kwargs)

    ssl.create_default_context = counting  # what every Prefect API client builds
    import pandas as pd

    from flows.recrawl import recrawl_flow
    from tasks.fetch.batch_slots import process_slots
    from tasks.store.catalog import CatalogStore

    urls = manifest["page_urls"]
    CatalogStore(root).upsert(
        pd.DataFrame({"url": urls, "host": [urlsplit(u).netloc for u in urls]})
    )
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    result = recrawl_flow(
        root=str(root),
        budget=float(len(urls)),
        cycle=0,
        at=START,
        fetch=FETCH,
        slices=BOOTSTRAP,
        host_shards=shards,
    )
    call_s = time.perf_counter() - started
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    windows = [(s, e) for _, s, e in result["task_windows"]]
    named = {name: e - s for name, s, e in result["task_windows"]}
    batches = [(s, e) for name, s, e in result["task_windows"] if name.startswith("batch-")]
    stats = process_slots().stats
    return {
        "rows": result["rows"],
        "batches": result["batches"],
        "failed": len(result["failed_batches"]),
        "call_s": call_s,
        "flow_s": result["flow_s"],
        "bodies_s": union(windows),
        "fetch_s": union(batches),
        "limits_s": named.get("limits", 0.0),
        "flow_cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
        "tls_contexts": contexts[0],
        "slot_clients": stats.clients,
        "acquisitions": stats.acquisitions,
        "refusals": stats.refusals,
        "slot_api_s": stats.api_s,
        "slot_wait_s": stats.wait_s,
    }


def run_child(api_url: str, root: Path, manifest_path: Path, shards: int) -> dict[str, Any]:
    from flows.evaluation.scale.server import server_env

    env = server_env(root.parent / f"{root.name}-client-home")
    env.update(PREFECT_API_URL=api_url, PREFECT_LOGGING_LEVEL="WARNING")
    done = subprocess.run(
        [sys.executable, __file__, "--one", str(root), str(manifest_path), str(shards)],
        env=env,
        capture_output=True,
        check=False,
        timeout=3600,
        cwd=REPO,
    )
    lines = done.stdout.decode().strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the cycle failed ({done.returncode}):\n{done.stderr.decode()[-3000:]}")
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages-per-host", type=int, default=10)
    parser.add_argument("--shards", type=int, default=16, help="the shard-tag reference run")
    parser.add_argument(
        "--one", nargs=3, metavar=("ROOT", "MANIFEST", "SHARDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        root, manifest_path, shards = args.one
        figures = one_cycle(Path(root), json.loads(Path(manifest_path).read_text()), int(shards))
        print(json.dumps(figures))
        return 0

    from flows.evaluation.scale.postgres import PostgresCluster, have_postgres
    from flows.evaluation.scale.server import PrefectServer, group_cpu_seconds

    folder = Path(tempfile.mkdtemp(prefix="bench-orch-"))
    sandbox, manifest = start_sandbox(args.hosts, args.pages_per_host, folder)
    manifest_path = folder / "manifest.json"
    manifest_path.write_text(json.dumps(manifest))
    pages = len(manifest["page_urls"])
    print(
        f"orchestration: one cycle of {pages:,} pages over {args.hosts:,} sandbox hosts, "
        f"per database: one host:<h> tag per host, then {args.shards} shard tags"
    )
    results: dict[tuple[str, int], dict[str, Any]] = {}
    databases = ["sqlite", "postgres"] if have_postgres() else ["sqlite"]
    if "postgres" not in databases:
        print("  (no PostgreSQL: apt-get install -y postgresql; SQLite only)")
    try:
        for database in databases:
            cluster = PostgresCluster() if database == "postgres" else None
            try:
                if cluster is not None:
                    cluster.start()
                url = cluster.url if cluster is not None else None
                with PrefectServer(folder / f"server-{database}", url) as server:
                    for run, shards in enumerate((0, 0, args.shards)):
                        pg_pid = cluster.postmaster_pid() if cluster is not None else None
                        before = (
                            server.cpu_seconds(),
                            group_cpu_seconds(pg_pid) if pg_pid else 0.0,
                        )
                        root = folder / f"root-{database}-{run}"
                        figures = run_child(server.api_url, root, manifest_path, shards)
                        figures["server_cpu_s"] = server.cpu_seconds() - before[0]
                        figures["db_cpu_s"] = (
                            group_cpu_seconds(pg_pid) - before[1] if pg_pid else 0.0
                        )
                        results[(database, run)] = figures
                        _print(database, run, shards, figures)
            finally:
                if cluster is not None:
                    cluster.close()
    finally:
        sandbox.terminate()
        sandbox.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    _summary(results, args.shards)
    return 0


def _overhead(f: dict[str, Any]) -> float:
    return float(f["flow_s"] - f["bodies_s"])


def _label(run: int, shards: int) -> str:
    if run == 0:
        return "host tags, first run (creates the limits)"
    return "host tags" if shards == 0 else f"{shards} shard tags"


def _print(database: str, run: int, shards: int, f: dict[str, Any]) -> None:
    tags = _label(run, shards)
    share = _overhead(f) / f["flow_s"]
    print(
        f"\n{database}, {tags}: {f['rows']:,} rows, {f['batches']} batches "
        f"({f['failed']} failed)\n"
        f"  flow body {f['flow_s']:.1f} s (call {f['call_s']:.1f} s), task bodies "
        f"{f['bodies_s']:.1f} s, fetching {f['fetch_s']:.1f} s, host limits "
        f"{f['limits_s']:.1f} s\n"
        f"  orchestration overhead {_overhead(f):.2f} s = {share:.1%} of the cycle\n"
        f"  slots: {f['acquisitions']} acquisitions, {f['refusals']} refused (423), "
        f"{f['slot_api_s']:.2f} s in the calls, {f['slot_clients']} API client(s); "
        f"TLS contexts built in the flow process: {f['tls_contexts']}\n"
        f"  CPU: flow process {f['flow_cpu_s']:.1f} s, Prefect server {f['server_cpu_s']:.1f} s, "
        f"PostgreSQL {f['db_cpu_s']:.1f} s"
    )


def _summary(results: dict[tuple[str, int], dict[str, Any]], shards: int) -> None:
    print("\nsummary (overhead = flow body - task bodies, share of the flow body):")
    for (database, run), f in results.items():
        tags = _label(run, 0 if run < 2 else shards)
        share = _overhead(f) / f["flow_s"]
        limits = f"host limits {f['limits_s']:5.1f} s"
        print(f"  {database:<9} {tags:<42} {_overhead(f):6.2f} s {share:6.1%}  {limits}")
    pg, lite = results.get(("postgres", 1)), results.get(("sqlite", 1))
    if pg and lite:
        ratio = _overhead(pg) / max(_overhead(lite), 1e-9)
        server = (pg["server_cpu_s"] + pg["db_cpu_s"]) / max(lite["server_cpu_s"], 1e-9)
        print(
            f"  host tags (limits existing), PostgreSQL / SQLite: overhead {ratio:.2f}x, "
            f"flow body {pg['flow_s'] / lite['flow_s']:.2f}x, server CPU {server:.2f}x "
            "(PostgreSQL's own included); target: overhead under 10% of the cycle"
        )


if __name__ == "__main__":
    raise SystemExit(main())
