"""The Ladders page (plugins/traceladder_ui.py, traceladder.ui) in a real `airflow api-server`.

One api-server for the module (temp AIRFLOW_HOME, SimpleAuthManager users admin and viewer, the
repo's DAGs serialized, the S3 connection pointing at the session's SeaweedFS) and two published
runs of the proxy-local ladder, built with the project's own summary code. Plain HTTP tests check
auth, the trigger, path escapes and secrets; the `browser` test signs in with Debian's chromium
through playwright and checks the rendered table and chart."""

from __future__ import annotations

import gzip
import http.client
import io
import json
import random
import re
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.results import typed
from testkit.triage_docs import suspect, suspect_fields, triage_doc
from tests.integration import ui_alerts
from tests.integration.airflow_server import AirflowApiServer
from tests.integration.ui_session import api_server, browser_or_skip, signed_in_page

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts"
LADDER = "proxy-local"
PREFIX = "traceladder"  # clusters.yaml: cluster local, storage.prefix
OLD_RUN = "scheduled__2026-11-23T03-00-00-00-00"
NEW_RUN = "manual__2026-11-29T10-00-00-00-00"
CANARY = "CANARY-outside-the-ladder-prefix-7f3a"
FAILED_RUNG_ID = "deepep.none.r2"

# Unprofiled step ms per rung (the CPU proxy's scale) and the global batch it runs.
STEP_MS = {
    "baseline": 812.0,
    "fusions": 760.0,
    "attn_gluon_v3": 741.0,
    "attn_turbo": 740.0,
    "deepep": 702.0,
    "grouped_gemm": 655.0,
    "megamoe": 610.0,
    "recompute_off": 561.0,
    "gbs16": 1050.0,
    "gbs32": 2010.0,
}
GBS = {"gbs16": 16, "gbs32": 32}
LENS_COST = {"torch_rank0": 1.31, "torch_all_ranks": 1.62}


# ---- data: a published run, written with the project's own builders ---------------------------
def _plan(run_id: str) -> dict[str, Any]:
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan

    # 3 fixed blocks (proxy-local plans an adaptive 3-5): the table's "runs ok" cells below
    specs = [json.loads(s.to_json()) for s in build_plan(load_ladder(find_ladder(LADDER)), repeats=3)]
    return {"schema": 1, "ladder": LADDER, "run_id": run_id, "params": {}, "specs": specs}


def _results(plan: dict[str, Any], failed: set[str], seed: int) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed)
    out = {}
    for spec in plan["specs"]:
        step = STEP_MS[spec["rung"]] * LENS_COST.get(spec["lens"], 1.0) * (1 + rng.uniform(-0.01, 0.01))
        tokens = GBS.get(spec["rung"], 8) * 128 / 2 / (step / 1000)
        ok = spec["rung_id"] not in failed
        traces = (
            [f"{PREFIX}/{LADDER}/{plan['run_id']}/{spec['rung_id']}/traces/rank0.pt.trace.json.gz"]
            if spec["lens"] != "none"
            else []
        )
        out[spec["rung_id"]] = {
            "run_id": plan["run_id"],
            "rung": spec["rung"],
            "rung_id": spec["rung_id"],
            "lens": spec["lens"],
            "repeat": spec["repeat"],
            "status": "ok" if ok else "failed",
            "step_ms": step if ok else None,
            "tokens_per_sec_per_gpu": tokens if ok else None,
            "peak_mem_gb": round(1.9 + rng.uniform(0, 0.2), 3) if ok else None,
            "traces": traces if ok else [],
            "error": None if ok else "rank 1 exited with code 1 after 3 steps",
        }
    return out


def summary_row(summary: dict[str, Any], rung: str) -> dict[str, Any]:
    return next(r for r in summary["rungs"] if r["rung"] == rung)


