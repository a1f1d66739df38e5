"""Benchmarks (`make bench`, `python -m benchmarks`): one module per topic, `bench_<topic>.py`,
each with a `SECTIONS` list of `(ctx) -> list[Row]` functions."""
