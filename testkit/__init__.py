"""The test kit: what only the tests and the benchmarks use, kept out of the installed package
(setuptools finds only ``include/traceladder*``; import-linter forbids ``traceladder`` to import it).

Where a helper lives (issue 57):

- ``testkit/``: the shared stand-ins, fakes, generators and builders: a module that the
  benchmarks import, or that test modules of more than one test package import (``tests/unit``,
  ``tests/integration``, ``tests/faults``, ``tests/fuzz``, ``tests/dags``). A test imports it
  as ``testkit.<module>``; nothing in ``testkit/`` imports from ``tests/``.
- ``tests/<package>/``: the fixtures (its ``conftest.py``) and helpers of one test package, e.g.
  ``tests/integration/stack_harness.py`` or ``tests/integration/webhook.py``, imported only
  from that package. ``tests/conftest.py`` holds the fixtures and hooks of every package.
- When a second package (or a benchmark) starts to use a helper of ``tests/<package>/``, the
  helper moves here; a helper here that only one test package still uses moves back there.

The modules:

- ``simulation/``: the execution-order noise model, its data, and simulated ladders;
- ``standin/``: the test doubles of primus-cli, rocprofv3, amd-smi, rocm-trace-lite and TraceLens
  that ``docker/images.py standin`` builds into the stand-in images;
- ``tracegen``: seeded GPU traces; ``year_history``: a year of published ladder runs in S3;
  ``rocprof_files``: the header of rocprofv3's kernel trace CSV;
- ``results``: hand-made rung results, plan specs and index entries; ``triage_docs``: hand-made
  triage documents (suspects, steps, triage.json, suspect groups);
- ``tiny_proxy``: the CPU proxy's tiny sizes; ``tiny_rung``: a tiny real rung's spec and the check
  of what a rung stored; ``tcp_proxy``: a TCP proxy that cuts an S3 connection; ``needs``: a
  missing machine part skips a test, or fails it in CI;
- ``page_load``: the Ladders page's load generator; ``summary_task``: the summary and publish
  tasks run as the DAG runs them, with ``s3_requests`` counting their S3 requests;
- ``tracelens_oracle``: the real TraceLens the differential harness compares against;
- ``bench_table``: the benchmarks' result rows, table and figures file; ``paths``: the checkout
  and the shared data.

Left where they were, against the rule: ``tests/conformance.py`` (the benchmarks load it by its
path) and ``tests/unit/config/test_validate.py``'s ``MINIMAL`` ladder (test_triage_wiring imports
it)."""
