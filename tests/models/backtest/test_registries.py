"""One registry each for cost models and backtest policies (issue 17).

Cost models: ``models.planning.cost.COST_MODELS``, from which the flows' ``CostModelName`` type is
built. Backtest policies: ``models.backtest.registry``, filled once at import by
``register_policy`` (the default comparison and the planner variants), read-only after.
"""

from __future__ import annotations

import typing

import pytest

from models.backtest.registry import check_policy_names, register_policy
from models.backtest.runner import FACTORIES, POLICIES, BacktestConfig, run_backtest
from models.backtest.variants import VARIANTS
from models.backtest.web import BacktestInputError
from models.planning.cost import COST_MODELS, CostModelName


def test_cost_model_registry_is_keyed_by_the_models_names():
    assert COST_MODELS, "no cost models"
    assert all(name == model.name for name, model in COST_MODELS.items())


def test_cost_model_name_type_lists_exactly_the_registry():
    assert typing.get_origin(CostModelName) is typing.Literal
    assert typing.get_args(CostModelName) == tuple(COST_MODELS)


def test_every_policy_is_registered_once_as_default_or_variant():
    assert list(FACTORIES) == [*POLICIES, *VARIANTS]
    assert len(set(FACTORIES)) == len(FACTORIES)
    assert "planner" in POLICIES and "planner-gamma" in VARIANTS


def test_registering_a_policy_name_twice_is_an_error_and_changes_nothing():
    before = dict(FACTORIES)
    for name in ("planner", "planner-gamma"):
        with pytest.raises(BacktestInputError, match=f"'{name}' is already registered"):
            register_policy(name)(before["uniform"])
    assert dict(FACTORIES) == before


@pytest.mark.parametrize("name", ["", "a,b", " planner2"])
def test_a_name_the_command_line_cannot_give_is_refused(name):
    before = dict(FACTORIES)
    with pytest.raises(BacktestInputError, match="cannot be given to --policies"):
        register_policy(name)(lambda ctx: before["planner"](ctx))
    assert dict(FACTORIES) == before


def test_the_registry_is_read_only():
    with pytest.raises(TypeError):
        FACTORIES["planner"] = FACTORIES["uniform"]  # type: ignore[index]
    assert FACTORIES["planner"] is not FACTORIES["uniform"]


def test_policy_names_are_checked_against_the_registry():
    assert check_policy_names(["planner", "oracle+slices"]) == ("planner", "oracle+slices")
    with pytest.raises(BacktestInputError, match=r"unknown policies \['nope'\]; known: .*naive"):
        check_policy_names(["planner", "nope"])


def test_running_a_backtest_does_not_change_the_registry():
    # Equality of the dict compares the factories by identity: re-registering a variant
    # (a new closure) under its old name would show too. A structural check: a tiny web.
    before = dict(FACTORIES)
    names = ("planner", "planner+lean", "oracle-groups", "uniform")
    result = run_backtest(BacktestConfig(pages=600, days=4, budget_share=0.2, policies=names))
    assert [row.name for row in result.summary] == list(names)
    assert dict(FACTORIES) == before
