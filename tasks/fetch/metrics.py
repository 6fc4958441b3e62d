"""Pressure metrics of one fetch batch: what shows load building up before it collapses.

Throughput alone looks fine until just before a collapse; these are the numbers the flow
control article asks for: queue depth and the age of the oldest waiting item, requests in
flight and the adaptive limit per host, admission rejections and blocked puts, retries and
the retry ratio, outcomes by class, and the plan-level limiter of a scraping API.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class HostPressure:
    requests: int  # requests this batch sent to the host (robots.txt included)
    throttles: int  # 429/503/challenge answers this batch
    max_in_flight: int  # most requests in flight at once (ever, for this host)
    limit: float  # adaptive limit at the end of the batch
    lowest_limit: float  # lowest the limit went (ever)
    paused_s: float  # seconds of throttle pause still ahead at the end
    validators_trusted: bool
    validator_doubt: str | None  # why the host's validators are not trusted


@dataclass(frozen=True)
class BatchMetrics:
    urls: int  # distinct URLs in the batch
    elapsed_s: float
    requests: int  # HTTP attempts at pages (each retry counts; redirect hops do not)
    robots_fetches: int
    retries: int
    retry_ratio: float  # retries / page attempts
    retry_budget: int
    retries_refused: int  # retryable failures left as they were (budget, window, attempts)
    outcomes: dict[str, int]
    max_queue_depth: int  # URLs waiting in host lanes at the worst moment
    max_oldest_age_s: float  # age of the oldest waiting URL at the worst sample
    max_dispatch_lag_s: float  # longest a host was ready before a worker took it (workers
    # are the bottleneck when this grows; there are no blocking puts: lanes are bounded and
    # admission rejects instead)
    admission_rejections: int  # URLs or retries refused because a lane or the batch was full
    shed: int
    plan_throttles: int  # 429 X-Plan-Limit from the scraping API
    plan_limit: float | None  # API concurrency limit at the end (None: not through an API)
    plan_stopped: bool  # 509: credits exhausted, the batch stopped
    hosts: dict[str, HostPressure] = field(default_factory=dict)
    refused: int = (
        0  # URLs the address policy refused (models.fetching.net_policy): never requested
    )
    tail_at_s: float | None = None  # when few hosts were left (``FetchSettings.tail_host_share``)

    @property
    def pages_per_s(self) -> float:
        return self.urls / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        """One line for logs."""
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        return (
            f"{self.urls} URLs in {self.elapsed_s:.1f} s ({outcomes}); {self.requests} requests, "
            f"retries {self.retries} ({self.retry_ratio:.1%}), shed {self.shed}, "
            f"max queue {self.max_queue_depth} (oldest {self.max_oldest_age_s:.1f} s), "
            f"dispatch lag {self.max_dispatch_lag_s:.2f} s, "
            f"rejections {self.admission_rejections}"
            + (f", refused addresses {self.refused}" if self.refused else "")
        )
