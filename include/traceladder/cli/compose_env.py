"""The compose stack's Airflow containers start through this (docker/airflow/docker-compose.yaml):

    python -m traceladder.cli.compose_env airflow scheduler

It reads the stack's secrets (``env_vars.COMPOSE_SECRETS``), each from its variable or, when that
is empty, from the file its ``_FILE`` names (compose's ``secrets:`` under /run/secrets/), builds
the Airflow settings that hold them (the metadata database URL, the Celery result backend, the
API keys, the S3 connection) and replaces itself with the command. A setting already in the
environment is kept. Nothing here prints a value: a missing secret or a bad file is one line on
stderr naming the variable or the file, and exit 2.

The secrets then live only in the command's own environment, never in the container's
configuration (``docker inspect``), the compose file or a committed file."""

from __future__ import annotations

import json
import os
import sys
from typing import Mapping, Sequence
from urllib.parse import quote

from traceladder.core import env_vars
from traceladder.core.errors import TraceladderError

#: The compose services' names for the database and S3 (the compose file's own network names).
DB_URL = "postgresql+psycopg2://airflow:{password}@postgres/airflow"
S3_ENDPOINT_URL = "http://s3:8333"
S3_CONN = "AIRFLOW_CONN_TRACELADDER_S3"


class ComposeSecretError(TraceladderError, ValueError):
    """A secret of the compose stack given neither as its variable nor as its file."""


def resolve(env: Mapping[str, str], names: Sequence[str] = env_vars.COMPOSE_SECRETS) -> dict[str, str]:
    """The secrets ``names`` (default: every compose secret) by name, from the variable or its file."""
    found = {name: env_vars.secret(name, env) for name in names}
    missing = [name for name, value in found.items() if value is None]
    if missing:
        raise ComposeSecretError(
            f"not set: {', '.join(missing)} (give each as the variable, or as NAME{env_vars.FILE_SUFFIX} naming a "
            "file such as /run/secrets/<name>)"
        )
    return {name: value for name, value in found.items() if value is not None}


def airflow_env(secrets: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The Airflow variables built from the secrets, less those ``env`` already sets."""
    # psycopg2 reads the URL's password percent-decoded: quote every reserved character
    db_url = DB_URL.format(password=quote(secrets["POSTGRES_PASSWORD"], safe=""))
    s3_conn = {
        "conn_type": "aws",
        "login": secrets["S3_ACCESS_KEY"],
        "password": secrets["S3_SECRET_KEY"],
        "extra": {
            "endpoint_url": env.get("S3_ENDPOINT_URL") or S3_ENDPOINT_URL,
            "config_kwargs": {"s3": {"addressing_style": "path"}},
        },
    }
    built = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + db_url,
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets["AIRFLOW_JWT_SECRET"],
        "AIRFLOW__API__SECRET_KEY": secrets["AIRFLOW_API_SECRET_KEY"],
        "AIRFLOW__CORE__FERNET_KEY": secrets["AIRFLOW_FERNET_KEY"],
        S3_CONN: json.dumps(s3_conn),
    }
    return {name: value for name, value in built.items() if not env.get(name)}


def command_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment the command runs with: ``env`` and the Airflow variables built from the
    secrets (the secrets' own variables are not added: Airflow reads only what is built)."""
    return {**env, **airflow_env(resolve(env), env)}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("compose_env: give the command to run, e.g. airflow scheduler", file=sys.stderr)
        return 2
    try:
        env = command_env(os.environ)
    except TraceladderError as exc:
        print(f"compose_env: {exc}", file=sys.stderr)
        return 2
    try:
        os.execvpe(args[0], args, env)  # noqa: S606 - the entrypoint becomes the command, as exec does
    except OSError as exc:
        print(f"compose_env: cannot run {args[0]}: {exc.strerror}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main())
