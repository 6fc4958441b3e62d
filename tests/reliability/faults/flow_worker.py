"""The ``recrawl`` Prefect flow in its own process, against whatever Prefect API the
environment names (``PREFECT_API_URL``), so a test can SIGKILL it or its server.

``python -m tests.reliability.faults.flow_worker ROOT CYCLE AT BUDGET [--bootstrap]
[--fetch JSON]`` prints the flow's summary as one JSON line (``{"error": ...}`` and exit
status 1 if the flow raised).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from datetime import datetime


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("cycle", type=int)
    parser.add_argument("at")
    parser.add_argument("budget", type=float)
    parser.add_argument("--bootstrap", action="store_true")
    parser.add_argument("--fetch", default="{}")
    parser.add_argument("--max-batch-urls", type=int, default=6)
    args = parser.parse_args(argv)
    from flows.recrawl import recrawl_flow

    slices = {"discovery": 1.0, "reestimation": 0.0, "verification": 0.0}
    try:
        summary = recrawl_flow(
            root=args.root,
            budget=args.budget,
            cycle=args.cycle,
            at=datetime.fromisoformat(args.at),
            fetch=json.loads(args.fetch),
            slices=slices if args.bootstrap else None,
            max_batch_urls=args.max_batch_urls,
            max_hosts_per_batch=1,
        )
    except Exception as exc:  # the test reads the failure from stdout
        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    keep = ("cycle", "status", "rows", "observations", "batches", "repaired_limits", "crashed_runs")
    print(json.dumps({k: summary.get(k) for k in keep}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
