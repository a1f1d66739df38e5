"""The offline noise model and simulated ladders (used only by the tests and benchmarks)."""
