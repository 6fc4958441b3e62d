"""The multi-machine shape on one machine: a real Prefect server, two process workers.

Two recrawl deployments (``recrawl-daily`` deployed from ``prefect.yaml`` and a second one
deployed from the same entrypoint: two crawls with their own data roots over the same hosts)
are run at once through a process work pool served by two ``prefect worker start``
processes, one flow run each. The sandbox web (served by this process) logs every request;
from that log, per host and across both workers: never more than one request in flight, and
never less than the pacing gap between the end of one answer and the next request. That is
what the server's tag concurrency limits (one slot per host shard) plus the in-task pacing
must guarantee, including when a host passes from one worker's batch to the other's.

Slow: the server's start-up, a ``prefect deploy`` and two flow-run processes take most of a
minute before the first page is fetched.
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
from tasks.store.history import HistoryStore
from tests.flows.conftest import BOOTSTRAP, import_catalog
from tests.scaleout.host_checks import agent_window, host_politeness
from tests.scaleout.stack import REPO, PrefectStack

#: About two minutes on this 2-core machine (more under load): `make reliability` runs it.
pytestmark = [pytest.mark.slow, pytest.mark.long_reliability]

START = datetime(2026, 1, 1, tzinfo=UTC)
#: More hosts than a flow run fetches at once (4 batches): the two runs overlap.
HOSTS, PAGES = 6, 5
LATENCY_S = 0.1
#: The pacing gap (min_delay_s = max_delay_s): longer than a host's slot takes to pass from
#: one worker to the other, so a hand-over that ignored it would show in the log.
GAP_S = 1.0
#: Measured on the server's side a gap can only come out longer; this is for timer slack.
GAP_SLACK_S = 0.02
HOST_SHARDS = 64  # prefect.yaml's value; every run over the same hosts must use the same
POOL = "scaleout"
WORKERS = ("scaleout-worker-1", "scaleout-worker-2")
DEPLOYMENTS = ("recrawl-daily", "recrawl-second")
#: The daily deployment exactly as prefect.yaml declares it (its parameters overridden per run).
DEPLOY_DAILY = ["deploy", "--name", DEPLOYMENTS[0], "--pool", POOL]
STACK_ENV = {
    # a batch waiting for a host's slot asks again within about half a second (default:
    # up to 10 s), so hand-overs are quick: the case where pacing must carry over
    "PREFECT_SERVER_TASKS_TAG_CONCURRENCY_SLOT_WAIT_SECONDS": "0.5",
    "PREFECT_WORKER_QUERY_SECONDS": "1",
}


def agent(deployment: str) -> str:
    return f"recrawler/0.1 (scale-out test; {deployment})"


def fetch_settings(deployment: str) -> dict[str, object]:
    """Fixed pacing, one request per host at a time, a User-Agent naming the deployment."""
    return {
        "min_delay_s": GAP_S,
        "max_delay_s": GAP_S,
        "delay_factor": 1.0,
        "host_concurrency_start": 1.0,
        "host_concurrency_ceiling": 1.0,
        "request_timeout_s": 10.0,
        "robots_timeout_s": 5.0,
        "retry_base_s": 0.05,
        "retry_cap_s": 0.2,
        "seed": 1,
        "user_agent": agent(deployment),
        "allowed_networks": list(SANDBOX_NETWORKS),  # the sandbox is on loopback
    }


@pytest.fixture
def sandbox():
    web = SandboxWeb.generate(
        HOSTS, PAGES, seed=3, default=HostBehaviour(latency_s=LATENCY_S), clock=SimClock(START)
    )
    with serve_sandbox(web) as running:
        yield running


@pytest.fixture
def stack(tmp_path):
    with PrefectStack(tmp_path, STACK_ENV) as running:
        yield running


def test_per_host_limits_hold_across_two_workers(stack, sandbox, tmp_path):
    marks = {"start": time.monotonic()}
    roots = {name: tmp_path / f"root-{name}" for name in DEPLOYMENTS}
    for root in roots.values():
        urls = import_catalog(root, sandbox)
    stack.start_server()
    marks["server up"] = time.monotonic()
    with (
        temporary_settings({PREFECT_API_URL: stack.api_url}),
        get_client(sync_client=True) as client,
    ):
        # what `prefect work-pool create scaleout --type process` does, without a process
        template = ProcessWorker.get_default_base_job_template()
        client.create_work_pool(
            WorkPoolCreate(name=POOL, type="process", base_job_template=template)
        )
        for worker in WORKERS:
            stack.start_worker(worker, POOL)
        stack.run("deploy", DEPLOY_DAILY, cwd=REPO)
        # the second crawl, from Python: what `prefect deploy flows/recrawl.py:recrawl_flow
        # --name recrawl-second --pool scaleout --concurrency-limit 1` does from the CLI
        recrawl_flow.from_source(str(REPO), "flows/recrawl.py:recrawl_flow").deploy(
            DEPLOYMENTS[1], work_pool_name=POOL, concurrency_limit=1, print_next_steps=False
        )
        _wait_for_workers(client, timeout=90)
        marks["deployed, workers up"] = time.monotonic()

        run_ids = {}
        for name in DEPLOYMENTS:  # submitted together: each worker takes one (--limit 1)
            deployment = client.read_deployment_by_name(f"recrawl/{name}")
            run = client.create_flow_run_from_deployment(
                deployment.id,
                parameters={
                    "root": str(roots[name]),
                    "budget": len(urls),
                    "at": START.isoformat(),
                    "fetch": fetch_settings(name),
                    "slices": BOOTSTRAP,
                    "host_shards": HOST_SHARDS,
                },
            )
            run_ids[name] = run.id
        states = {name: _wait_final(client, run_ids[name], timeout=240) for name in DEPLOYMENTS}
        marks["runs done"] = time.monotonic()
    assert set(states.values()) == {"COMPLETED"}, (states, _worker_logs(stack))

    # each flow run went through its own worker
    ran_by = stack.worker_of_runs(WORKERS)
    assert sorted(w for name in DEPLOYMENTS for w in ran_by.get(str(run_ids[name]), [])) == sorted(
        WORKERS
    ), ran_by

    # both crawls fetched every page of the sandbox once
    for root in roots.values():
        rows = HistoryStore(root).read([0]).to_pandas()
        assert len(rows) == len(urls) and (rows["outcome"] == "ok").all()

    records = sandbox.log.entries()
    hosts = host_politeness(records)
    windows = [agent_window(records, agent(name)) for name in DEPLOYMENTS]
    side_by_side = min(end for _, end in windows) - max(start for start, _ in windows)
    max_in_flight = max(h.max_in_flight for h in hosts.values())
    min_gap = min(h.min_gap_s for h in hosts.values())
    phases = ", ".join(
        f"{name} {mark - marks['start']:.0f} s" for name, mark in marks.items() if name != "start"
    )
    print(
        f"\nscale-out: {len(records)} requests to {len(hosts)} hosts from 2 workers; "
        f"max in flight per host {max_in_flight} (limit 1); min gap {min_gap:.3f} s "
        f"(pacing {GAP_S} s); the two runs fetched side by side for {side_by_side:.1f} s; "
        f"{phases}"
    )
    # every host was crawled by both deployments, while both were fetching
    assert len(hosts) == HOSTS
    assert all(h.agents == {agent(name) for name in DEPLOYMENTS} for h in hosts.values())
    assert side_by_side > 0, "one run finished fetching before the other began: no contention"
    # and the per-host limits held across the two workers
    assert max_in_flight == 1, {h.host: h.max_in_flight for h in hosts.values()}
    assert min_gap >= GAP_S - GAP_SLACK_S, {h.host: round(h.min_gap_s, 3) for h in hosts.values()}


def _wait_for_workers(client: SyncPrefectClient, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if set(WORKERS) <= {w.name for w in client.read_workers_for_work_pool(POOL)}:
            return
        time.sleep(0.5)
    raise TimeoutError(f"workers {WORKERS} did not come online within {timeout} s")


def _wait_final(client: SyncPrefectClient, run_id: UUID, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = client.read_flow_run(run_id).state
        if state is not None and state.is_final():
            return state.type.value
        time.sleep(0.5)
    raise TimeoutError(f"flow run {run_id} not finished within {timeout} s")


def _worker_logs(stack: PrefectStack) -> str:
    return "\n".join(f"--- {w}\n{stack.log_text(w)[-4000:]}" for w in WORKERS)
