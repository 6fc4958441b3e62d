"""The load harness: a faulty sandbox web in a process of its own, its request log, and a
fetch cycle driven without Prefect. Shared by the load tests (tests/reliability/load) and
the load benchmark (benchmarks/bench_load.py); part of the evaluation wing because it
serves the sandbox."""
