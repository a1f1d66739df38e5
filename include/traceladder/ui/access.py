"""Per-ladder read access: the Ladders page asks Airflow's auth manager about each ladder's DAG.

A ladder's runs, summaries and artifacts are its DAG's runs, so a user may read a ladder exactly
when the auth manager lets them read the runs of that ladder's DAG, ``traceladder-<ladder>``
(``is_authorized_dag(method="GET", access_entity=RUN, details=DagDetails(id=...))``, the question
Airflow's own ``/api/v2/dags/{dag_id}/dagRuns`` asks). Not "can read DAG runs" in general: with
the FAB auth manager a role holding ``can read`` on ``DAG:traceladder-a`` (and on ``DAG Runs``)
sees ladder ``a`` and nothing else; SimpleAuthManager answers by role, so its Viewer reads all.

Runs of ``traceladder-trigger`` are stored under the ladder they ran, so they are shown to whoever
may read that ladder's own DAG. A ladder file that does not load has no DAG; it is shown to those
who may read the DAG its file name would give (``traceladder-<file>``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceladder.ui.data import LadderEntry

# workflows/ladder.py builds the weekly DAG of ladder L as `traceladder-L` (tests check the two agree)
DAG_ID_PREFIX = "traceladder-"


def ladder_dag_id(entry: LadderEntry) -> str:
    """The DAG whose read permission guards this ladder's page and artifacts."""
    return f"{DAG_ID_PREFIX}{entry.name or entry.file}"


def _teams(dag_ids: list[str]) -> dict[str, str | None]:
    """The DAGs' teams, only when multi-team mode is on (as Airflow's own checks pass them)."""
    from airflow.configuration import conf

    if not conf.getboolean("core", "multi_team", fallback=False):
        return {}
    from airflow.models.dag import DagModel

    return DagModel.get_dag_id_to_team_name_mapping(dag_ids)


def _allowed(dag_ids: list[str], user: Any, method: str) -> list[bool]:
    """Whether the user may `method` (GET: read, PUT: edit) the runs of each DAG (one
    auth-manager question each)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    if not dag_ids:
        return []
    manager = get_auth_manager()
    teams = _teams(dag_ids)
    return [
        bool(
            manager.is_authorized_dag(
                method=method,  # type: ignore[arg-type]  # GET or PUT, both ResourceMethods
                access_entity=DagAccessEntity.RUN,
                details=DagDetails(id=dag_id, team_name=teams.get(dag_id)),
                user=user,
            )
        )
        for dag_id in dag_ids
    ]


def readable(entries: list[LadderEntry], user: Any) -> list[LadderEntry]:
    """The entries whose DAG the user may read the runs of (one auth-manager question each)."""
    ids = [ladder_dag_id(e) for e in entries]
    return [entry for entry, ok in zip(entries, _allowed(ids, user, "GET")) if ok]


def ladders_allowed(ladders: list[str], user: Any, method: str) -> dict[str, bool]:
    """{ladder name: whether the user may read (GET) or edit (PUT) its DAG's runs}: the question an
    alert asks of every ladder it covers (ladder names, as alerts store them)."""
    names = list(dict.fromkeys(ladders))
    return dict(zip(names, _allowed([f"{DAG_ID_PREFIX}{n}" for n in names], user, method)))


def can_read(entry: LadderEntry, user: Any) -> bool:
    return bool(readable([entry], user))
