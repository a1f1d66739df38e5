"""What the analysis reports share and the readers do not: interval arithmetic and value helpers."""