def _chart_png(summary: dict[str, Any]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in summary["rungs"] if r["step_ms"]]
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=80)
    ax.barh(
        [r["rung"] for r in rows],
        [r["step_ms"]["mean"] for r in rows],
        xerr=[r["step_ms"]["ci95"] or 0 for r in rows],
        color="#4a78b5",
    )
    ax.invert_yaxis()
    ax.set_xlabel("step ms (mean ± 95% CI)")
    ax.set_title(f"{summary['ladder']} {summary['run_id']}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


TRIAGE_SUSPECT = suspect_fields(run_id=NEW_RUN, good_run_id=OLD_RUN)
# a second suspect of the newer run: its triage.json (schema 1, two culprits) and its alert are
# stored by the `stored_alerts` fixture (tests/integration/ui_alerts.py)
ALERT_SUSPECT = suspect_fields(
    ui_alerts.RUNG, run_id=NEW_RUN, good_run_id=OLD_RUN, reason="change point", delta_pct=38.2
)


def _store_triage(store: Any, run: str) -> None:
    from traceladder.core import layout
    from traceladder.triage import record

    doc = triage_doc(
        suspect(**TRIAGE_SUSPECT),
        ladder=LADDER,
        first_bad="nightly-5",
        last_good="nightly-4",
        conclusion="first bad: nightly-5 (last good: nightly-4)",
    )
    record.save(store, layout.triage_key(run, "fusions"), doc)
    record.save_report(store, layout.triage_report_key(run, "fusions"), doc)


def publish_run(client, bucket: str, run_id: str, failed: set[str], seed: int) -> dict[str, Any]:
    from traceladder.storage.artifacts import S3ArtifactStore, ladder_prefix, run_prefix
    from traceladder.summary.build import build_summary
    from traceladder.summary.publish import publish_latest
    from traceladder.summary.render.markdown import to_markdown

    store = S3ArtifactStore(client, bucket, PREFIX, LADDER)
    plan = _plan(run_id)
    results = _results(plan, failed, seed)
    summary = build_summary(plan, typed(results), {})
    run = run_prefix(PREFIX, LADDER, run_id)
    store.put_json(f"{run}/plan.json", plan)
    for rung_id in ("baseline.none.r0", "recompute_off.torch_rank0.l0"):
        store.put_json(f"{run}/{rung_id}/metrics.json", results[rung_id])
        store.put_bytes(
            f"{run}/{rung_id}/log.txt.gz",
            gzip.compress(b"[Primus] iteration 3 | elapsed time per iteration (ms): 812.0\n"),
        )
        store.write_manifest(f"{run}/{rung_id}")
    if run_id == NEW_RUN:  # a suspect, and its triage beside the run (test_run_page_shows_the_triage)
        summary["history"] = {
            "runs": [],
            "rungs": [],
            "test": "Welch",
            "alpha": 0.01,
            **(summary.get("history") or {}),
            "suspects": [TRIAGE_SUSPECT, ALERT_SUSPECT],
        }
        _store_triage(store, run)
    base = f"{run}/summary"
    png = _chart_png(summary)
    store.put_bytes(f"{base}/summary.json", json.dumps(summary, indent=1).encode(), "application/json")
    store.put_bytes(f"{base}/summary.md", to_markdown(summary).encode(), "text/markdown")
    store.put_bytes(f"{base}/charts/step_ms.png", png, "image/png")
    store.put_bytes(
        f"{base}/report.html",
        b"<!doctype html><h1>report</h1><script>document.title='ran'</script><img src='charts/step_ms.png'>",
        "text/html",
    )
    store.write_manifest(base)
    ref = {
        "run_id": run_id,
        "summary_json": f"{base}/summary.json",
        "summary_md": f"{base}/summary.md",
        "failed_rungs": summary["failed_rungs"],
    }
    publish_latest(store, ladder_prefix(PREFIX, LADDER), ref)
    return {"summary": summary, "png": png}


@pytest.fixture(scope="module")
def published(s3_server) -> dict[str, Any]:
    client = s3_server.client()
    bucket = s3_server.bucket
    old = publish_run(client, bucket, OLD_RUN, set(), seed=1)
    new = publish_run(client, bucket, NEW_RUN, {FAILED_RUNG_ID}, seed=2)
    # Objects beside and above the ladder's prefix that no URL may reach.
    for key in (
        "canary-secret.txt",
        f"{PREFIX}/ui-canary/secret.txt",
        f"{PREFIX}/{LADDER}-x/secret.txt",
        f"{PREFIX}/secret.txt",
    ):
        client.put_object(Bucket=bucket, Key=key, Body=CANARY.encode())
    return {"old": old, "new": new}


@pytest.fixture(scope="module")
def server(s3_server, published):
    with api_server("ui-airflow", s3_server.airflow_conn_uri_json()) as srv:
        yield srv


@pytest.fixture(scope="module")
def admin(server):
    with server.client("admin") as c:
        yield c


@pytest.fixture(scope="module")
def viewer(server):
    with server.client("viewer") as c:
        yield c


def raw_get(server: AirflowApiServer, path: str, token: str | None = None) -> tuple[int, bytes]:
    """GET with the path sent byte for byte (no client-side normalisation of `..` or escapes)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def secrets_of(server: AirflowApiServer, s3_server) -> list[str]:
    return [
        s3_server.secret_key,
        s3_server.access_key,
        server.jwt_secret,
        server.secret_key,
        *server.passwords.values(),
    ]


ART = f"/traceladder/ladders/{LADDER}/artifacts"
ROUTES = [
    ("GET", "/traceladder/"),
    ("GET", f"/traceladder/ladders/{LADDER}"),
    ("GET", f"/traceladder/ladders/{LADDER}/runs/{NEW_RUN}"),
    ("GET", f"{ART}/{NEW_RUN}/summary/charts/step_ms.png"),
    ("POST", "/traceladder/trigger"),
    ("GET", "/traceladder/alerts"),
    ("GET", "/traceladder/api/alerts"),
]


# ---- plugin registration -----------------------------------------------------------------------
def test_plugin_is_registered_with_a_valid_external_view(admin):
    plugins = admin.get("/api/v2/plugins").json()["plugins"]
    ours = [p for p in plugins if p["name"] == "traceladder_ui"]
    assert len(ours) == 1, [p["name"] for p in plugins]
    (plugin,) = ours
    assert [(a["name"], a["url_prefix"]) for a in plugin["fastapi_apps"]] == [("traceladder", "/traceladder")]
    views = plugin["external_views"]
    assert len(views) == 1
    view = views[0]
    assert (view["name"], view["href"], view["url_route"], view["destination"], view["category"]) == (
        "Ladders",
        "/traceladder/",
        "ladders",
        "nav",
        "browse",
    )
    errors = admin.get("/api/v2/plugins/importErrors").json()["import_errors"]
    assert not [e for e in errors if "traceladder" in e["source"]], errors


# ---- auth ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("method,path", ROUTES)
def test_no_token_is_401_and_a_bad_token_403(server, method, path):
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        assert anon.request(method, path).status_code == 401
        bad = anon.request(method, path, headers={"Authorization": "Bearer not-a-jwt"})
        assert bad.status_code == 403
        anon.cookies.set("_token", "eyJhbGciOiJIUzUxMiJ9.e30.x")
        forged = anon.request(method, path)
        assert forged.status_code == 403
    # the same routes answer a signed-in user (the trigger only to a POST with a body)
    if method == "GET":
        with server.client("viewer") as c:
            assert c.get(path).status_code == 200


def test_a_browser_without_a_session_gets_a_sign_in_link(server):
    resp = httpx.get(f"{server.url}/traceladder/", headers={"Accept": "text/html"}, timeout=30)
    assert resp.status_code == 401
    assert 'href="/auth/login?next=%2Ftraceladder%2F"' in resp.text


# ---- the page ------------------------------------------------------------------------------------
def test_index_lists_every_ladder_file_and_the_latest_summary(viewer, published):
    from traceladder.config import ladder_files

    resp = viewer.get("/traceladder/")
    assert resp.status_code == 200
    html = resp.text
    files = [p.stem for p in ladder_files()]
    assert LADDER in files and len(files) >= 2
    for stem in files:
        assert f'data-ladder="{stem}"' in html
    # both runs listed, newest first, the failed one marked
    assert html.index(NEW_RUN) < html.index(OLD_RUN)
    assert "1 failed</span>: " + FAILED_RUNG_ID in html
    # the latest run's ladder table: every rung, mean ± ci95, vs parent, speedup, peak memory, runs ok
    summary = published["new"]["summary"]
    table = re.search(r'<table class="ladder-table" data-run="' + re.escape(NEW_RUN) + r'">(.*?)</table>', html, re.S)
    assert table, "no ladder table for the latest run"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)[1:]
    assert len(rows) == len(summary["rungs"]) == 10
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[0], re.S)]
    base = summary["rungs"][0]
    assert cells[0] == "baseline" and cells[1] == "(root)"
    assert cells[2] == f"{base['step_ms']['mean']:.1f} ± {base['step_ms']['ci95']:.1f}"
    assert cells[7] == "3/3"
    deepep = next(r for r in rows if ">deepep<" in r)
    assert "FAILED" in deepep and "2/3" in deepep
    # vs parent from the block model: attn_turbo vs attn_gluon_v3 is 1 ms apart, fusions 52 ms faster
    turbo = summary_row(summary, "attn_turbo")["vs_parent"]
    assert (
        turbo["verdict"] == "no_change"
        and "no change detected" in table.group(1)
        and f"MDE {turbo['mde_pct']:.1f}%" in table.group(1)
    )
    fusions = summary_row(summary, "fusions")["vs_parent"]
    assert (
        fusions["verdict"] == "faster"
        and f"faster: {fusions['delta']:+.1f} ms" in table.group(1)
        and "x</td>" in table.group(1)
    )
    # lenses with overhead ratios, findings
    assert "torch_rank0" in html and "overhead vs unprofiled" in html
    assert any(f.split(" (")[0] in html for f in summary["findings"])
    assert f"{ART}/{NEW_RUN}/summary/charts/step_ms.png" in html
    assert f"{ART}/{NEW_RUN}/summary/summary.md" in html and f"{ART}/{NEW_RUN}/summary/report.html" in html
    assert "S3 is unreachable" not in html


def test_run_page_shows_summary_charts_and_artifacts(viewer, published):
    resp = viewer.get(f"/traceladder/ladders/{LADDER}/runs/{OLD_RUN}")
    assert resp.status_code == 200
    html = resp.text
    assert f'data-run="{OLD_RUN}"' in html and "FAILED" not in html
    assert 'class="lens-table"' in html
    for key in (
        "plan.json",
        "baseline.none.r0/metrics.json",
        "baseline.none.r0/log.txt.gz",
        "recompute_off.torch_rank0.l0/manifest.json",
        "summary/charts/step_ms.png",
        "summary/summary.json",
    ):
        # every link names the run's version (its index entry's ETag): `?v=` keeps summary/ and
        # analysis/ cacheable for good, and a rerun's new entry gives them new URLs
        assert re.search(rf'href="{re.escape(f"{ART}/{OLD_RUN}/{key}")}\?v=%22[0-9a-f]+%22"', html), key
    assert viewer.get(f"/traceladder/ladders/{LADDER}/runs/no-such-run").status_code == 404
    assert viewer.get("/traceladder/ladders/no-such-ladder").status_code == 404


@pytest.mark.triage
def test_run_page_shows_the_triage_of_a_suspect(viewer, published):
    html = viewer.get(f"/traceladder/ladders/{LADDER}/runs/{NEW_RUN}").text
    row = re.search(r'<table class="triage">.*?</table>', html, re.S)
    assert row is not None, "no triage table on a run with a suspect"
    text = row.group(0)
    assert "fusions" in text and "done" in text and "confirmed regression" in text and "nightly-5" in text
    report = re.search(r'href="([^"]+/triage/fusions/report\.html[^"]*)"', text)
    assert report is not None
    page = viewer.get(report.group(1).replace("&amp;", "&"))
    assert page.status_code == 200 and "confirmed regression" in page.text
    assert 'class="triage"' not in viewer.get(f"/traceladder/ladders/{LADDER}/runs/{OLD_RUN}").text


def test_artifacts_are_proxied_with_safe_types(viewer, published, s3_server):
    png = viewer.get(f"{ART}/{NEW_RUN}/summary/charts/step_ms.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content == published["new"]["png"]
    stored = viewer.get(f"{ART}/{NEW_RUN}/summary/summary.json")
    assert stored.json() == json.loads(json.dumps(published["new"]["summary"]))
    report = viewer.get(f"{ART}/{NEW_RUN}/summary/report.html")
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert report.headers["content-security-policy"].startswith("sandbox")
    log = viewer.get(f"{ART}/{NEW_RUN}/baseline.none.r0/log.txt.gz")
    assert log.headers["content-disposition"].startswith("attachment")
    assert gzip.decompress(log.content).startswith(b"[Primus]")
    assert viewer.get(f"{ART}/{NEW_RUN}/summary/nope.png").status_code == 404


ESCAPES = [
    f"{ART}/../ui-canary/secret.txt",
    f"{ART}/../../canary-secret.txt",
    f"{ART}/../secret.txt",
    f"{ART}/{NEW_RUN}/../../ui-canary/secret.txt",
    f"{ART}/..%2f..%2fcanary-secret.txt",
    f"{ART}/%2e%2e/ui-canary/secret.txt",
    f"{ART}/%2E%2E%2F%2E%2E%2Fcanary-secret.txt",
    f"{ART}/%252e%252e/ui-canary/secret.txt",
    f"{ART}/%252e%252e%252f%252e%252e%252fcanary-secret.txt",
    f"{ART}/%25252e%25252e/secret.txt",
    f"{ART}//{PREFIX}/ui-canary/secret.txt",
    f"{ART}/%2f{PREFIX}%2fui-canary%2fsecret.txt",
    f"{ART}/..\\ui-canary\\secret.txt",
    f"{ART}/%5c..%5cui-canary%5csecret.txt",
    f"{ART}/./{NEW_RUN}/plan.json",
    f"{ART}/../../../../api/v2/connections",
    f"/traceladder/ladders/{LADDER}-x/artifacts/secret.txt",
    "/traceladder/ladders/..%2fui-canary/artifacts/secret.txt",
    "/traceladder/ladders/%2e%2e/artifacts/canary-secret.txt",
    f"/traceladder/ladders/{LADDER}/runs/..%2f..%2fui-canary",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_path_escapes_are_refused(server, published, path):
    status, body = raw_get(server, path, server.token("admin"))
    assert status in (400, 404), (status, body[:200])
    assert CANARY.encode() not in body


def test_s3_keys_with_unsafe_run_ids_are_refused(admin):
    assert admin.get(f"/traceladder/ladders/{LADDER}/runs/a%20b").status_code == 400


# ---- trigger ------------------------------------------------------------------------------------
def _dag_runs(admin) -> list[dict[str, Any]]:
    return admin.get("/api/v2/dags/traceladder-trigger/dagRuns", params={"limit": 100}).json()["dag_runs"]


def test_viewer_cannot_trigger(viewer, admin):
    before = len(_dag_runs(admin))
    resp = viewer.post("/traceladder/trigger", json={"ladder": LADDER})
    assert resp.status_code == 403
    page = viewer.get("/traceladder/").text
    assert 'action="/traceladder/trigger"' not in page and "cannot trigger" in page
    assert len(_dag_runs(admin)) == before


def test_admin_trigger_creates_a_dag_run(admin):
    resp = admin.post(
        "/traceladder/trigger", json={"ladder": LADDER, "rungs": ["baseline", "fusions"], "lens": "none", "repeats": 1}
    )
    assert resp.status_code == 200, resp.text
    run_id = resp.json()["dag_run_id"]
    stored = admin.get(f"/api/v2/dags/traceladder-trigger/dagRuns/{run_id}")
    assert stored.status_code == 200
    run = stored.json()
    assert run["conf"] == {
        "ladder": LADDER,
        "rungs": ["baseline", "fusions"],
        "lens": "none",
        "repeats": 1,
        "override": "",
    }
    assert run["run_type"] == "manual" and run["state"] == "queued"


def test_trigger_validation(admin):
    # ours: an unknown rung; Airflow's: the override pattern of the DAG's Params
    unknown = admin.post("/traceladder/trigger", json={"ladder": LADDER, "rungs": ["warp_drive"]})
    assert unknown.status_code == 400 and "warp_drive" in unknown.json()["detail"]
    bad = admin.post("/traceladder/trigger", json={"ladder": LADDER, "override": "not an override"})
    assert bad.status_code == 400 and "Airflow refused" in bad.json()["detail"]


def test_form_post_with_the_cookie_needs_the_page_csrf_field(server):
    token = server.token("admin")
    with httpx.Client(base_url=server.url, timeout=60, cookies={"_token": token}) as browser_like:
        page = browser_like.get("/traceladder/", headers={"Accept": "text/html"}).text
        csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page).group(1)
        form = {"ladder": LADDER, "rungs": "baseline", "lens": "ladder", "repeats": "", "override": ""}
        forged = browser_like.post("/traceladder/trigger", data=form, headers={"Accept": "text/html"})
        assert forged.status_code == 403
        ok = browser_like.post("/traceladder/trigger", data={**form, "csrf": csrf}, headers={"Accept": "text/html"})
        assert ok.status_code == 200 and "Queued run" in ok.text


# ---- secrets ------------------------------------------------------------------------------------
def test_no_secret_in_any_page(server, s3_server, admin, viewer, published):
    bodies = []
    for client in (admin, viewer):
        for path in (
            "/traceladder/",
            f"/traceladder/ladders/{LADDER}",
            f"/traceladder/ladders/{LADDER}/runs/{NEW_RUN}",
            f"/traceladder/ladders/{LADDER}/runs/nope",
            f"{ART}/{NEW_RUN}/nope.txt",
            "/traceladder/ladders/nope",
        ):
            bodies.append(client.get(path, headers={"Accept": "text/html"}).text)
    bodies.append(admin.post("/traceladder/trigger", json={"ladder": "nope"}).text)
    bodies.append(viewer.post("/traceladder/trigger", json={"ladder": LADDER}).text)
    for secret in secrets_of(server, s3_server):
        assert len(secret) >= 8
        for body in bodies:
            assert secret not in body
    assert not any("AIRFLOW_CONN" in b or '"password"' in b for b in bodies)


def test_page_lists_ladders_when_s3_is_down(server, s3_server):
    """A second api-server on the same database whose connection points at a closed port."""
    from traceladder.config import ladder_files

    from tests.integration.airflow_server import free_port

    dead = json.loads(s3_server.airflow_conn_uri_json())
    dead["extra"]["endpoint_url"] = f"http://127.0.0.1:{free_port()}"
    down = AirflowApiServer(
        server.home,
        extra_env={"AIRFLOW_CONN_TRACELADDER_S3": json.dumps(dead)},
        prepare=False,
        passwords=server.passwords,
    )
    try:
        down.start()
        with down.client("viewer") as c:
            resp = c.get("/traceladder/")
            run = c.get(f"/traceladder/ladders/{LADDER}/runs/{NEW_RUN}")
            art = c.get(f"{ART}/{NEW_RUN}/summary/summary.json")
            alerts = c.get("/traceladder/alerts", headers={"Accept": "text/html"})
            alerts_json = c.get("/traceladder/api/alerts")
    finally:
        down.stop()
    assert resp.status_code == 200
    html = resp.text
    for path in ladder_files():
        assert f'data-ladder="{path.stem}"' in html
    notices = re.findall(r'<p class="notice s3-error">(.*?)</p>', html, re.S)
    assert len(notices) == 1 and notices[0].startswith("S3 is unreachable: ")
    assert "\n" not in notices[0] and "Traceback" not in html
    assert run.status_code == 503 and "S3 is unreachable" in run.text
    assert art.status_code == 502
    # the alerts: one line on the index and on the alerts page, a JSON detail from the endpoint
    assert re.search(r'<p class="alerts-link">.*Alerts: unavailable</a> <span class="muted">\(alerts: ', html)
    assert alerts.status_code == 503 and "Traceback" not in alerts.text
    (line,) = re.findall(r'<p class="notice alerts-error">(.*?)</p>', alerts.text, re.S)
    assert line.startswith("the alerts could not be read: alerts: listing s3://") and "\n" not in line
    assert alerts_json.status_code == 503 and alerts_json.json()["detail"].startswith("the alerts could not be read")
    for secret in secrets_of(server, s3_server):
        for body in (html, run.text, art.text, alerts.text, alerts_json.text):
            assert secret not in body


# ---- browser ------------------------------------------------------------------------------------
@pytest.mark.browser
def test_browser_renders_table_and_chart(server, published, tmp_path):
    browser_or_skip()
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    with signed_in_page(server, "admin", "/traceladder/", tmp_path / "chromium-profile") as page:
        table = page.locator(f'table.ladder-table[data-run="{NEW_RUN}"]')
        expect(table).to_be_visible()
        expect(table.locator("tbody tr")).to_have_count(10)
        expect(table.locator("tbody tr", has_text="deepep")).to_contain_text("FAILED")
        chart = page.locator(f'section[data-ladder="{LADDER}"] img.chart').first
        chart.scroll_into_view_if_needed()
        page.wait_for_function(
            "img => img.complete && img.naturalWidth > 0", arg=chart.element_handle(), timeout=15_000
        )
        assert chart.evaluate("img => img.naturalWidth") == 560  # 7 in x 80 dpi
        page.screenshot(path=str(ARTIFACTS / "ui-ladders.png"), full_page=True)

        # the trigger form, as a signed-in admin would use it
        section = page.locator(f'section[data-ladder="{LADDER}"]')
        section.locator("details.trigger > summary").click()
        section.locator('input[name=rungs][value="baseline"]').check()
        section.locator("select[name=lens]").select_option("none")
        section.locator("input[name=repeats]").fill("1")
        section.get_by_role("button", name="Trigger").click()
        expect(page.locator("p.triggered")).to_contain_text("Queued run")

        # the same page inside Airflow's UI: Browse > Ladders opens /plugin/ladders
        page.goto(f"{server.url}/plugin/ladders")
        frame = page.frame_locator("iframe")
        expect(frame.locator(f'table.ladder-table[data-run="{NEW_RUN}"]')).to_be_visible(timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "ui-ladders-in-airflow.png"))
    assert (ARTIFACTS / "ui-ladders.png").stat().st_size > 10_000


@pytest.mark.retention
def test_a_trace_removed_by_retention_shows_as_removed(viewer, published, s3_server):
    """Retention (issue 30) records a removal in the rung's manifest: the run page lists the trace
    as removed and its link answers 410 with the record, not a bare 404."""
    from datetime import datetime, timedelta, timezone

    from traceladder.storage.artifacts import S3ArtifactStore, run_prefix
    from traceladder.storage.retention import Policy, apply_ladder

    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, PREFIX, LADDER)
    rung = f"{run_prefix(PREFIX, LADDER, OLD_RUN)}/retained.torch_rank0.l0"
    store.put_json(f"{rung}/spec.json", {"lens": "torch_rank0"})
    store.put_bytes(f"{rung}/traces/rank0.pt.trace.json.gz", gzip.compress(b"{}" * 500))
    store.write_manifest(rung)
    # one day's limit, judged two days on: only OLD_RUN (not latest.json's) has traces to lose
    lines: list[str] = []
    apply_ladder(
        store,
        Policy.from_mapping({"traces": "1d"}),
        dry_run=False,
        now=datetime.now(timezone.utc) + timedelta(days=2),
        emit=lines.append,
    )
    rel = f"{OLD_RUN}/retained.torch_rank0.l0/traces/rank0.pt.trace.json.gz"
    assert [line.split("\t")[0] for line in lines] == [f"{PREFIX}/{LADDER}/{rel}"]
    page = viewer.get(f"/traceladder/ladders/{LADDER}/runs/{OLD_RUN}").text
    assert re.search(r'<li class="removed">retained\.torch_rank0\.l0/traces/rank0\.pt\.trace\.json\.gz <span', page)
    gone = viewer.get(f"{ART}/{rel}")
    assert gone.status_code == 410 and "removed by retention on" in gone.text and "policy traces" in gone.text
    assert viewer.get(f"{ART}/{OLD_RUN}/retained.torch_rank0.l0/traces/never-was.json").status_code == 404


# ---- alerts (issue 59): the list, an alert's page, its JSON and its changes ----------------------
ALERT_PAGE = f"/traceladder/alerts/{ui_alerts.MAIN}"
ALERT_API = f"/traceladder/api/alerts/{ui_alerts.MAIN}"


@pytest.fixture(scope="module")
def stored_alerts(s3_server, published) -> Any:
    """Two alerts in the deployment's alert store, the first pointing at a schema-1 triage.json."""
    return ui_alerts.store_alerts(s3_server.client(), s3_server.bucket, LADDER, PREFIX, NEW_RUN, OLD_RUN)


def _stored(store: Any, alert_id: str) -> Any:
    got = store.read(alert_id)
    assert got is not None, alert_id
    return got[0]


def _rows(html: str, table: str) -> list[str]:
    found = re.search(rf'<table class="{table}">(.*?)</table>', html, re.S)
    assert found is not None, f"no table {table}"
    return re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), re.S)[1:]


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.mark.triage
def test_alerts_list_filters_by_status_and_is_linked_from_the_index(viewer, stored_alerts):
    html = viewer.get("/traceladder/alerts").text
    rows = {
        re.search(r'data-alert="([^"]+)"', r).group(1): _text(r)
        for r in re.findall(r"<tr data-alert.*?</tr>", html, re.S)
    }
    main, recovered = rows[ui_alerts.MAIN], rows[ui_alerts.RECOVERED]
    assert "untriaged regression proxy-local proxy-local/attn_turbo" in main
    assert "+38.0% [+29.4%, +47.1%] (wall time, 95% interval)" in main
    assert "nightly-3 (share 56% [38%, 73%])" in main and "nightly-6 (share 37% [21%, 53%])" in main
    assert "fixed improvement" in recovered and "recovered 2026-11-29T03:10:00+00:00" in recovered
    assert html.index(ui_alerts.MAIN) < html.index(ui_alerts.RECOVERED)  # newest first
    untriaged = viewer.get("/traceladder/alerts", params={"status": "untriaged"}).text
    assert ui_alerts.MAIN in untriaged and ui_alerts.RECOVERED not in untriaged
    assert '<option value="untriaged" selected>' in untriaged
    bad = viewer.get("/traceladder/alerts", params={"status": "closed"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("status: 'closed' is not one of")
    listed = viewer.get("/traceladder/api/alerts", params={"status": "fixed"}).json()["alerts"]
    assert [a["id"] for a in listed if a["id"].startswith("a-ui-")] == [ui_alerts.RECOVERED]
    index = viewer.get("/traceladder/").text
    link = re.search(
        r'<p class="alerts-link"><a href="/traceladder/alerts\?status=untriaged">Alerts: (\d+) untriaged', index
    )
    assert link is not None and int(link.group(1)) >= 1


@pytest.mark.triage
def test_alert_page_draws_a_schema_1_triage(viewer, stored_alerts):
    resp = viewer.get(ALERT_PAGE)
    assert resp.status_code == 200, resp.text[:300]
    html = resp.text
    assert "proxy-local/attn_turbo slower +38.2%" in html and "+38.0% [+29.4%, +47.1%]" in html
    member = _rows(html, "members")[0]
    assert f'href="/traceladder/ladders/{LADDER}/runs/{NEW_RUN}"' in member and "triaged" in member
    svg = re.search(r'<svg xmlns="http://www.w3.org/2000/svg" class="bisection".*?</svg>', html, re.S).group(0)
    labels = re.findall(r'<text class="candidate" data-name="([^"]+)"', svg)
    assert labels == [*ui_alerts.CANDIDATES, NEW_RUN]  # the candidates in order, then the confirmed run
    assert re.findall(r'<g class="culprit" data-name="([^"]+)"', svg) == ["nightly-3", "nightly-6"]
    assert len(re.findall(r'<g class="step"', svg)) == 8 and len(_rows(html, "steps")) == 8
    assert ui_alerts.SENTENCE in html
    repro = re.findall(r"<li><code>(.*?)</code></li>", html)  # the triage.json's `reproduce`: the alert names none
    assert [unescape(line) for line in repro] == [f"{side}: {cmd}" for side, cmd in ui_alerts.REPRO.items()]
    assert "Your Airflow role cannot edit" in html and 'class="alert-change"' not in html
    # the run page: the same triage.json as its triage row, with the alert beside it
    run = viewer.get(f"/traceladder/ladders/{LADDER}/runs/{NEW_RUN}").text
    row = next(r for r in _rows(run, "triage") if f"<td>{ui_alerts.RUNG}</td>" in r)
    assert "done" in row and "confirmed regression" in row and "nightly-3" in row
    assert f'<a class="alert-link" href="{ALERT_PAGE}">alert {ui_alerts.MAIN}: untriaged</a>' in row
    fusions = next(r for r in _rows(run, "triage") if "<td>fusions</td>" in r)
    assert "alert-link" not in fusions


@pytest.mark.triage
@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/traceladder/alerts"),
        ("GET", ALERT_PAGE),
        ("GET", "/traceladder/api/alerts"),
        ("GET", ALERT_API),
        ("POST", ALERT_API),
        ("POST", ALERT_PAGE),
    ],
)
def test_anonymous_alert_routes_are_401(server, stored_alerts, method, path):
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        assert anon.request(method, path, json={"status": "invalid"}).status_code == 401
    assert _stored(stored_alerts, ui_alerts.MAIN).status != "invalid"


