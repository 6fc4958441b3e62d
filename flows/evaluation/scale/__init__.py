"""The scale-out harness: a throwaway PostgreSQL cluster and a Prefect server on loopback.

Used by the scale-out tests (``tests/scaleout``) and the orchestration benchmark
(``benchmarks/bench_orchestration.py``); production never imports it.
"""
