"""A recrawl cycle in its own process, without Prefect (the crash test kills it).

``python -m tests.tasks.cycle.cycle_worker ROOT CYCLE AT BUDGET [--die-at POINT]``: plan (if the
cycle has no split yet), fetch every host batch, commit, clean up. ``--die-at`` makes the
process SIGKILL itself at a point of the commit that random kills rarely hit.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from datetime import datetime

from models.planning.select import Slices
from sandbox import SANDBOX_NETWORKS
from tasks.cycle.planning import plan_cycle
from tasks.cycle.work import (
    commit_cycle,
    cycle_state,
    discard_work,
    fixed_clock,
    read_batches,
    run_host_batch,
    split_plan,
)
from tasks.fetch.settings import FetchSettings
from tasks.store import history

SETTINGS = FetchSettings(
    min_delay_s=0.02,
    max_delay_s=0.05,
    delay_factor=1.0,
    seed=1,
    allowed_networks=SANDBOX_NETWORKS,  # the sandbox is on loopback
)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("cycle", type=int)
    parser.add_argument("at")
    parser.add_argument("budget", type=float)
    parser.add_argument("--bootstrap", action="store_true")
    parser.add_argument("--die-at", choices=["publish", "after-publish"])
    args = parser.parse_args(argv)
    at = datetime.fromisoformat(args.at)
    clock = fixed_clock(at)
    if args.die_at == "publish":  # version folder written, manifest not yet replaced
        history.HistoryStore._publish = lambda *a, **k: _die()  # type: ignore[method-assign]
    elif args.die_at == "after-publish":  # manifest replaced, work files not yet removed
        original = history.HistoryStore._publish

        def publish_then_die(self, manifest, retire):  # type: ignore[no-untyped-def]
            original(self, manifest, retire)
            _die()

        history.HistoryStore._publish = publish_then_die  # type: ignore[method-assign]
    state = cycle_state(args.root, args.cycle)
    if state == "committed":
        discard_work(args.root, args.cycle)
        print("already committed")
        return 0
    if state == "new":
        slices = (
            Slices(discovery=1.0, reestimation=0.0, verification=0.0) if args.bootstrap else None
        )
        plan = plan_cycle(args.root, args.cycle, args.budget, now=at, slices=slices)
        split_plan(args.root, args.cycle, plan.path, max_urls=6, max_hosts=1)
    for spec in read_batches(args.root, args.cycle):
        run_host_batch(args.root, args.cycle, spec.name, settings=SETTINGS, clock=clock)
    commit_cycle(args.root, args.cycle, clock=clock)
    discard_work(args.root, args.cycle)
    print("committed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
