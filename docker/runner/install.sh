#!/bin/sh
# Install the traceladder runner into the image without network (docker/runner/Dockerfile).
# - Base with pip (rocm/primus): pip install --no-deps --no-index the wheel; on a Debian/Ubuntu
#   system Python (PEP 668) add --break-system-packages when that pip knows it.
# - Base without pip (the test stand-in): the package source on the path through a .pth file in
#   site-packages (same effect as PYTHONPATH, without changing the environment Primus sees), and a
#   `traceladder` launcher in /usr/local/bin.
# Then a smoke check: the runner path imports with the standard library + boto3 only.
set -eu
PY="$(command -v python3 || command -v python)"
if "$PY" -m pip --version >/dev/null 2>&1; then
  wheel="$(ls /opt/traceladder/wheels/traceladder-*.whl)"
  if "$PY" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    "$PY" -m pip install --no-deps --no-index --no-cache-dir --break-system-packages "$wheel"
  else
    "$PY" -m pip install --no-deps --no-index --no-cache-dir "$wheel"
  fi
  rm -rf /opt/traceladder/lib
  echo "install.sh: traceladder installed with pip (--no-deps)"
else
  site="$("$PY" -c 'import site, sys; print((site.getsitepackages() or [sys.prefix])[0])')"
  mkdir -p "$site"
  echo /opt/traceladder/lib > "$site/traceladder.pth"
  cat > /usr/local/bin/traceladder <<LAUNCH
#!$PY
import sys
from traceladder.cli import main
sys.exit(main())
LAUNCH
  chmod 0755 /usr/local/bin/traceladder
  echo "install.sh: no pip; traceladder on the path through $site/traceladder.pth"
fi
"$PY" - <<'CHECK'
import sys
import boto3  # noqa: F401
import traceladder.cli, traceladder.runner.rung, traceladder.runner.spec  # noqa: F401
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"pydantic", "yaml", "numpy", "pandas", "torch", "airflow"})
assert not heavy, f"the runner path imported {heavy}"
print("install.sh: runner imports ok")
CHECK
traceladder run-rung --help >/dev/null
