"""The installed package as an Airflow provider (issue 52): a real `airflow api-server` with the
repository's DAG files and an empty plugins folder, so that everything traceladder adds to Airflow
comes from the package's entry points (`apache_airflow_provider`, `airflow.plugins`; pyproject.toml).

The server runs this interpreter's `airflow`, in an environment without PYTHONPATH: it imports the
package as installed there (`make setup`: an editable install with its entry points). Where the
interpreter's environment lacks those entry points (a venv set up before they existed, or another
checkout's install), the test is unavailable: a failure in CI, a skip elsewhere."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest

from testkit.needs import unavailable
from tests.integration.ui_session import api_server
from traceladder.ui.plugin import ENTRY_POINT

PROVIDER_ENTRY_POINT = "traceladder.airflow.provider:get_provider_info"
CHECKOUT_PACKAGE = Path(__file__).resolve().parents[2] / "include" / "traceladder"


def _installed_here() -> None:
    """The provider and plugin entry points exist, and the package they load is this checkout's."""
    providers = [ep for ep in importlib.metadata.entry_points(group="apache_airflow_provider")]
    plugins = [ep for ep in importlib.metadata.entry_points(group="airflow.plugins")]
    if not any(ep.value == PROVIDER_ENTRY_POINT for ep in providers) or not any(
        ep.value == ENTRY_POINT for ep in plugins
    ):
        unavailable("traceladder's entry points are not installed in this interpreter's environment (make setup)")
    dist = importlib.metadata.distribution("traceladder")
    direct = dist.read_text("direct_url.json") or ""
    if CHECKOUT_PACKAGE.parent.parent.as_uri() not in direct:
        unavailable(f"the installed traceladder is not this checkout ({direct.strip() or 'not an editable install'})")


@pytest.fixture(scope="module")
def server(s3_server, tmp_path_factory: pytest.TempPathFactory):
    _installed_here()
    empty = tmp_path_factory.mktemp("no-plugins")  # nothing from the repository's plugins/ folder
    with api_server(
        "provider", s3_server.airflow_conn_uri_json(), extra_env={"AIRFLOW__CORE__PLUGINS_FOLDER": str(empty)}
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def admin(server):
    with server.client("admin") as c:
        yield c


def test_the_providers_api_lists_traceladder(admin) -> None:
    resp = admin.get("/api/v2/providers", params={"limit": 1000})
    assert resp.status_code == 200, resp.text
    ours = [p for p in resp.json()["providers"] if p["package_name"] == "traceladder"]
    assert len(ours) == 1, [p["package_name"] for p in resp.json()["providers"]]
    assert ours[0]["version"] == importlib.metadata.version("traceladder")
    assert "Profiling ladders" in ours[0]["description"]


def test_the_plugin_comes_from_the_entry_point_once_with_no_import_error(admin) -> None:
    plugins = admin.get("/api/v2/plugins").json()["plugins"]
    ours = [p for p in plugins if p["name"] == "traceladder_ui"]
    assert len(ours) == 1, [p["name"] for p in plugins]
    assert "traceladder.ui.plugin" in ours[0]["source"] and "$PLUGINS_FOLDER" not in ours[0]["source"]
    assert [(a["name"], a["url_prefix"]) for a in ours[0]["fastapi_apps"]] == [("traceladder", "/traceladder")]
    errors = admin.get("/api/v2/plugins/importErrors").json()["import_errors"]
    assert errors == [], errors


def test_the_ladders_page_loads(server) -> None:
    from traceladder.config import ladder_files

    with server.client("viewer") as viewer:
        resp = viewer.get("/traceladder/")
    assert resp.status_code == 200, resp.text[:500]
    for path in ladder_files():
        assert f'data-ladder="{path.stem}"' in resp.text


def test_hook_meta_serves_the_slurm_connection_form(admin) -> None:
    resp = admin.get("/ui/connections/hook_meta")
    assert resp.status_code == 200, resp.text
    (slurm,) = [m for m in resp.json() if m["connection_type"] == "slurm"]
    assert slurm["hook_class_name"] == "traceladder.airflow.hooks.slurm.SlurmHook"
    assert slurm["hook_name"] == "Slurm (login node over SSH)"
    extra: dict[str, Any] = slurm["extra_fields"]
    assert set(extra) == {"key_file", "private_key", "host_key", "no_host_key_check"}, extra
    assert extra["key_file"]["schema"]["title"] == "Private key file"
    assert extra["no_host_key_check"]["value"] is False
    standard = slurm["standard_fields"]
    assert standard["host"] == {"hidden": False, "title": "Login node", "placeholder": "slurm-login.example.org"}
    assert standard["login"]["title"] == "Username" and standard["port"]["placeholder"] == "22"
    assert standard["url_schema"]["hidden"] is True  # a login node has no schema
