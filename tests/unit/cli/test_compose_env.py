"""The compose stack's secrets (issue 30, item 4): each from its variable or from the file its
``_FILE`` names (compose's ``secrets:``, /run/secrets/), the variable winning when both are given;
a bad file is one line naming the variable and the file, and never shows a value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from traceladder.cli import compose_env
from traceladder.core import env_vars

VALUES = {
    "POSTGRES_PASSWORD": "pg/pass:word@1",  # reserved URL characters: the URL must quote them
    "AIRFLOW_JWT_SECRET": "jwt-secret-value",
    "AIRFLOW_API_SECRET_KEY": "api-secret-value",
    "AIRFLOW_FERNET_KEY": "fernet-key-value=",
    "S3_ACCESS_KEY": "tl-access",
    "S3_SECRET_KEY": 'secret"with\\quotes',  # JSON-escaped in the connection
}


def _files(tmp_path: Path, values: dict[str, str]) -> dict[str, str]:
    """Each secret written to its own file (with the newline an editor leaves); the _FILE variables."""
    env = {}
    for name, value in values.items():
        path = tmp_path / name.lower()
        path.write_text(value + "\n")
        env[name + env_vars.FILE_SUFFIX] = str(path)
    return env


def test_the_variable_wins_and_the_file_is_read_only_when_it_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "s3_secret_key"
    path.write_text("from-the-file\r\n")
    assert env_vars.secret("S3_SECRET_KEY", {"S3_SECRET_KEY_FILE": str(path)}) == "from-the-file"
    both = {"S3_SECRET_KEY": "from-env", "S3_SECRET_KEY_FILE": str(path)}
    assert env_vars.secret("S3_SECRET_KEY", both) == "from-env"
    empty_var = {"S3_SECRET_KEY": "", "S3_SECRET_KEY_FILE": str(path)}
    assert env_vars.secret("S3_SECRET_KEY", empty_var) == "from-the-file"
    assert env_vars.secret("S3_SECRET_KEY", {}) is None
    assert env_vars.secret("S3_SECRET_KEY", {"S3_SECRET_KEY_FILE": ""}) is None
    # a value set in the environment never opens the file, even a bad one
    assert env_vars.secret("S3_SECRET_KEY", {"S3_SECRET_KEY": "x", "S3_SECRET_KEY_FILE": "/nonexistent"}) == "x"


def test_a_bad_secret_file_is_one_line_naming_the_variable_and_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "run" / "secrets" / "s3_secret_key"
    with pytest.raises(env_vars.SecretFileError) as err:
        env_vars.secret("S3_SECRET_KEY", {"S3_SECRET_KEY_FILE": str(missing)})
    assert str(err.value) == f"S3_SECRET_KEY_FILE={missing}: cannot read the secret file (No such file or directory)"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(env_vars.SecretFileError, match=rf"^S3_ACCESS_KEY_FILE={empty}: the secret file is empty$"):
        env_vars.secret("S3_ACCESS_KEY", {"S3_ACCESS_KEY_FILE": str(empty)})
    with pytest.raises(env_vars.SecretFileError) as err:
        env_vars.secret("S3_ACCESS_KEY", {"S3_ACCESS_KEY_FILE": str(tmp_path)})  # a folder
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)


def test_the_airflow_settings_are_built_from_files_and_from_the_environment_alike(tmp_path: Path) -> None:
    from_files = compose_env.command_env(_files(tmp_path, VALUES))
    from_env = compose_env.command_env(dict(VALUES))
    built = [
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__CELERY__RESULT_BACKEND",
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__API__SECRET_KEY",
        "AIRFLOW__CORE__FERNET_KEY",
        compose_env.S3_CONN,
    ]
    assert {k: from_files[k] for k in built} == {k: from_env[k] for k in built}
    db = urlsplit(from_files["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert (db.hostname, db.username, unquote(db.password or "")) == (
        "postgres",
        "airflow",
        VALUES["POSTGRES_PASSWORD"],
    )
    assert from_files["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+" + from_files["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    conn = json.loads(from_files[compose_env.S3_CONN])
    assert (conn["login"], conn["password"]) == (VALUES["S3_ACCESS_KEY"], VALUES["S3_SECRET_KEY"])
    assert conn["extra"]["endpoint_url"] == "http://s3:8333"
    assert from_files["AIRFLOW__CORE__FERNET_KEY"] == VALUES["AIRFLOW_FERNET_KEY"]
    # the secrets' own variables are not handed on: Airflow reads only what is built
    assert "POSTGRES_PASSWORD" not in from_files and "S3_SECRET_KEY" not in from_files


def test_a_setting_already_given_is_kept(tmp_path: Path) -> None:
    env = {**_files(tmp_path, VALUES), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://elsewhere/db"}
    assert compose_env.command_env(env)["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == "postgresql://elsewhere/db"


def test_the_entrypoint_runs_the_command_with_the_built_settings_and_prints_no_secret(tmp_path: Path) -> None:
    """The real entrypoint (python -m), as a compose service runs it: the command sees the built
    settings; a missing secret and a bad file each end it with one line and exit 2."""
    script = "import os; print(sorted(k for k in os.environ if k.startswith('AIRFLOW')))"
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    ok = subprocess.run(
        [sys.executable, "-m", "traceladder.cli.compose_env", sys.executable, "-c", script],
        env={**base, **_files(tmp_path, VALUES)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert "AIRFLOW__API_AUTH__JWT_SECRET" in ok.stdout and "AIRFLOW_CONN_TRACELADDER_S3" in ok.stdout
    missing = {k: v for k, v in VALUES.items() if k != "S3_SECRET_KEY"}
    bad = {**missing, "S3_SECRET_KEY_FILE": "/run/secrets/nope"}
    for env, line in (
        (missing, "compose_env: not set: S3_SECRET_KEY (give each as the variable, or as NAME_FILE naming a file"),
        (bad, "compose_env: S3_SECRET_KEY_FILE=/run/secrets/nope: cannot read the secret file (No such file"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "traceladder.cli.compose_env", "true"],
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith(line) and proc.stderr.count("\n") == 1, proc.stderr
        assert not any(v in proc.stderr for v in VALUES.values())
