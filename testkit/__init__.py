"""The test kit: what only the tests and the benchmarks use, kept out of the installed package
(setuptools finds only ``include/traceladder*``; import-linter forbids ``traceladder`` to import it).

- ``simulation/``: the execution-order noise model, its data, and simulated ladders;
- ``standin/``: the test doubles of primus-cli, rocprofv3, amd-smi, rocm-trace-lite and TraceLens
  that ``docker/images.py standin`` builds into the stand-in images;
- ``tracegen``: seeded GPU traces; ``year_history``: a year of published ladder runs in S3;
- ``page_load``: the Ladders page's load generator; ``summary_task``: the summary and publish
  tasks run as the DAG runs them, with ``s3_requests`` counting their S3 requests;
- ``tracelens_oracle``: the real TraceLens the differential harness compares against;
- ``bench_table``: the benchmarks' result rows, table and figures file; ``paths``: the checkout
  and the shared data."""
