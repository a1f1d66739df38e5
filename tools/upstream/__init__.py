"""The modules behind ``tools/upstream_facts.py`` (see tools/README.md); not part of traceladder."""
