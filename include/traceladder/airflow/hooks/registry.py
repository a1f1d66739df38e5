"""The image registry behind an Airflow connection: the hook hands the connection to this package's
read-only Docker Registry HTTP API v2 client (docker_registry.py), which lists the triage's image
candidates. The password stays in the connection: it is handed to the client and never logged."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from traceladder.airflow.hooks.docker_registry import RegistryClient

DEFAULT_CONN_ID = "traceladder_registry"


class RegistryHook(BaseHook):
    """A `traceladder_registry` connection: host (``127.0.0.1:5000``, ``https://registry.example``),
    port, login and password (a Basic challenge or a Bearer token request); extra ``token`` sends a
    bearer token outright. No connection at all means an anonymous registry: `client(registry)`
    then takes the registry from the image reference."""

    conn_name_attr = "registry_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "traceladder_registry"
    hook_name = "Docker registry (traceladder triage)"

    def __init__(self, registry_conn_id: str = DEFAULT_CONN_ID, timeout_s: float = 30.0) -> None:
        super().__init__()
        self.registry_conn_id = registry_conn_id
        self.timeout_s = timeout_s

    def get_conn(self) -> Any:
        return self.client()

    def client(self, registry: str | None = None) -> RegistryClient:
        """The client for `registry` (the image reference's host), with the connection's
        credentials when the connection exists and names that registry (or names none)."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.registry_conn_id)
        except AirflowNotFoundException:
            conn = None
        host = None
        if conn is not None and conn.host:
            host = conn.host + (f":{conn.port}" if conn.port else "")
        if registry is None and host is None:
            raise ValueError(f"connection {self.registry_conn_id!r}: no host, and no image reference names a registry")
        target = registry or str(host)
        if conn is None or (host is not None and registry is not None and _bare(host) != _bare(registry)):
            # credentials are only sent to the registry the connection names
            return RegistryClient(target, timeout_s=self.timeout_s)
        extra = conn.extra_dejson or {}
        return RegistryClient(
            target,
            username=conn.login or None,
            password=conn.password or None,
            token=str(extra["token"]) if extra.get("token") else None,
            timeout_s=self.timeout_s,
        )

    def __repr__(self) -> str:  # never the password
        return f"RegistryHook({self.registry_conn_id!r})"


def _bare(host: str) -> str:
    return host.split("://", 1)[-1].rstrip("/")
