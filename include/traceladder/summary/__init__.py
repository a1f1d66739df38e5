"""Per-run summaries: collect results, estimate with intervals, render and publish."""
