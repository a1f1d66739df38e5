"""`traceladder up` / `make up`: the embedded S3 and a local Airflow (api-server, scheduler,
dag-processor, triggerer on LocalExecutor) with the project's DAGs, plugin and pools, in the
foreground until Ctrl-C. State lives in `.traceladder/` (git-ignored): a second `up` finds the
same database, logins and S3 objects (the same folders `make demo` uses)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from traceladder.config.loader import REPO_ROOT
from traceladder.core import env_vars

STATE_DIR = REPO_ROOT / ".traceladder"
# The stack drops the caller's TRACELADDER_* variables; these two choose what it shows, so they pass.
PASS_THROUGH = (env_vars.LADDERS_DIR.name, env_vars.CLUSTERS_FILE.name)
DEFAULT_PORT = 8080


def passed_env(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """What `up` hands the stack: the ladders/clusters choice, and the caller's Airflow
    connections (a Slurm login node's `AIRFLOW_CONN_TRACELADDER_SLURM`, docs/slurm.md) except the S3
    one, which is the embedded server's."""
    return {
        k: v
        for k, v in env.items()
        if k in PASS_THROUGH or (k.startswith("AIRFLOW_CONN_") and k != "AIRFLOW_CONN_TRACELADDER_S3")
    }


def say(message: str) -> None:
    print(f"[up] {message}", file=sys.stderr, flush=True)


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_up(state_dir: Path = STATE_DIR, port: int | None = None) -> int:
    from traceladder.embedded.local_stack import LocalStack, port_free

    if port is None:
        port = DEFAULT_PORT if port_free(DEFAULT_PORT) else None  # None: a free port
    stack = LocalStack(state_dir, port=port, extra_env=passed_env(os.environ))
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    # Ctrl-C stops us even when we were started with SIGINT ignored (a background job of a
    # non-interactive shell, nohup): Python then leaves SIGINT ignored, and Ctrl-C did nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    say(f"state in {state_dir} (delete it to start afresh)")
    say("starting S3, migrating Airflow, importing pools, serializing the DAGs, then the four components ...")
    started = time.monotonic()
    try:
        stack.start()
        ladders = stack.dag_ids(tag="ladder")
        print(f"Airflow:  {stack.url}  (up in {time.monotonic() - started:.0f} s)", flush=True)
        print(f"Ladders:  {stack.url}/plugin/ladders", flush=True)
        print(
            f"S3:       {stack.s3.endpoint_url}  bucket {stack.s3.bucket}  "
            f"(credentials in {stack.s3.dir}/s3_identities.json)",
            flush=True,
        )
        print(
            f"DAGs:     traceladder-trigger (unpaused: its form runs a ladder now); "
            f"{', '.join(ladders)} (paused until you unpause)",
            flush=True,
        )
        print(f"Logs:     {stack.home}/logs/stack/   Ctrl-C stops everything started here.", flush=True)
        print(f"Login:    admin / {stack.passwords['admin']}   (viewer / {stack.passwords['viewer']})", flush=True)
        while True:
            stack.check_alive()
            time.sleep(2)
    except KeyboardInterrupt:
        say("stopping")
        return 0
    finally:
        stack.stop()
        say("stopped")
