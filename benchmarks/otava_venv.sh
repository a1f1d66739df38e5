#!/usr/bin/env bash
# Install Apache Otava (PyPI, apache-otava) into a venv of its own, for the bench that replays the
# same histories through it and through traceladder's detector (bench_changes_vs_otava.py). It pins
# an older numpy than the product's, so it never goes into the product's .venv.
# usage: benchmarks/otava_venv.sh [VENV_DIR]   (default: ${TMPDIR:-/tmp}/otava-venv)
# Prints the venv's python last.
set -eu
venv=${1:-${TMPDIR:-/tmp}/otava-venv}
version=0.8.0
if ! "$venv/bin/python" -c "import otava.analysis" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "apache-otava==$version" >/dev/null
fi
echo "$venv/bin/python"
