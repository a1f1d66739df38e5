"""Security (issue 19): per-DAG read access on the Ladders page, with the FAB auth manager.

A real `airflow api-server` (the `AirflowApiServer` harness) runs with
``AIRFLOW__CORE__AUTH_MANAGER=...FabAuthManager`` (apache-airflow-providers-fab). FAB's own CLI
makes two users: ``admin`` (role Admin) and ``reader``, whose custom role may read the runs of one
ladder's DAG only (``can_read`` on the per-DAG resource ``DAG:traceladder-proxy-local`` and on
``DAG Runs``). Each signs in over HTTP (FAB's ``POST /auth/token``) and the test checks what each
sees: the reader's index lists only that ladder, and every URL of the other ladder (its page, a
run, the compare page, an artifact, the trigger) answers 403; the admin sees and reads both.
SimpleAuthManager, the default, answers by role only, so it cannot express this.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import pytest

from tests.integration.airflow_server import AirflowApiServer
from testkit.needs import unavailable
from tests.integration.ui_session import api_server

pytestmark = pytest.mark.faults

FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
READER_ROLE = "traceladder-one-ladder"
PREFIX = "traceladder"  # clusters.yaml: cluster local, storage.prefix
MINE, OTHER = "proxy-local", "proxy-aa"  # the reader may read MINE's DAG, not OTHER's
PROBE_RUN = "per-dag-probe"  # objects under no published run: no other UI test lists them


class FabApiServer(AirflowApiServer):
    """The api-server harness under the FAB auth manager; users and the role made with FAB's CLI."""

    def __init__(self, home: Path, extra_env: dict[str, str]) -> None:
        passwords = {"admin": secrets.token_urlsafe(12), "reader": secrets.token_urlsafe(12)}
        super().__init__(
            home, extra_env={**extra_env, "AIRFLOW__CORE__AUTH_MANAGER": FAB_AUTH_MANAGER}, passwords=passwords
        )

    def _prepare(self) -> None:
        super()._prepare()  # db migrate (FAB's tables too), pools, the DAGs serialized
        self.airflow("sync-perm", "--include-dags")  # the per-DAG resources, DAG:<dag_id>
        self.airflow("roles", "create", READER_ROLE)
        self.airflow("roles", "add-perms", READER_ROLE, "-r", f"DAG:traceladder-{MINE}", "DAG Runs", "-a", "can_read")
        for user, role in (("admin", "Admin"), ("reader", READER_ROLE)):
            self.airflow(
                "users", "create", "--username", user, f"--password={self.passwords[user]}", "--role", role,
                "--email", f"{user}@example.invalid", "--firstname", user, "--lastname", "test",
            )  # fmt: skip


@pytest.fixture(scope="module")
def server(s3_server):
    try:
        import airflow.providers.fab  # noqa: F401
    except ImportError:
        unavailable("apache-airflow-providers-fab is not installed (pip install -r requirements.txt)")
    client = s3_server.client()
    for ladder in (MINE, OTHER):
        key = f"{PREFIX}/{ladder}/{PROBE_RUN}/plan.json"
        client.put_object(Bucket=s3_server.bucket, Key=key, Body=f'{{"ladder": "{ladder}"}}'.encode())
    with api_server("fab-airflow", s3_server.airflow_conn_uri_json(), FabApiServer) as srv:
        yield srv


def _pages(ladder: str) -> list[str]:
    base = f"/traceladder/ladders/{ladder}"
    return [base, f"{base}/runs/{PROBE_RUN}", f"{base}/compare", f"{base}/artifacts/{PROBE_RUN}/plan.json"]


def test_the_auth_manager_is_fab_and_its_dag_ids_are_the_ladders(server) -> None:
    """The harness really runs FAB, and the DAG ids the plugin asks about are the ones Airflow has."""
    from traceladder.config import ladder_files
    from traceladder.ui import access
    from traceladder.ui.data import list_ladders

    with server.client("admin") as admin:
        dags = {d["dag_id"] for d in admin.get("/api/v2/dags", params={"limit": 100}).json()["dags"]}
        assert admin.get("/auth/users/list/").status_code in (200, 302), "FAB's own views are not mounted"
    assert {access.ladder_dag_id(e) for e in list_ladders()} <= dags
    assert len(ladder_files()) >= 2
    with server.client("reader") as reader:  # Airflow's own API already filters per DAG
        seen = {d["dag_id"] for d in reader.get("/api/v2/dags", params={"limit": 100}).json()["dags"]}
    assert seen == {f"traceladder-{MINE}"}


def test_admin_sees_and_reads_every_ladder(server) -> None:
    from traceladder.config import ladder_files

    with server.client("admin") as admin:
        index = admin.get("/traceladder/")
        assert index.status_code == 200, index.text[:300]
        for path in ladder_files():
            assert f'data-ladder="{path.stem}"' in index.text
        for ladder in (MINE, OTHER):
            for page in _pages(ladder):
                resp = admin.get(page)
                assert resp.status_code in (200, 404), (page, resp.status_code, resp.text[:200])
            plan = admin.get(f"/traceladder/ladders/{ladder}/artifacts/{PROBE_RUN}/plan.json")
            assert plan.status_code == 200 and plan.json() == {"ladder": ladder}


