"""Per-run summaries, in one order (`publish.write_summary`): collect (collect.py: every stored
input read back) → build (build.py: estimates with intervals, verdicts, the history) → attribute
(attribution.py: why each rung moved) → render (render/) → publish (publish.py, index.py: only
writes)."""
