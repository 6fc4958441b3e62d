"""The fetcher's rules as pure policy: the batch frontier (per-host queues, admission,
shedding), pacing and adaptive limits, robots.txt verdicts (RFC 9309), the address policy,
validators, redaction.

Pure: no Prefect, httpx, DuckDB or I/O; imports only models.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "BatchFrontier": "frontier",
    "WorkItem": "frontier",
    "HostState": "host_state",
    "PacingPolicy": "politeness",
    "AimdLimit": "politeness",
    "RetryPolicy": "politeness",
    "parse_retry_after": "politeness",
    "RobotsVerdict": "robots_policy",
    "verdict_for_status": "robots_policy",
    "AddressPolicy": "net_policy",
    "ValidatorPolicy": "validators",
    "conditional_headers": "validators",
    "RedactionPolicy": "redaction",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
