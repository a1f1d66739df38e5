"""The ladder's history on the Ladders page, in a real `airflow api-server`: the latest run's
history table and trend chart, and the page that compares two runs side by side.

Thirteen weekly runs of proxy-local are published with the project's own write_summary on a
SeaweedFS of this module's own (so the runs of test_ui_ladders.py stay as that module expects);
the baseline rung becomes 8% slower from the tenth run."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.integration.test_ui_ladders import LADDER, PREFIX, _plan, _results
from tests.integration.ui_session import api_server, browser_or_skip, signed_in_page

WEEKS, SLOW_FROM = 13, 9
RUN_IDS = [f"scheduled__2026-{w + 1:02d}-05T03-00-00-00-00" for w in range(WEEKS)]


@pytest.fixture(scope="module")
def own_s3(tmp_path_factory: pytest.TempPathFactory):
    from traceladder.embedded.embedded_s3 import EmbeddedS3

    server = EmbeddedS3(tmp_path_factory.mktemp("s3-history"), bucket="traceladder")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def history(own_s3) -> list[dict[str, Any]]:
    from traceladder.storage.artifacts import S3ArtifactStore, ladder_prefix, run_prefix
    from traceladder.summary.publish import publish_latest, write_summary

    store = S3ArtifactStore(own_s3.client(), own_s3.bucket, PREFIX, LADDER)
    refs = []
    for week, run_id in enumerate(RUN_IDS):
        plan = _plan(run_id)
        results = _results(plan, set(), seed=week)
        for spec in plan["specs"]:
            result = results[spec["rung_id"]]
            if spec["rung"] == "baseline" and week >= SLOW_FROM:
                result["step_ms"] *= 1.08
            key = f"{run_prefix(PREFIX, LADDER, run_id)}/{spec['rung_id']}"
            store.put_json(f"{key}/metrics.json", {**result, "traces": []})
            store.write_manifest(key)
        ref = write_summary(store, run_prefix(PREFIX, LADDER, run_id), plan, f"2026-{week + 1:02d}-05T03:00:00+00:00")
        publish_latest(store, ladder_prefix(PREFIX, LADDER), ref)
        refs.append(ref)
    return refs


@pytest.fixture(scope="module")
def server(own_s3, history):
    with api_server("ui-history", own_s3.airflow_conn_uri_json()) as srv:
        yield srv


@pytest.fixture(scope="module")
def viewer(server):
    with server.client("viewer") as c:
        yield c


def test_the_baseline_slowdown_is_called_once(history) -> None:
    called = [(i, ref["regressions"]) for i, ref in enumerate(history) if ref["regressions"]]
    assert [rungs for _, rungs in called] == [["baseline"]] and called[0][0] in (SLOW_FROM + 1, SLOW_FROM + 2)
    assert f"from run {RUN_IDS[SLOW_FROM]}" in history[called[0][0]]["regression_calls"][0]


def test_ladder_page_shows_history_and_trend(viewer, history) -> None:
    html = viewer.get(f"/traceladder/ladders/{LADDER}").text
    latest = RUN_IDS[-1]
    assert f"/traceladder/ladders/{LADDER}/artifacts/{latest}/summary/charts/trend.png" in html
    table = re.search(r'<table class="history-table">(.*?)</table>', html, re.S)
    assert table, "no history table"
    row = re.sub(r"<[^>]+>", " ", table.group(1))
    assert "baseline" in row and RUN_IDS[SLOW_FROM] in row and "slower" in row and "earlier" in row
    assert html.index(RUN_IDS[-1]) < html.index(RUN_IDS[0])  # newest first, by logical date


def test_compare_page_puts_two_runs_side_by_side(viewer, history, own_s3) -> None:
    a, b = RUN_IDS[0], RUN_IDS[-1]
    resp = viewer.get(f"/traceladder/ladders/{LADDER}/compare", params={"a": a, "b": b})
    assert resp.status_code == 200
    table = re.search(r'<table class="compare-table" data-a="([^"]+)" data-b="([^"]+)">(.*?)</table>', resp.text, re.S)
    assert table and table.group(1, 2) == (a, b)
    summaries = {
        r: json.loads(own_s3.client().get_object(Bucket=own_s3.bucket, Key=history[i]["summary_json"])["Body"].read())
        for i, r in ((0, a), (WEEKS - 1, b))
    }
    step = {r: {row["rung"]: row["step_ms"]["mean"] for row in s["rungs"]} for r, s in summaries.items()}
    rows = {
        re.sub(r"<[^>]+>", "", cells[0]).strip(): [re.sub(r"<[^>]+>", "", c).strip() for c in cells]
        for cells in (
            re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S) for tr in re.findall(r"<tr>(.*?)</tr>", table.group(3), re.S)
        )
        if cells
    }
    assert set(rows) == set(step[a])
    for rung, cells in rows.items():
        assert cells[3] == f"{100 * (step[b][rung] / step[a][rung] - 1):+.1f}%"
    default = viewer.get(f"/traceladder/ladders/{LADDER}/compare")  # the two newest runs
    assert default.status_code == 200 and f'data-a="{RUN_IDS[-2]}" data-b="{RUN_IDS[-1]}"' in default.text
    assert viewer.get(f"/traceladder/ladders/{LADDER}/compare", params={"a": "..", "b": b}).status_code == 400
    assert viewer.get(f"/traceladder/ladders/{LADDER}/compare", params={"a": "no-such-run", "b": b}).status_code == 404


def test_browser_shows_trend_and_compare(server, history, tmp_path) -> None:
    browser_or_skip()
    from playwright.sync_api import expect

    with signed_in_page(server, "viewer", f"/traceladder/ladders/{LADDER}", tmp_path / "chromium-profile") as page:
        trend = page.locator('img.chart[alt="trend.png"]')
        trend.scroll_into_view_if_needed()
        page.wait_for_function(
            "img => img.complete && img.naturalWidth > 0", arg=trend.element_handle(), timeout=15_000
        )
        assert trend.evaluate("img => img.naturalWidth") > 400
        page.locator("a.compare-link").first.click()
        expect(page.locator("table.compare-table tbody tr")).to_have_count(10)
        page.locator("select[name=a]").select_option(RUN_IDS[0])
        page.get_by_role("button", name="Compare").click()
        expect(page.locator("table.compare-table")).to_have_attribute("data-a", RUN_IDS[0])
        expect(page.locator("table.compare-table tbody tr", has_text="baseline")).to_contain_text("+")
