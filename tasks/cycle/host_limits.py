"""Per-host Prefect concurrency limits: create or check them, repair slots left by crashes.

A task tagged ``host:<name>`` takes a slot of the global concurrency limit ``tag:host:<name>``
(if one exists; without a limit the tag restricts nothing), so a limit of 1 keeps two
batches of one host from running at once, across flow runs and machines that share the
Prefect server.

Slots leak. The server holds a lease per acquisition; a client killed while holding one
leaves the slot taken until the lease expires, and when the leases are lost (the server
restarted with its default in-memory lease storage, or the temporary server of Prefect's
local mode went away with its process) the slot count stays up forever with no lease
behind it. ``ensure_host_limits`` detects that case (active slots above the number of
leases, seen twice a moment apart so an acquisition in flight is not mistaken for a leak)
and sets the active slots back to the number of leases. Slots whose lease still exists are
left to the server, which frees them when the lease expires (about a minute after the
holder stopped renewing it). Run the server with
``PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE=prefect.server.concurrency.lease_storage.filesystem``
so leases survive a restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import (
    GlobalConcurrencyLimitCreate,
    GlobalConcurrencyLimitUpdate,
)
from prefect.client.schemas.responses import GlobalConcurrencyLimitResponse
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

log = logging.getLogger(__name__)

HOST_TAG_PREFIX = "host:"
_PAGE = 200
_CONFIRM_DELAY_S = 0.5


@dataclass(frozen=True)
class HostLimitsReport:
    hosts: int  # limits wanted (one per host, or per host shard)
    created: int
    existing: int
    other_limit: int  # limits set to another value by an operator (left as they are)
    repaired: tuple[str, ...]  # limits whose leaked slots were reset


def host_tag(host: str) -> str:
    return f"{HOST_TAG_PREFIX}{host}"


def limit_name(host: str) -> str:
    return f"tag:{host_tag(host)}"


def ensure_host_limits(
    hosts: Iterable[str], *, slots: int = 1, client: SyncPrefectClient | None = None
) -> HostLimitsReport:
    """Create the missing ``tag:host:<h>`` limits (``slots`` each) and repair leaked slots."""
    return ensure_tag_limits([host_tag(h) for h in hosts], slots=slots, client=client)


def ensure_tag_limits(
    tags: Iterable[str], *, slots: int = 1, client: SyncPrefectClient | None = None
) -> HostLimitsReport:
    """Create the missing ``tag:<tag>`` limits (``slots`` each) and repair leaked slots."""
    if slots < 1:
        raise ValueError(f"a host limit needs at least 1 slot, got {slots}")
    wanted = {f"tag:{t}" for t in tags}
    if client is None:
        with get_client(sync_client=True) as own:
            return _ensure(own, wanted, slots)
    return _ensure(client, wanted, slots)


def _ensure(client: SyncPrefectClient, wanted: set[str], slots: int) -> HostLimitsReport:
    existing = {limit.name: limit for limit in read_all_limits(client) if limit.name in wanted}
    created = 0
    for name in sorted(wanted - existing.keys()):
        try:
            client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=name, limit=slots)
            )
            created += 1
        except ObjectAlreadyExists:  # another run created it meanwhile
            pass
    other = sorted(n for n, lim in existing.items() if lim.limit != slots)
    if other:
        log.warning(
            "%d host limits are not %d slot(s) (e.g. %s = %d); left as they are",
            len(other),
            slots,
            other[0],
            existing[other[0]].limit,
        )
    suspects = [lim for lim in existing.values() if lim.active_slots > 0]
    repaired = repair_leaked_slots(client, suspects)
    report = HostLimitsReport(len(wanted), created, len(existing), len(other), repaired)
    log.info(
        "host limits: %d hosts, %d created, %d existed, %d repaired",
        report.hosts,
        report.created,
        report.existing,
        len(report.repaired),
    )
    return report


def read_all_limits(client: SyncPrefectClient) -> list[GlobalConcurrencyLimitResponse]:
    limits: list[GlobalConcurrencyLimitResponse] = []
    offset = 0
    while True:
        page = client.read_global_concurrency_limits(limit=_PAGE, offset=offset)
        limits.extend(page)
        if len(page) < _PAGE:
            return limits
        offset += _PAGE


def leaked_slots(client: SyncPrefectClient, name: str) -> tuple[int, int]:
    """``(active slots, leases)`` of one limit; more slots than leases means a leak."""
    limit = client.read_global_concurrency_limit_by_name(name)
    tag = name.removeprefix("tag:")
    try:
        leases = len(client.read_concurrency_limit_by_tag(tag).active_slots)
    except ObjectNotFound:
        leases = 0
    return limit.active_slots, leases


def repair_leaked_slots(
    client: SyncPrefectClient, suspects: list[GlobalConcurrencyLimitResponse]
) -> tuple[str, ...]:
    """Reset active slots that no lease holds (confirmed by a second look)."""
    if not suspects:
        return ()
    first = {lim.name: leaked_slots(client, lim.name) for lim in suspects}
    candidates = [name for name, (active, leases) in first.items() if active > leases]
    if not candidates:
        return ()
    time.sleep(_CONFIRM_DELAY_S)
    repaired = []
    for name in candidates:
        active, leases = leaked_slots(client, name)
        if active > leases:
            client.update_global_concurrency_limit(
                name, GlobalConcurrencyLimitUpdate(active_slots=leases)
            )
            repaired.append(name)
            log.warning(
                "%s had %d active slot(s) but %d lease(s): reset to %d (a crashed run's slot)",
                name,
                active,
                leases,
                leases,
            )
    return tuple(repaired)
