"""What a visit costs: billing models and host health (the cost-aware scheduling article).

Two ways of being billed reward different optimizations:

* bandwidth (a residential proxy gateway): every byte sent or received counts, headers
  included, and a failed request that transferred bytes before failing still costs;
* credits (a scraping API): a successful response costs a fixed number of credits
  (rendered or not); failed requests and target errors cost nothing.

A model prices one attempt from what the fetcher recorded (``attempt_cost``) and predicts
what a visit that delivers an observation will cost (``visit_cost``), from the page's own
history where there is one, else its host's, else the catalog's hint: the planner's score
divides the value of an observation by it, so failed attempts must be in the price, not
discounted from it. A host whose health falls (throttling, timeouts, errors) gets a higher
effective cost on top, so a cost-aware planner moves budget away from it on its own
(``health_multiplier``).

Rendering in a headless browser is priced by the same model (``render_cost``): the browser
pulls the document again and whatever its scripts fetch, and under the bandwidth model
those bytes are billed like any others (a rendered page can cost many plain fetches); a
scraping API bills a delivered response one credit whether it rendered JavaScript or not,
so there rendering adds nothing. A rendered attempt's row records the plain fetch's bytes
plus the render's, so the history prices a rendered host's next visit by itself; for a host
just found to need rendering, ``visit_cost`` plus ``render_cost`` of the expected render
bytes is the price until its rendered history exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.outcomes import BILLED

FloatArray = NDArray[np.float64]

MIB = float(1 << 20)
#: Up to this many outcomes are priced by a set look-up each, beyond it by ``np.isin``.
_FEW = 16


class CostInputError(ValueError):
    """Cost-model input that cannot be priced; the message says why."""


@dataclass(frozen=True)
class PageHistory:
    """Per-page aggregates of past attempts (arrays aligned by page; NaN where unknown).

    ``attempts`` rows in the history, ``billed`` of them delivered (``models.outcomes.BILLED``),
    ``mean_bytes`` bytes transferred per attempt (headers included, failures included),
    and the same three over the page's host, so a page without history of its own is
    priced like its host's pages.
    """

    attempts: FloatArray
    billed: FloatArray
    mean_bytes: FloatArray
    host_attempts: FloatArray
    host_billed: FloatArray
    host_mean_bytes: FloatArray


class CostModel(Protocol):
    @property
    def name(self) -> str:
        """The model's name, as the CLI and plan summaries spell it."""
        ...

    def attempt_cost(self, outcome: ArrayLike, bytes_transferred: ArrayLike) -> FloatArray:
        """The cost of attempts already made, from what the fetcher recorded."""
        ...

    def visit_cost(self, history: PageHistory, hint: ArrayLike) -> FloatArray:
        """The expected cost of the next visit to each page."""
        ...


@dataclass(frozen=True)
class BandwidthBilling:
    """Billed per byte through the gateway: ``price_per_mib`` budget units per MiB."""

    price_per_mib: float = 1.0
    name: str = "bandwidth"

    def __post_init__(self) -> None:
        if not self.price_per_mib > 0:
            raise CostInputError(f"price_per_mib must be positive, got {self.price_per_mib}")

    def attempt_cost(self, outcome: ArrayLike, bytes_transferred: ArrayLike) -> FloatArray:
        """Every byte counts, failed attempts included; no bytes recorded -> nothing sent."""
        size = np.asarray(bytes_transferred, dtype=np.float64)
        if (size < 0).any():
            raise CostInputError("bytes transferred must be non-negative")
        return np.asarray(np.nan_to_num(size, nan=0.0) / MIB * self.price_per_mib)

    def visit_cost(self, history: PageHistory, hint: ArrayLike) -> FloatArray:
        """Bytes per delivered visit: bytes per attempt / share of attempts delivered.

        From the page's history, else its host's, else ``hint`` (budget units). The share
        is smoothed with one delivered pseudo-attempt.
        """
        page = history.mean_bytes * (history.attempts + 1.0) / (history.billed + 1.0)
        host = history.host_mean_bytes * (history.host_attempts + 1.0) / (history.host_billed + 1.0)
        size = np.where(
            history.attempts > 0, page, np.where(history.host_attempts > 0, host, np.nan)
        )
        size = np.asarray(size, dtype=np.float64)
        return np.asarray(
            np.where(np.isnan(size), _hint(hint, size.shape), size / MIB * self.price_per_mib)
        )


