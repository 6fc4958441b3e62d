"""Planning from a notebook: every step returns a pandas DataFrame (run it as a script too).

    .venv/bin/python examples/plan_in_a_notebook.py [ROOT] [--flow]

Without ROOT it writes a small synthetic history (5,000 pages, 10 daily cycles) to a
temporary folder first. Paste the cells into Jupyter as they are (``# %%`` marks them).
"""

# %% a store to plan on
import sys
import tempfile
from pathlib import Path

import pandas as pd

from models.synthetic import generate_history, generate_web
from tasks.catalog import CatalogStore
from tasks.history import HistoryStore

given = [a for a in sys.argv[1:] if not a.startswith("--")]
if given:
    root = Path(given[0])
else:
    root = Path(tempfile.mkdtemp(prefix="recrawl-notebook-"))
    web = generate_web(5_000, seed=3)
    CatalogStore(root).upsert(web.catalog_table())
    for cycle_id, rows in generate_history(web, 10, seed=3):
        HistoryStore(root).write_cycle(cycle_id, rows, link=False)

# %% change rates per page (estimation only)
from tasks.estimation import load_rate_estimates  # noqa: E402 (notebook cell)

rates = load_rate_estimates(root)
print(rates.sort_values("rate", ascending=False).head())

# %% plan the next cycle: estimate -> allocate -> select; the plan is a DataFrame on disk
from tasks.planning import plan_cycle  # noqa: E402 (notebook cell)

next_cycle = max(HistoryStore(root).cycles(), default=-1) + 1
result = plan_cycle(root, next_cycle, budget=600, host_capacity=50, cost_model="credits")
plan = pd.read_parquet(result.path)
print(plan.head())
print(pd.Series(result.summary).round(3))

# %% what each slice bought, and how likely its pages are to have changed
by_slice = plan.groupby("reason").agg(
    pages=("url_id", "size"), cost=("cost", "sum"), p_changed=("p_changed", "mean")
)
print(by_slice)

# %% the same step as a Prefect flow run (Prefect's local mode starts a temporary server)
if "--flow" in sys.argv:
    from flows.plan import plan_flow

    print(plan_flow(root=str(root), budget=600, cycle=next_cycle, host_capacity=50))