@pytest.mark.triage
def test_an_alert_change_needs_the_page_csrf_edit_access_and_a_valid_body(server, viewer, admin, stored_alerts):
    before = stored_alerts.read(ui_alerts.RECOVERED)
    path = f"/traceladder/api/alerts/{ui_alerts.RECOVERED}"
    form_path = f"/traceladder/alerts/{ui_alerts.RECOVERED}"
    token = server.token("admin")
    with httpx.Client(base_url=server.url, timeout=60, cookies={"_token": token}) as browser_like:
        page = browser_like.get(form_path, headers={"Accept": "text/html"}).text
        csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page).group(1)
        # the login cookie alone: a cross-site form or fetch, refused, nothing changed
        forged = browser_like.post(form_path, data={"status": "invalid"}, headers={"Accept": "text/html"})
        assert forged.status_code == 403 and "stale" in forged.text
        assert browser_like.post(form_path, data={"status": "invalid", "csrf": "0" * 64}).status_code == 403
        assert browser_like.post(path, json={"status": "invalid"}).status_code == 403
        assert browser_like.post(path, json={"status": "invalid"}, headers={"X-CSRF-Token": "x"}).status_code == 403
        assert stored_alerts.read(ui_alerts.RECOVERED) == before  # the same document, the same ETag
        # with the page's value: the JSON endpoint changes it as the signed-in user
        ok = browser_like.post(path, json={"note": "checked with the owner"}, headers={"X-CSRF-Token": csrf})
        assert ok.status_code == 200, ok.text
        assert ok.json()["note"] == "checked with the owner"
    # a viewer may read but not change; the body is checked only for who may change it
    assert viewer.post(path, json={"status": "invalid"}).status_code == 403
    assert viewer.post(path, json={"status": "closed"}).status_code == 403
    for body, field in (
        ({"status": "closed"}, "status"),
        ({"issue_url": "javascript:x"}, "issue_url"),
        ({"note": "x" * 2001}, "note"),
    ):
        bad = admin.post(path, json=body)  # a bearer token: no CSRF value needed
        assert bad.status_code == 422 and bad.json()["detail"].startswith(f"request: {field}: "), bad.text
    assert admin.post("/traceladder/api/alerts/no-such-alert", json={}).status_code == 404
    stored = _stored(stored_alerts, ui_alerts.RECOVERED)
    assert stored.status == "fixed" and stored.note == "checked with the owner"
    assert [(h.what, h.by, h.value) for h in stored.history[1:]] == [("note", "admin", "checked with the owner")]
    assert admin.get(path).json() == stored.to_dict()


