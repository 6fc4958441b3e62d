"""The production shape on one machine: Prefect on PostgreSQL, three workers, 1,000 hosts.

A throwaway PostgreSQL cluster (Debian's package, a temporary folder, a free loopback port;
``tests.scaleout.postgres``) holds the database of a real ``prefect server start`` (its
concurrency leases in the filesystem lease storage). Three ``prefect worker start``
processes, each as a machine of its own would run it (its own ``PREFECT_HOME``, working
directory and process tree; only the API URL, the checkout and the data roots are shared),
pull from one process work pool. Two crawls over the same 1,000 sandbox hosts (two
deployments of the recrawl flow, their own data roots) run their daily cycle at once, each
batch holding one ``tag:host:<h>`` slot per host (no shard tags). While both are fetching,
the worker running crawl A is SIGKILLed with its flow run: its batches' slots stay taken
until their leases expire (60 s, the shortest the server accepts; Prefect's repossessor
every 2 s here); crawl A's next run, taken by the idle third worker, resumes the cycle, and nobody
repairs anything by hand.

From the sandbox's own request log, across all workers: never two requests to one host at
once, never less than the pacing gap between the end of an answer and the host's next
request; every planned page of both crawls committed exactly once; no slot left taken.

``make scale`` runs it (marked ``scale``, left out of ``make test``): several minutes on
this 2-core machine, most of it the server's start-up on PostgreSQL (migrations) and
processes importing Prefect.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from uuid import UUID

import pytest
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.workers.process import ProcessWorker

from flows.recrawl import recrawl_flow
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.host_limits import HOST_TAG_PREFIX, read_all_limits
from tasks.store.history import HistoryStore
from tests.flows.conftest import BOOTSTRAP, import_catalog
from tests.scaleout.host_checks import agent_window, host_politeness
from tests.scaleout.postgres import PostgresCluster, have_postgres
from tests.scaleout.stack import REPO, PrefectStack

pytestmark = [
    pytest.mark.slow,
    pytest.mark.scale,
    pytest.mark.skipif(not have_postgres(), reason="needs Debian's postgresql package"),
]

START = datetime(2026, 1, 1, tzinfo=UTC)
HOSTS, PAGES = 1_000, 2
LATENCY_S = 0.02
#: The pacing gap (min_delay_s = max_delay_s), longer than a slot takes to change hands.
GAP_S = 0.5
#: Measured on the server's side a gap can only come out longer; this is for timer slack.
GAP_SLACK_S = 0.02
POOL = "scale"
WORKERS = ("machine-1", "machine-2", "machine-3")
CRAWLS = ("crawl-a", "crawl-b")
#: Requests crawl A has sent when its worker is killed (of ~3,000: robots.txt and pages).
KILL_AFTER = 600
STACK_ENV = {
    "PREFECT_SERVER_TASKS_TAG_CONCURRENCY_SLOT_WAIT_SECONDS": "0.5",
    "PREFECT_WORKER_QUERY_SECONDS": "1",
    "PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "2",
}


def agent(crawl: str) -> str:
    return f"recrawler/0.1 (scale test; {crawl})"


def fetch_settings(crawl: str) -> dict[str, object]:
    return {
        "min_delay_s": GAP_S,
        "max_delay_s": GAP_S,
        "delay_factor": 1.0,
        "host_concurrency_start": 1.0,
        "host_concurrency_ceiling": 1.0,
        "request_timeout_s": 20.0,
        "robots_timeout_s": 20.0,
        "retry_base_s": 0.05,
        "retry_cap_s": 0.2,
        "seed": 1,
        "user_agent": agent(crawl),
        "allowed_networks": list(SANDBOX_NETWORKS),
    }


@pytest.fixture
def sandbox():
    web = SandboxWeb.generate(
        HOSTS, PAGES, seed=7, default=HostBehaviour(latency_s=LATENCY_S), clock=SimClock(START)
    )
    with serve_sandbox(web) as running:
        yield running


def test_three_workers_on_postgres_keep_1000_hosts_polite_through_a_lost_worker(sandbox, tmp_path):
    marks = {"start": time.monotonic()}
    roots = {crawl: tmp_path / crawl for crawl in CRAWLS}
    for root in roots.values():
        urls = import_catalog(root, sandbox)
    (tmp_path / "stack").mkdir()
    with PostgresCluster() as pg, PrefectStack(tmp_path / "stack", STACK_ENV) as stack:
        stack.start_server(timeout=300, database_url=pg.url)
        marks["server up on PostgreSQL"] = time.monotonic()
        with (
            temporary_settings({PREFECT_API_URL: stack.api_url}),
            get_client(sync_client=True) as client,
        ):
            template = ProcessWorker.get_default_base_job_template()
            client.create_work_pool(
                WorkPoolCreate(name=POOL, type="process", base_job_template=template)
            )
            for worker in WORKERS:
                stack.start_worker(worker, POOL, own_home=True)
            for crawl in CRAWLS:
                recrawl_flow.from_source(str(REPO), "flows/recrawl.py:recrawl_flow").deploy(
                    crawl, work_pool_name=POOL, print_next_steps=False
                )
            _wait_for_workers(client, timeout=180)
            marks["workers up"] = time.monotonic()

            runs = {crawl: _run(client, crawl, roots[crawl], len(urls)) for crawl in CRAWLS}
            # kill crawl A's machine while both crawls are fetching
            _wait(lambda: _sent(sandbox, "crawl-a") >= KILL_AFTER, 900, "crawl A fetching")
            victim = _worker_of(stack, runs["crawl-a"], timeout=60)
            sent_at_kill = _sent(sandbox, "crawl-a")
            stack.kill(victim)
            marks[f"{victim} killed"] = time.monotonic()
            held = _active_host_slots(client)
            rerun = _run(client, "crawl-a", roots["crawl-a"], len(urls))
            final = {
                "crawl-a (re-run)": _wait_final(client, rerun, timeout=1200),
                "crawl-b": _wait_final(client, runs["crawl-b"], timeout=1200),
            }
            marks["runs done"] = time.monotonic()
            killed_state = _state(client, runs["crawl-a"])
            leaked = _active_host_slots(client)
            limits = [lim for lim in read_all_limits(client) if _is_host(lim.name)]
            rerun_by = _worker_of(stack, rerun, timeout=5)
    assert set(final.values()) == {"COMPLETED"}, (final, _logs(stack))
    assert rerun_by != victim

    rows = {crawl: HistoryStore(root).read([0]).to_pandas() for crawl, root in roots.items()}
    records = sandbox.log.entries()
    hosts = host_politeness(records)
    windows = [agent_window(records, agent(crawl)) for crawl in CRAWLS]
    side_by_side = min(end for _, end in windows) - max(start for start, _ in windows)
    max_in_flight = max(h.max_in_flight for h in hosts.values())
    min_gap = min(h.min_gap_s for h in hosts.values())
    committed = {crawl: (len(frame), frame["url_id"].nunique()) for crawl, frame in rows.items()}
    phases = ", ".join(
        f"{name} {mark - marks['start']:.0f} s" for name, mark in marks.items() if name != "start"
    )
    print(
        f"\nscale: PostgreSQL {pg.bin.parent.name}, 3 workers, {len(hosts)} hosts, "
        f"{len(limits)} host limits (one tag per host), {len(records)} requests; "
        f"{victim} SIGKILLed after {sent_at_kill} of crawl A's requests with "
        f"{held} host slot(s) taken; the killed run ended {killed_state}, its re-run on "
        f"{rerun_by}\n"
        f"  requests per host in flight (max): {max_in_flight} (limit 1)\n"
        f"  shortest gap per host: {min_gap:.3f} s (pacing {GAP_S} s)\n"
        + "".join(
            f"  rows committed / planned, {crawl}: {n:,} / {len(urls):,} ({unique:,} pages)\n"
            for crawl, (n, unique) in committed.items()
        )
        + f"  slots leaked: {leaked}\n"
        f"  the two crawls fetched side by side for {side_by_side:.1f} s; {phases}"
    )
    assert sent_at_kill < HOSTS * (PAGES + 1), "crawl A was killed after it had fetched all"
    assert held > 0, "the kill left no slot taken: nothing to recover"
    assert len(hosts) == HOSTS and side_by_side > 0
    assert all(h.agents == {agent(crawl) for crawl in CRAWLS} for h in hosts.values())
    assert max_in_flight == 1, {
        h.host: h.max_in_flight for h in hosts.values() if h.max_in_flight > 1
    }
    assert min_gap >= GAP_S - GAP_SLACK_S, sorted(
        (round(h.min_gap_s, 3), h.host) for h in hosts.values()
    )[:5]
    for crawl, frame in rows.items():
        assert committed[crawl] == (len(urls), len(urls)), crawl  # every page once
        assert frame["outcome"].eq("ok").all(), frame["outcome"].value_counts()
    assert leaked == 0 and len(limits) == HOSTS


def _run(client: SyncPrefectClient, crawl: str, root, pages: int) -> UUID:
    deployment = client.read_deployment_by_name(f"recrawl/{crawl}")
    run = client.create_flow_run_from_deployment(
        deployment.id,
        parameters={
            "root": str(root),
            "budget": pages,
            "at": START.isoformat(),
            "cycle": 0,
            "fetch": fetch_settings(crawl),
            "slices": BOOTSTRAP,
            "host_shards": 0,  # one host:<h> tag per host
        },
    )
    return run.id


def _sent(sandbox, crawl: str) -> int:
    return sum(1 for r in sandbox.log.entries() if r.headers.get("user-agent") == agent(crawl))


def _is_host(name: str) -> bool:
    return name.startswith(f"tag:{HOST_TAG_PREFIX}")


def _active_host_slots(client: SyncPrefectClient) -> int:
    return sum(lim.active_slots for lim in read_all_limits(client) if _is_host(lim.name))


def _worker_of(stack: PrefectStack, run_id: UUID, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = stack.worker_of_runs(WORKERS).get(str(run_id))
        if found:
            return found[0]
        time.sleep(0.5)
    raise TimeoutError(f"no worker log names flow run {run_id}")


def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {timeout} s")


def _wait_for_workers(client: SyncPrefectClient, timeout: float) -> None:
    _wait(
        lambda: set(WORKERS) <= {w.name for w in client.read_workers_for_work_pool(POOL)},
        timeout,
        f"workers {WORKERS} online",
    )


def _state(client: SyncPrefectClient, run_id: UUID) -> str:
    state = client.read_flow_run(run_id).state
    return state.type.value if state is not None else "none"


def _wait_final(client: SyncPrefectClient, run_id: UUID, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = client.read_flow_run(run_id).state
        if state is not None and state.is_final():
            return state.type.value
        time.sleep(1)
    raise TimeoutError(f"flow run {run_id} not finished within {timeout} s")


def _logs(stack: PrefectStack) -> str:
    return "\n".join(f"--- {w}\n{stack.log_text(w)[-4000:]}" for w in WORKERS)
