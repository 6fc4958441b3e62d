"""The throwaway PostgreSQL cluster of the scale-out tests (``flows.evaluation.scale``)."""

from flows.evaluation.scale.postgres import PostgresCluster, have_postgres, postgres_bin

__all__ = ["PostgresCluster", "have_postgres", "postgres_bin"]
