"""A summary rendered: markdown, HTML, charts, number formats and the perf CSV."""
