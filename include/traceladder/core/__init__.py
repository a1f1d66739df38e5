"""The bottom layer: standard library only (stage documents, storage layout, settings, errors)."""