@dataclass(frozen=True)
class CreditBilling:
    """Billed per delivered response: ``credits`` each; failures and errors are free."""

    credits: float = 1.0
    name: str = "credits"

    def __post_init__(self) -> None:
        if not self.credits > 0:
            raise CostInputError(f"credits per response must be positive, got {self.credits}")

    def attempt_cost(self, outcome: ArrayLike, bytes_transferred: ArrayLike) -> FloatArray:
        if isinstance(outcome, list | tuple) and len(outcome) <= _FEW:
            # the fetch engine prices one attempt at a time: np.isin over an object array
            # costs ~20 us whatever its size, a set look-up per outcome well under one
            return np.array([self.credits if o in BILLED else 0.0 for o in outcome])
        billed = np.isin(np.asarray(outcome, dtype=object), sorted(BILLED))
        return np.asarray(np.where(billed, self.credits, 0.0))

    def visit_cost(self, history: PageHistory, hint: ArrayLike) -> FloatArray:
        """``credits``: a delivered visit costs the same whatever the page (failures are free)."""
        return np.full(np.asarray(history.attempts).shape, self.credits)


@dataclass(frozen=True)
class CatalogCost:
    """The catalog's cost hint per page, ignoring history (the planner's old behaviour)."""

    name: str = "catalog"

    def attempt_cost(self, outcome: ArrayLike, bytes_transferred: ArrayLike) -> FloatArray:
        return np.ones(np.asarray(outcome).shape)

    def visit_cost(self, history: PageHistory, hint: ArrayLike) -> FloatArray:
        return _hint(hint, np.asarray(history.attempts).shape)


#: The one registry of cost models, by name: the CLI's ``--cost-model`` choices and the
#: flows' ``cost_model`` parameter type (``CostModelName``) are derived from it, so a model
#: added here is offered everywhere.
COST_MODELS: dict[str, CostModel] = {
    m.name: m for m in (BandwidthBilling(), CreditBilling(), CatalogCost())
}

if TYPE_CHECKING:
    CostModelName = str
else:
    #: The registry's names as a type, for the flows' parameter schema (Prefect shows an
    #: enum of them); built once, at import, from ``COST_MODELS``.
    CostModelName = Literal[tuple(COST_MODELS)]


def render_cost(model: CostModel, render_bytes: ArrayLike) -> FloatArray:
    """What rendering adds to a delivered visit: ``render_bytes`` more pulled by the browser.

    Priced by the model's own ``attempt_cost`` as the difference between a delivered attempt
    with and without those bytes, so every model prices it consistently: the bandwidth model
    bills the bytes, the credits model nothing (one credit, rendered or not), the catalog
    model nothing (its hints ignore bytes).
    """
    size = np.asarray(render_bytes, dtype=np.float64)
    if (size < 0).any():
        raise CostInputError("render bytes must be non-negative")
    delivered = np.full(size.shape, "ok", dtype=object)
    with_render = model.attempt_cost(delivered, size)
    plain = model.attempt_cost(delivered, np.zeros(size.shape))
    return np.asarray(with_render - plain, dtype=np.float64)


def health_multiplier(
    attempts: ArrayLike,
    unhealthy: ArrayLike,
    *,
    prior_attempts: float = 10.0,
    max_multiplier: float = 5.0,
) -> FloatArray:
    """Effective-cost multiplier per host from its recent attempts: 1 for a healthy host.

    Health is the smoothed share of recent attempts that were not throttled, timed out or
    failed (``prior_attempts`` healthy pseudo-attempts keep one bad answer from tripping
    it); the multiplier is 1 / health, capped at ``max_multiplier``.
    """
    n = np.asarray(attempts, dtype=np.float64)
    bad = np.asarray(unhealthy, dtype=np.float64)
    if (n < 0).any() or (bad < 0).any() or (bad > n).any():
        raise CostInputError("need 0 <= unhealthy attempts <= attempts per host")
    health = (n - bad + prior_attempts) / (n + prior_attempts)
    return np.asarray(np.minimum(1.0 / health, max_multiplier))


def _hint(hint: ArrayLike, shape: tuple[int, ...]) -> FloatArray:
    value = np.broadcast_to(np.asarray(hint, dtype=np.float64), shape)
    if (value <= 0).any():
        raise CostInputError("cost hints must be positive")
    return np.asarray(np.where(np.isnan(value), 1.0, value), dtype=np.float64)
