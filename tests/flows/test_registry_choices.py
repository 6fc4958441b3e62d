"""The command lines' choices and the flows' parameter schemas come from the registries
(issue 17): a cost model added to ``models.planning.cost.COST_MODELS`` is offered and accepted."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from numpy.typing import ArrayLike
from prefect.utilities.callables import parameter_schema

import flows.serve
from flows.cli import build_parser, main
from flows.plan import plan_flow
from flows.recrawl import recrawl_flow
from models.backtest.runner import FACTORIES
from models.planning.cost import COST_MODELS, FloatArray, PageHistory
from tasks.store.catalog import CatalogStore

COST_COMMANDS = ("plan", "run")


def option_choices(parser: argparse.ArgumentParser, option: str, command: str | None = None):
    if command is not None:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[command]
    action = next(a for a in parser._actions if option in a.option_strings)
    return action.choices


@dataclass(frozen=True)
class FlatCost:
    """Two units a visit, whatever happens: a model the registry did not have."""

    name: str = "flat-test"

    def attempt_cost(self, outcome: ArrayLike, bytes_transferred: ArrayLike) -> FloatArray:
        return np.full(np.asarray(outcome).shape, 2.0)

    def visit_cost(self, history: PageHistory, hint: ArrayLike) -> FloatArray:
        return np.full(np.asarray(history.attempts).shape, 2.0)


@pytest.fixture
def flat_cost(monkeypatch):
    """Registered for one test through the registry itself, removed after it."""
    model = FlatCost()
    monkeypatch.setitem(COST_MODELS, model.name, model)
    return model


def test_cost_model_choices_are_the_registry_keys():
    parser = build_parser()
    for command in COST_COMMANDS:
        assert option_choices(parser, "--cost-model", command) == list(COST_MODELS)
    assert option_choices(flows.serve.build_parser(), "--cost-model") == list(COST_MODELS)


def test_flow_parameter_schemas_offer_the_registry_names():
    for flow in (plan_flow, recrawl_flow):
        prop = parameter_schema(flow).model_dump()["properties"]["cost_model"]
        assert prop["enum"] == list(COST_MODELS), flow.name
        assert prop["default"] in COST_MODELS


def test_a_registered_cost_model_is_offered_and_accepted(flat_cost, tmp_path, capsys):
    parser = build_parser()
    for command in COST_COMMANDS:
        assert flat_cost.name in option_choices(parser, "--cost-model", command)
        args = parser.parse_args([command, "--budget", "10", "--cost-model", flat_cost.name])
        assert args.cost_model == flat_cost.name
    served = flows.serve.build_parser().parse_args(["--cost-model", flat_cost.name])
    assert served.cost_model == flat_cost.name

    urls = [f"http://h{i % 3}.test/p{i}" for i in range(12)]
    hosts = [u.split("/")[2] for u in urls]
    CatalogStore(tmp_path).upsert(pd.DataFrame({"url": urls, "host": hosts}))
    code = main(["plan", "--root", str(tmp_path), "--budget", "10", "--cost-model", flat_cost.name])
    assert code == 0, capsys.readouterr().err
    assert f"(cost model: {flat_cost.name})" in capsys.readouterr().out


def test_a_name_not_in_the_registry_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["plan", "--budget", "10", "--cost-model", "flat-test"])
    assert exit_.value.code == 2
    assert "invalid choice: 'flat-test'" in capsys.readouterr().err


def test_the_backtest_command_leaves_the_policy_registry_as_it_was(tmp_path, capsys):
    """It used to register the planner variants into the global table on every run."""
    before = dict(FACTORIES)  # factories compared by identity
    args = ["backtest", "--pages", "600", "--days", "4", "--out", str(tmp_path)]
    assert main([*args, "--policies", "planner,planner+probe,uniform"]) == 0
    assert "\nplanner+probe " in capsys.readouterr().out
    assert dict(FACTORIES) == before
