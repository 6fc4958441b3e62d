import pandas as pd
import pytest

from flows.estimate import estimate_flow, estimate_rates_task
from models.estimation.synthetic import generate_history, generate_web
from tasks.store.history import HistoryStore


@pytest.fixture
def history_root(tmp_path):
    web = generate_web(800, seed=21)
    store = HistoryStore(tmp_path)
    for cycle_id, table in generate_history(web, 4, seed=21):
        store.write_cycle(cycle_id, table, link=False)
    return tmp_path


def test_task_body_without_prefect(history_root):
    result = estimate_rates_task.fn(str(history_root))
    assert result["pages"] == len(pd.read_parquet(result["path"])) > 0
    assert result["prior"] == "prior: mixture"


def test_estimate_flow_returns_a_path_and_count(prefect_server, history_root):
    result = estimate_flow(str(history_root))
    frame = pd.read_parquet(result["path"])
    assert result["pages"] == len(frame) > 0
    assert frame["rate"].gt(0).all()
