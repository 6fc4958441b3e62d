"""The one registry of backtest policies: name -> factory, filled once, at import.

A factory builds its policy from a :class:`PolicyContext`. The one way to register is the
``register_policy`` decorator, at module level (``models.backtest.runner`` registers the default
comparison, ``models.backtest.variants`` the planner variants; ``models.backtest.runner`` imports
the variants, so importing it fills the registry). A name registered twice is an error;
``FACTORIES`` is a read-only view, so nothing adds or replaces a policy at run time: a run
that wants a policy built differently builds it itself (``simulate`` takes ``Policy``
objects). The ``--policies`` names are checked against this registry
(``check_policy_names``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from models.allocation.freshness import OBJECTIVES
from models.backtest.policies import PlannerSettings, Policy
from models.backtest.web import BacktestInputError
from models.backtest.workloads import Workload
from models.planning.select import Slices


@dataclass(frozen=True)
class PolicyContext:
    """What a policy factory may use. ``workload.truth`` is for the oracle only."""

    workload: Workload
    budget: float
    #: the run's ``models.backtest.runner.BacktestConfig`` (not imported: the runner imports
    #: this registry, and the layout test forbids a circle, even a typing-only one)
    config: Any

    def planner_settings(
        self, *, slices: Slices | None = None, solve_every: int | None = None
    ) -> PlannerSettings:
        """The run's planner settings (objective, cadence, seed), optionally changed."""
        return PlannerSettings(
            objective=OBJECTIVES[self.config.objective],
            slices=slices or Slices(),
            solve_every=solve_every or self.config.solve_every,
            seed=self.config.seed,
        )


PolicyFactory = Callable[[PolicyContext], Policy]

_FACTORIES: dict[str, PolicyFactory] = {}
_DEFAULT: list[str] = []

#: Policy name -> factory, in registration order (read-only).
FACTORIES: Mapping[str, PolicyFactory] = MappingProxyType(_FACTORIES)


def register_policy(
    name: str, *, default: bool = False
) -> Callable[[PolicyFactory], PolicyFactory]:
    """Decorator: register the factory under ``name``; ``default``: in every backtest's
    comparison (``models.backtest.runner.POLICIES``, in registration order). A name already
    registered raises ``BacktestInputError`` (and the registry is left as it was)."""

    def register(factory: PolicyFactory) -> PolicyFactory:
        if not name or "," in name or name != name.strip():
            raise BacktestInputError(f"policy name {name!r} cannot be given to --policies")
        if name in _FACTORIES:
            raise BacktestInputError(f"policy {name!r} is already registered")
        _FACTORIES[name] = factory
        if default:
            _DEFAULT.append(name)
        return factory

    return register


def default_policies() -> tuple[str, ...]:
    """The policies registered with ``default=True``, in registration order."""
    return tuple(_DEFAULT)


def check_policy_names(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as a tuple if every one is registered, else ``BacktestInputError``."""
    chosen = tuple(names)
    unknown = [n for n in chosen if n not in _FACTORIES]
    if unknown:
        raise BacktestInputError(
            f"unknown policies {unknown}; known: {', '.join(sorted(_FACTORIES))}"
        )
    return chosen