@pytest.mark.triage
@pytest.mark.browser
def test_browser_sets_an_alerts_status_and_issue_link(server, stored_alerts, tmp_path):
    browser_or_skip()
    from playwright.sync_api import expect

    issue = "https://issues.example.org/traceladder/59"
    ARTIFACTS.mkdir(exist_ok=True)
    with signed_in_page(server, "admin", ALERT_PAGE, tmp_path / "chromium-profile") as page:
        expect(page.locator("svg.bisection g.culprit")).to_have_count(2)
        page.locator("select[name=status]").select_option("investigating")
        page.get_by_role("button", name="Save").click()
        expect(page.locator("td.status")).to_have_text("investigating")
        page.locator("input[name=issue_url]").fill(issue)
        page.get_by_role("button", name="Save").click()
        expect(page.locator("td.issue a")).to_have_attribute("href", issue)
        history = page.locator("table.history tbody tr")
        expect(history).to_have_count(3)
        assert page.url == f"{server.url}{ALERT_PAGE}"
        for i, (what, value) in enumerate((("status", "investigating"), ("issue", issue)), start=1):
            expect(history.nth(i).locator("td.what")).to_have_text(what)
            expect(history.nth(i).locator("td.by")).to_have_text("admin")
            expect(history.nth(i).locator("td.value")).to_have_text(value)
        page.screenshot(path=str(ARTIFACTS / "ui-alert.png"), full_page=True)
    stored = _stored(stored_alerts, ui_alerts.MAIN)
    assert (stored.status, stored.issue_url) == ("investigating", issue)
    assert [(h.what, h.by, h.value, h.previous) for h in stored.history[1:]] == [
        ("status", "admin", "investigating", "untriaged"),
        ("issue", "admin", issue, None),
    ]
