"""The Airflow provider (airflow/provider.py): its info is what Airflow's providers manager accepts,
every path it names imports and is of the kind it is listed as, the Slurm connection type reads
both `slurm` and `ssh` connections, and plugins/traceladder_ui.py defers to the installed entry
point. The api-server side (Providers REST API, hook_meta, the Ladders page with no plugins
folder) is tests/integration/test_provider_install.py."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json

import pytest

from traceladder.airflow.provider import get_provider_info
from tests.conftest import REPO_ROOT

REPO = REPO_ROOT


def _class(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_provider_info_is_valid_for_airflows_providers_manager() -> None:
    from airflow.providers_manager import (
        _create_customized_form_field_behaviours_schema_validator,
        _create_provider_info_schema_validator,
    )

    info = get_provider_info()
    _create_provider_info_schema_validator().validate(info)
    assert [c["connection-type"] for c in info["connection-types"]] == ["slurm", "traceladder_registry"]
    for conn in info["connection-types"]:
        behaviour = conn["ui-field-behaviour"]
        _create_customized_form_field_behaviours_schema_validator().validate(
            {
                "hidden_fields": behaviour["hidden-fields"],
                "relabeling": behaviour["relabeling"],
                "placeholders": behaviour["placeholders"],
            }
        )
    assert info["package-name"] == "traceladder" and info["versions"] == ["0.1.0"]
    assert json.loads(json.dumps(info)) == info  # plain data, as Airflow caches it


def test_every_listed_module_and_class_is_of_its_kind() -> None:
    from airflow.sdk import BaseHook, BaseNotifier, BaseOperator
    from airflow.triggers.base import BaseTrigger

    from traceladder.ui.plugin import TraceladderUIPlugin

    info = get_provider_info()
    kinds = {"hooks": BaseHook, "operators": BaseOperator, "triggers": BaseTrigger}
    for section, base in kinds.items():
        modules = [m for entry in info[section] for m in entry["python-modules"]]
        assert modules, section
        for name in modules:
            module = importlib.import_module(name)
            found = [
                v for v in vars(module).values() if isinstance(v, type) and issubclass(v, base) and v.__module__ == name
            ]
            assert found, f"{name} defines no {base.__name__}"
    assert all(issubclass(_class(path), BaseNotifier) for path in info["notifications"])
    (plugin,) = info["plugins"]
    assert _class(plugin["plugin-class"]) is TraceladderUIPlugin and plugin["name"] == TraceladderUIPlugin.name


def test_the_slurm_connection_type_is_the_hooks_and_its_fields_are_sshhooks_extras() -> None:
    from traceladder.airflow.hooks.slurm import SlurmHook

    conn = get_provider_info()["connection-types"][0]
    hook = _class(conn["hook-class-name"])
    assert hook is SlurmHook
    assert (conn["connection-type"], conn["hook-name"]) == (SlurmHook.conn_type, SlurmHook.hook_name)
    assert SlurmHook.conn_name_attr == "ssh_conn_id" and SlurmHook().ssh_conn_id == SlurmHook.default_conn_name
    assert set(conn["conn-fields"]) == {"key_file", "private_key", "host_key", "no_host_key_check"}
    assert conn["conn-fields"]["private_key"]["schema"]["format"] == "password"  # masked in the form


@pytest.mark.parametrize("conn_type", ["slurm", "ssh"])
def test_slurm_hook_reads_a_slurm_or_an_ssh_connection(monkeypatch: pytest.MonkeyPatch, conn_type: str) -> None:
    from airflow.sdk import BaseHook

    from traceladder.airflow.hooks.slurm import SlurmHook

    extra = {"key_file": "/keys/id_ed25519", "no_host_key_check": True}
    doc = {"conn_type": conn_type, "host": "login.example", "login": "tl", "port": 2222, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_CLUSTER_LOGIN", json.dumps(doc))
    hook = SlurmHook(ssh_conn_id="cluster_login")
    assert isinstance(hook, BaseHook)
    ssh = hook.ssh  # the SSH provider's hook, as the worker uses it; nothing connects yet
    assert (ssh.remote_host, ssh.username, ssh.port) == ("login.example", "tl", 2222)
    assert (ssh.key_file, ssh.no_host_key_check) == ("/keys/id_ed25519", True)


def test_the_registry_hook_reads_its_connection_and_never_shows_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from traceladder.airflow.hooks.registry import RegistryHook

    conn = get_provider_info()["connection-types"][1]
    assert _class(conn["hook-class-name"]) is RegistryHook and conn["connection-type"] == RegistryHook.conn_type
    doc = {"conn_type": "traceladder_registry", "host": "127.0.0.1", "port": 5000, "login": "ci", "password": "s3cr3t"}
    monkeypatch.setenv("AIRFLOW_CONN_TRACELADDER_REGISTRY", json.dumps(doc))
    hook = RegistryHook()
    client = hook.client("127.0.0.1:5000")
    assert (client.host, client._credentials) == ("127.0.0.1:5000", ("ci", "s3cr3t"))
    assert "s3cr3t" not in repr(hook)
    # credentials go only to the registry the connection names
    assert hook.client("registry.example.org")._credentials is None


def _load_plugins_file() -> dict[str, object]:
    """plugins/traceladder_ui.py loaded as Airflow's plugins-folder loader loads it."""
    path = REPO / "plugins" / "traceladder_ui.py"
    loader = importlib.machinery.SourceFileLoader("traceladder_ui_probe", str(path))
    spec = importlib.util.spec_from_loader("traceladder_ui_probe", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return vars(module)


def _plugin_classes(namespace: dict[str, object]) -> list[object]:
    from airflow.plugins_manager import is_valid_plugin

    return [v for v in namespace.values() if is_valid_plugin(v)]


def test_the_plugins_folder_file_defers_to_the_installed_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceladder.ui.plugin import ENTRY_POINT, TraceladderUIPlugin

    installed = importlib.metadata.EntryPoint("traceladder_ui", ENTRY_POINT, "airflow.plugins")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [installed])
    assert _plugin_classes(_load_plugins_file()) == []  # Airflow loads it once, from the entry point
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [])
    assert _plugin_classes(_load_plugins_file()) == [TraceladderUIPlugin]  # not installed: the folder's


def test_pyproject_registers_the_provider_and_the_plugin() -> None:
    import tomllib

    from traceladder.ui.plugin import ENTRY_POINT

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    points = project["entry-points"]
    assert points["apache_airflow_provider"] == {"provider_info": "traceladder.airflow.provider:get_provider_info"}
    assert points["airflow.plugins"] == {"traceladder_ui": ENTRY_POINT}
