"""Regression triage (issue 51): a suspect rung is confirmed in interleaved A/B blocks, localized by
a bisection over its candidate causes, explained with one profiled run of each end, and recorded
as `triage.json` beside the run it triages. A layer above `summary/`: it reuses the attribution."""
