"""Every ``TRACELADDER_*`` environment variable the package reads or hands on, with its default, and
the limits a ladder and a trigger must stay within: the one place they are spelled (standard
library only: the runner image reads them too). ``workload/`` keeps its own, since it runs alone.

A module reads a setting as ``SPOOL_DIR.get(env)``; one that sets a variable for a child process
(a container, a Slurm job) writes ``{SPOOL_DIR.name: value}``. An empty value counts as unset.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping

from traceladder.core.errors import TraceladderError

#: Every traceladder variable starts with this (the local stack drops them from its children).
PREFIX = "TRACELADDER_"

#: The S3 bucket when neither the cluster file nor ``TRACELADDER_S3_BUCKET`` names one.
DEFAULT_BUCKET = "traceladder"


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, its default (None: none) and what it holds."""

    name: str
    default: str | None
    holds: str

    def get(self, env: Mapping[str, str] | None = None) -> str | None:
        """The value in ``env`` (default: the process environment), else the default."""
        value = (os.environ if env is None else env).get(self.name)
        return value if value else self.default

    def is_set(self, env: Mapping[str, str] | None = None) -> bool:
        return bool((os.environ if env is None else env).get(self.name))

    def over(self, fallback: str, env: Mapping[str, str] | None = None) -> str:
        """The value in ``env`` when set, else ``fallback`` (a file's own value, which the variable
        overrides), never the default."""
        value = (os.environ if env is None else env).get(self.name)
        return value if value else fallback


def _setting(suffix: str, default: str | None, holds: str) -> Setting:
    return Setting(PREFIX + suffix, default, holds)


# ---- configuration -------------------------------------------------------------------------------
LADDERS_DIR = _setting("LADDERS_DIR", None, "the folder of ladder files (default: the packaged configs)")
CLUSTERS_FILE = _setting("CLUSTERS_FILE", None, "the clusters file (default: the packaged clusters.yaml)")

# ---- storage -------------------------------------------------------------------------------------
S3_BUCKET = _setting("S3_BUCKET", DEFAULT_BUCKET, "the S3 bucket (overrides the cluster file's)")
S3_ENDPOINT = _setting("S3_ENDPOINT", None, "the S3 endpoint URL (default: AWS's)")
SPOOL_DIR = _setting(
    "SPOOL_DIR", None, "where a runner spools artifacts S3 refused (default ~/.cache/traceladder/spool)"
)
S3_RETRY_BUDGET_S = _setting("S3_RETRY_BUDGET_S", "120", "seconds a runner keeps retrying S3 before it spools")

# ---- runner and hosts ----------------------------------------------------------------------------
NODE_DIR = _setting("NODE_DIR", None, "a multi-node rung's per-node folder")
SHARED_DIR = _setting("SHARED_DIR", None, "a Slurm rung's folder shared by its nodes")
WORKLOADS_DIR = _setting(
    "WORKLOADS_DIR", None, "where local workloads record their process groups (default: beside the spool)"
)
WARM_LAUNCHER = _setting(
    "WARM_LAUNCHER", "1", "0 runs every local rung as a cold subprocess (no warm launcher, runner/forkserver_client.py)"
)
WARM_IDLE_S = _setting(
    "WARM_IDLE_S", "7", "seconds a warm launcher waits for its DAG run's next rung or look before it exits (its lease)"
)
IMAGE_ID = _setting("IMAGE_ID", None, "the runner image's id, for provenance (set by the operator)")
IMAGE_DIGEST = _setting("IMAGE_DIGEST", None, "the runner image's digest, for provenance (set by the operator)")
BUILD = _setting("BUILD", None, "the build catalog entry a rung runs, for provenance (set by the plan from `build:`)")
CONTAINER_NOFILE = _setting("CONTAINER_NOFILE", "1048576", "the rung container's open-file limit")
MIN_FREE_GB = _setting("MIN_FREE_GB", "20", "free disk a Docker host needs before a rung")

# ---- the Ladders page -------------------------------------------------------------------------------
UI_CACHE = _setting("UI_CACHE", "1", "0 turns the Ladders page's in-process caches off (the page-load bench's before)")

# ---- development -----------------------------------------------------------------------------------
WEED_BINARY = _setting("WEED_BINARY", None, "the SeaweedFS `weed` binary for the embedded S3")

ALL: tuple[Setting, ...] = (
    LADDERS_DIR,
    CLUSTERS_FILE,
    S3_BUCKET,
    S3_ENDPOINT,
    SPOOL_DIR,
    S3_RETRY_BUDGET_S,
    NODE_DIR,
    SHARED_DIR,
    WORKLOADS_DIR,
    WARM_LAUNCHER,
    WARM_IDLE_S,
    IMAGE_ID,
    IMAGE_DIGEST,
    BUILD,
    CONTAINER_NOFILE,
    MIN_FREE_GB,
    UI_CACHE,
    WEED_BINARY,
)

# ---- secrets: a variable or its file ----------------------------------------------------------------
#: ``NAME_FILE`` names the file that holds secret ``NAME`` (compose's file-based ``secrets:``,
#: mounted at /run/secrets/<secret>).
FILE_SUFFIX = "_FILE"

#: The compose stack's secrets (docker/airflow/docker-compose.yaml), each given as the variable or
#: as its ``_FILE``; ``traceladder.cli.compose_env`` builds the Airflow settings from them.
COMPOSE_SECRETS: tuple[str, ...] = (
    "POSTGRES_PASSWORD",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_FERNET_KEY",
    "S3_ACCESS_KEY",
    "S3_SECRET_KEY",
)


class SecretFileError(TraceladderError, OSError):
    """A secret's ``_FILE`` that cannot be read or is empty; the message names the variable and
    the file, never any content."""


def secret(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """Secret ``name``: the variable when it is non-empty; else the text of the file that
    ``name_FILE`` names, without its trailing newlines (compose secrets files usually end in one);
    else None. The variable wins over the file, so a value in the environment overrides a
    mounted secret. A file that is named but unreadable or empty is a :class:`SecretFileError`."""
    source = os.environ if env is None else env
    value = source.get(name)
    if value:
        return value
    file_var = name + FILE_SUFFIX
    path = source.get(file_var)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise SecretFileError(f"{file_var}={path}: cannot read the secret file ({reason})") from None
    if not text:
        raise SecretFileError(f"{file_var}={path}: the secret file is empty")
    return text


# ---- durations (retention limits, spool ages) -------------------------------------------------------
_DURATION = re.compile(r"^([1-9][0-9]*)([hdw])$")
_DURATION_UNIT = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}


class DurationError(TraceladderError, ValueError):
    """Not a duration such as 8w, 30d or 12h; the message names the field."""


def duration(text: object, field_name: str) -> timedelta:
    """``8w`` / ``30d`` / ``12h`` -> timedelta; anything else is a one-line error naming the field."""
    m = _DURATION.match(str(text).strip()) if isinstance(text, (str, int)) and not isinstance(text, bool) else None
    if m is None:
        raise DurationError(f"{field_name}: {text!r} is not a duration such as 8w, 30d or 12h")
    return int(m.group(1)) * _DURATION_UNIT[m.group(2)]


# ---- limits --------------------------------------------------------------------------------------
#: A ladder file's `repeats` and `lenses.repeats` (blocks per rung).
MAX_REPEATS = 50

#: The trigger form's largest `repeats`: the trigger DAG has slots for this many blocks per kind.
TRIGGER_MAX_REPEATS = 5