def test_a_one_dag_role_sees_only_that_ladder(server) -> None:
    with server.client("reader") as reader:
        index = reader.get("/traceladder/")
        assert index.status_code == 200, index.text[:300]
        assert f'data-ladder="{MINE}"' in index.text
        assert 'data-ladder="' in index.text and index.text.count('data-ladder="') == 1, "other ladders are listed"
        assert OTHER not in index.text
        plan = reader.get(f"/traceladder/ladders/{MINE}/artifacts/{PROBE_RUN}/plan.json")
        assert plan.status_code == 200 and plan.json() == {"ladder": MINE}
        assert reader.get(f"/traceladder/ladders/{MINE}").status_code == 200
        for page in _pages(OTHER):  # a direct URL of the other ladder: 403, and nothing of it
            resp = reader.get(page)
            assert resp.status_code == 403, (page, resp.status_code, resp.text[:200])
            assert f"DAG traceladder-{OTHER}" in resp.json()["detail"]
            assert f'"ladder": "{OTHER}"' not in resp.text
        html = reader.get(f"/traceladder/ladders/{OTHER}", headers={"Accept": "text/html"})
        assert html.status_code == 403 and "text/html" in html.headers["content-type"]
        # the reader may not trigger at all (no permission on traceladder-trigger)
        assert reader.post("/traceladder/trigger", json={"ladder": OTHER}).status_code == 403


def test_signing_in_over_http_is_fab_s_own_login(server) -> None:
    """No token is 401; a wrong password gets no token; each user's token reads as that user."""
    with httpx.Client(base_url=server.url, timeout=60) as anon:
        assert anon.get("/traceladder/").status_code == 401
        bad = anon.post("/auth/token", json={"username": "reader", "password": "wrong"})
        assert bad.status_code in (400, 401), bad.text[:200]
    for user in ("admin", "reader"):
        with server.client(user) as c:
            page = c.get("/traceladder/", headers={"Accept": "text/html"})
            assert page.status_code == 200 and user in page.text


@pytest.mark.triage
def test_an_alert_is_shown_to_who_may_read_all_its_ladders_and_changed_by_who_may_edit_them(server, s3_server) -> None:
    """Issue 59: an alert covering a ladder the reader may not read is hidden from the list and
    403 by its URL; the reader (read-only) may not change even its own ladder's alert; the admin
    sees them all and changes one, recorded under its name."""
    from traceladder.config import load_clusters
    from traceladder.triage.alerts import store_for

    from tests.integration import ui_alerts

    store = store_for(load_clusters().alerts, s3_server.client())
    ids = {"mine": "a-fab-mine", "other": "a-fab-other", "both": "a-fab-both"}
    for alert in (
        ui_alerts.covering(ids["mine"], [MINE]),
        ui_alerts.covering(ids["other"], [OTHER]),
        ui_alerts.covering(ids["both"], [MINE, OTHER]),
    ):
        assert store.create(alert)
    with server.client("reader") as reader:
        listed = [a["id"] for a in reader.get("/traceladder/api/alerts").json()["alerts"]]
        assert [i for i in listed if i.startswith("a-fab-")] == [ids["mine"]]
        page = reader.get("/traceladder/alerts", headers={"Accept": "text/html"}).text
        assert ids["mine"] in page and ids["other"] not in page and ids["both"] not in page
        for hidden in (ids["other"], ids["both"]):
            for path in (f"/traceladder/alerts/{hidden}", f"/traceladder/api/alerts/{hidden}"):
                resp = reader.get(path)
                assert resp.status_code == 403 and OTHER not in resp.text, (path, resp.text[:200])
        own = reader.get(f"/traceladder/alerts/{ids['mine']}", headers={"Accept": "text/html"}).text
        assert "Your Airflow role cannot edit" in own and 'name="csrf"' not in own
        refused = reader.post(f"/traceladder/api/alerts/{ids['mine']}", json={"status": "acknowledged"})
        assert refused.status_code == 403
    with server.client("admin") as admin:
        listed = [a["id"] for a in admin.get("/traceladder/api/alerts").json()["alerts"]]
        assert {ids["mine"], ids["other"], ids["both"]} <= set(listed)
        changed = admin.post(f"/traceladder/api/alerts/{ids['both']}", json={"status": "acknowledged"})
        assert changed.status_code == 200, changed.text
    stored = {name: store.read(alert_id)[0] for name, alert_id in ids.items()}
    assert stored["mine"].status == "untriaged" and stored["other"].status == "untriaged"
    assert [(h.what, h.by, h.value) for h in stored["both"].history[1:]] == [("status", "admin", "acknowledged")]
