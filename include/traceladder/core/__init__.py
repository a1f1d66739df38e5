"""The bottom of the package, standard library only: the storage layout, settings, errors and the
process-group helpers (issue 29)."""
