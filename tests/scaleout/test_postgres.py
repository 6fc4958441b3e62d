"""The scale-out tests' PostgreSQL: up in seconds on loopback, reachable as Prefect reaches it
(asyncpg at the SQLAlchemy URL), and gone afterwards, also when the test failed."""

from __future__ import annotations

import asyncio
import os

import pytest

from flows.evaluation.scale.postgres import PostgresCluster, have_postgres

pytestmark = pytest.mark.skipif(not have_postgres(), reason="needs Debian's postgresql package")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie not yet reaped by its parent (pg_ctl's child) is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_throwaway_cluster_answers_asyncpg_and_is_gone_after_a_failure():
    import asyncpg

    cluster = PostgresCluster()
    with pytest.raises(RuntimeError, match="the test failed"), cluster:
        assert cluster.port != 5432 and cluster.url.startswith("postgresql+asyncpg://")

        async def roundtrip() -> int:
            conn = await asyncpg.connect(cluster.url.replace("+asyncpg", ""))
            try:
                await conn.execute("CREATE TABLE t (x int); INSERT INTO t VALUES (41)")
                return int(await conn.fetchval("SELECT x + 1 FROM t"))
            finally:
                await conn.close()

        assert asyncio.run(roundtrip()) == 42
        pid = cluster.postmaster_pid()
        assert pid is not None and _alive(pid)
        raise RuntimeError("the test failed")
    assert not _alive(pid)
    assert not cluster.folder.exists()
