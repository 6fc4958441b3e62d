"""Which hosts struggled in recent cycles, so the split packs them into batches of their own.

A host that throttled, timed out, failed, needed retries or could not finish in its
batch's window in the last few cycles will most likely do so again. Spread over the
cycle's batches, such hosts make every batch wait for its slowest host; packed together
after the healthy hosts, they keep to a few batches at the end of the cycle (BENCHMARKS.md,
"Load": grouped, the healthy hosts kept their throughput). The record is read from the
history by DuckDB, one row per host; health is smoothed as the cost model's
(``models.planning.cost.health_multiplier``), so one bad answer does not make a host "troubled".
Hosts without a record (new ones) count as healthy; ``tasks.fetch.batch_slots`` covers them
within the cycle.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.outcomes import OFF_HOST_RECORD, STRAINED, sql_list
from models.planning.cost import health_multiplier

#: Cycles of history that make a host's record (the latest ones before this cycle).
RECORD_CYCLES = 3
#: A host is troubled below this smoothed share of untroubled rows.
MIN_HEALTH = 0.8

# Rows that say a host kept its batch waiting are ``models.outcomes.STRAINED`` (the
# unhealthy ones, and ``shed``: what could not be fetched within the batch's window, or was
# refused admission); ``OFF_HOST_RECORD`` rows (robots denials) are no part of the record.
_RECORD_SQL = """
SELECT host, count(*) AS host_rows,
       count(*) FILTER (WHERE outcome IN (SELECT unnest($strained))
                        OR coalesce(retries, 0) > 0) AS host_strained
FROM history
WHERE cycle_id < $cycle AND cycle_id >= $since AND outcome NOT IN (SELECT unnest($off_record))
      AND host IN (SELECT DISTINCT host FROM requests)
GROUP BY host
"""


def troubled_hosts(
    con: duckdb.DuckDBPyConnection,
    requests: pa.Table,
    cycle_id: int,
    *,
    record_cycles: int = RECORD_CYCLES,
    min_health: float = MIN_HEALTH,
) -> pa.Array:
    """One boolean per request row: does its host have a poor record in recent cycles?

    ``con`` must have the history registered as ``history``; ``requests`` has a ``host``
    column. Vectorized: one aggregation over the history, one join back by host.
    """
    if record_cycles < 1:
        raise ValueError(f"record_cycles must be >= 1, got {record_cycles}")
    if not 0.0 < min_health <= 1.0:
        raise ValueError(f"min_health must be within (0, 1], got {min_health}")
    latest = con.sql(
        "SELECT max(cycle_id) FROM history WHERE cycle_id < $cycle",
        params={"cycle": int(cycle_id)},
    ).fetchall()[0][0]
    if latest is None or requests.num_rows == 0:
        return pa.array(np.zeros(requests.num_rows, dtype=bool))
    con.register("requests", requests.select(["host"]))
    try:
        record = con.sql(
            _RECORD_SQL,
            params={
                "cycle": int(cycle_id),
                "since": int(latest) - record_cycles + 1,
                "strained": sql_list(STRAINED),
                "off_record": sql_list(OFF_HOST_RECORD),
            },
        ).to_arrow_table()
    finally:
        con.unregister("requests")
    multiplier = health_multiplier(
        record["host_rows"].to_numpy(), record["host_strained"].to_numpy()
    )
    troubled = record.filter(pa.array(multiplier > 1.0 / min_health + 1e-12))["host"]
    return pc.is_in(requests["host"], value_set=troubled)
