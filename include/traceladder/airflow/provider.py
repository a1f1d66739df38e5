"""What Airflow's providers manager reads from the installed package: pyproject.toml registers
``get_provider_info`` under the ``apache_airflow_provider`` entry point, so the Providers page,
the connection forms and the hook registry know traceladder once it is ``pip install``ed.

Only names here (module and class paths as strings): Airflow calls this in every component, and
nothing it names is imported until used."""

from __future__ import annotations

from typing import Any

import traceladder

INTEGRATION = "traceladder"
PACKAGE = "traceladder.airflow"

# The Slurm connection's form: the login node's host, port and user are the standard fields; the
# key and host-key checks are SSHHook's own extra keys (it reads a `slurm` connection as it reads
# an `ssh` one), so a connection made in the form works unchanged on the worker and the triggerer.
SLURM_CONN_FIELDS: dict[str, dict[str, Any]] = {
    "key_file": {
        "label": "Private key file",
        "description": "Path of the login node's private key on the Airflow workers and triggerer.",
        "schema": {"type": ["string", "null"]},
    },
    "private_key": {
        "label": "Private key",
        "description": "The private key as PEM text (instead of a key file).",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "host_key": {
        "label": "Host key",
        "description": "The login node's public host key (ssh-ed25519 AAAA...); checked when given.",
        "schema": {"type": ["string", "null"]},
    },
    "no_host_key_check": {
        "label": "Skip the host key check",
        "description": "Accept any host key (a test cluster only).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "traceladder",
        "name": "traceladder",
        "description": "Profiling ladders for Primus training on AMD Instinct: rungs on Docker hosts "
        "or Slurm, TraceLens-style analysis, the Ladders page.",
        "versions": [traceladder.__version__],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["profiling"]}],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [f"{PACKAGE}.hooks.rocm", f"{PACKAGE}.hooks.slurm", f"{PACKAGE}.hooks.registry"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [f"{PACKAGE}.operators.docker", f"{PACKAGE}.operators.slurm"],
            }
        ],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.triggers.slurm"]}],
        "notifications": [
            f"{PACKAGE}.notifications.regression.RegressionNotifier",
            f"{PACKAGE}.notifications.triage.AlertNotifier",
        ],
        "connection-types": [
            {
                "connection-type": "slurm",
                "hook-class-name": f"{PACKAGE}.hooks.slurm.SlurmHook",
                "hook-name": "Slurm (login node over SSH)",
                "conn-fields": SLURM_CONN_FIELDS,
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {"host": "Login node", "login": "Username"},
                    "placeholders": {"host": "slurm-login.example.org", "port": "22"},
                },
            },
            {
                # the triage's image candidates: a Docker Registry v2 (host, port, login, password)
                "connection-type": "traceladder_registry",
                "hook-class-name": f"{PACKAGE}.hooks.registry.RegistryHook",
                "hook-name": "Docker registry (traceladder triage)",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {"host": "Registry", "login": "Username"},
                    "placeholders": {"host": "registry.example.org", "port": "5000"},
                },
            },
        ],
        "plugins": [{"name": "traceladder_ui", "plugin-class": "traceladder.ui.plugin.TraceladderUIPlugin"}],
    }
