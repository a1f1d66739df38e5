"""Pure statistics: the block model, verdicts and history change points."""
