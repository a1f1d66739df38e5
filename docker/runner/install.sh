#!/bin/sh
# Install the traceladder runner into the image without network (docker/runner/Dockerfile).
# - Base with pip (rocm/primus): pip install --no-deps --no-index the wheel; on a Debian/Ubuntu
#   system Python (PEP 668) add --break-system-packages when that pip knows it.
# - Base without pip (the test stand-in): the package source on the path through a .pth file in
#   site-packages (same effect as PYTHONPATH, without changing the environment Primus sees), and a
#   `traceladder` launcher in /usr/local/bin.
# - Extra wheels (docker/wheels/ in the repository, staged as wheels/extra/): the rocm-trace-lite
#   wheel (`rtl`, in no Primus image) and, when the base lacks boto3, boto3 and its dependencies.
#   RTL_WHEEL (a build argument: a wheel URL or a path in the context) is pip-installed too.
# Then a smoke check: the runner path imports with the standard library + boto3 only.
set -eu
PY="$(command -v python3 || command -v python)"
HAVE_PIP=0
"$PY" -m pip --version >/dev/null 2>&1 && HAVE_PIP=1
pip_install() {
  if "$PY" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    "$PY" -m pip install --no-cache-dir --break-system-packages "$@"
  else
    "$PY" -m pip install --no-cache-dir "$@"
  fi
}
if [ "$HAVE_PIP" = 1 ]; then
  pip_install --no-deps --no-index /opt/traceladder/wheels/traceladder-*.whl
  rm -rf /opt/traceladder/lib
  echo "install.sh: traceladder installed with pip (--no-deps)"
else
  site="$("$PY" -c 'import site, sys; print((site.getsitepackages() or [sys.prefix])[0])')"
  mkdir -p "$site"
  echo /opt/traceladder/lib > "$site/traceladder.pth"
  cat > /usr/local/bin/traceladder <<LAUNCH
#!$PY
import sys
from traceladder.cli.main import main
sys.exit(main())
LAUNCH
  chmod 0755 /usr/local/bin/traceladder
  echo "install.sh: no pip; traceladder on the path through $site/traceladder.pth"
fi

# Extra wheels. boto3's family only when the base lacks boto3 (Primus v26.4-v26.5.1 pin it).
extra=""
for w in /opt/traceladder/wheels/extra/*.whl; do
  [ -e "$w" ] || continue
  case "$(basename "$w")" in
    boto3-*|botocore-*|s3transfer-*|jmespath-*|python_dateutil-*|urllib3-*|six-*)
      "$PY" -c "import boto3" 2>/dev/null && continue ;;
  esac
  extra="$extra $w"
done
if [ -n "$extra" ]; then
  if [ "$HAVE_PIP" = 1 ]; then
    # shellcheck disable=SC2086
    pip_install --no-index --find-links /opt/traceladder/wheels/extra $extra
  else
    # shellcheck disable=SC2086
    "$PY" /opt/traceladder/install_wheels.py $extra
  fi
fi
if [ -n "${RTL_WHEEL:-}" ]; then
  [ "$HAVE_PIP" = 1 ] || { echo "install.sh: RTL_WHEEL=$RTL_WHEEL needs pip in BASE_IMAGE; put the wheel in docker/wheels/ instead" >&2; exit 1; }
  pip_install "$RTL_WHEEL"
fi
if ! "$PY" -c "import boto3" 2>/dev/null; then
  echo "install.sh: boto3 is missing in BASE_IMAGE and docker/wheels/ has no boto3 wheels; run 'pip download boto3 -d docker/wheels' on a machine with network and rebuild" >&2
  exit 1
fi
if command -v rtl >/dev/null; then echo "install.sh: rtl: $(rtl --version 2>&1 | head -1)"; else echo "install.sh: rtl: not installed (the rocm_trace_lite lens will fail its preflight)"; fi

"$PY" - <<'CHECK'
import sys
import boto3  # noqa: F401
import traceladder.cli.main, traceladder.runner.rung, traceladder.rung_spec  # noqa: F401
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"pydantic", "yaml", "numpy", "pandas", "torch", "airflow"})
assert not heavy, f"the runner path imported {heavy}"
print("install.sh: runner imports ok")
CHECK
traceladder run-rung --help >/dev/null
