"""The bottom layer, standard library only: the storage layout, environment variables, errors, the
process-group helpers and the stage documents (issue 29)."""
