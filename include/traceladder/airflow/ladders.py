"""A ladder by name, and the artifact store behind its cluster's Airflow connection: what the
task bodies and the operators both need (its own module, so operators need not import the tasks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceladder.config.models import StorageSettings
from traceladder.storage.artifacts import ArtifactSink

if TYPE_CHECKING:
    from traceladder.config.loader import LoadedLadder
    from traceladder.config.models import AlertSettings
    from traceladder.triage.alerts import AlertStore


def s3_client(conn_id: str) -> Any:
    """A boto3 S3 client behind an Airflow `aws` connection (its extra may hold `endpoint_url`),
    through the Amazon provider's hook: the one builder of the tasks, the operators and the
    retention DAG (the Ladders page adds its own timeouts in ui/data.py)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook(aws_conn_id=conn_id).get_conn()


def store_for(ladder_name: str, storage: StorageSettings) -> ArtifactSink:
    """The S3 store of a ladder behind its cluster's connection."""
    from traceladder.storage.artifacts import S3ArtifactStore

    return S3ArtifactStore(s3_client(storage.conn_id), storage.effective_bucket, storage.prefix, ladder_name)


def alert_store() -> tuple[AlertSettings, AlertStore]:
    """The clusters file's `alerts:` and the deployment's alert store behind its connection."""
    from traceladder.config.loader import load_clusters
    from traceladder.triage.alerts import store_for as alerts_on

    settings = load_clusters().alerts
    return settings, alerts_on(settings, s3_client(settings.conn_id))


def open_ladder(ladder: str) -> LoadedLadder:
    from traceladder.config import find_ladder, load_ladder

    return load_ladder(find_ladder(ladder))


def ladder_store(ladder: str) -> tuple[LoadedLadder, ArtifactSink]:
    loaded = open_ladder(ladder)
    storage = loaded.cluster.storage
    return loaded, store_for(loaded.ladder.ladder, storage)
