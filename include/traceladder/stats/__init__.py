"""Pure statistics: the block model, verdicts and history change points; `simulation/` holds what
only the tests and benchmarks use."""
