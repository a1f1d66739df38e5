"""The Ladders page under concurrent viewers (issue 30, item 3), on a real api-server holding a
generated history (testkit/year_history.py: one seed ladder, 8 weekly runs, in the session's
SeaweedFS). 20 viewers with tokens from ``POST /auth/token`` open the ladder list, run pages,
reports and charts for 10 s (testkit/page_load.py, loopback only), while a prober sends the
same requests with no token and with a forged one. Asserted: no error and no unauthenticated
read (the latency target is the bench's, ``python -m benchmarks --only page_load``); and the
caching contract: summary/ and analysis/ are immutable, a run's page and its traces carry an
ETag and answer 304 while unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.ui_session import api_server

pytestmark = pytest.mark.load

WEEKS = 8
VIEWERS = 20
LOAD_S = 10.0


@pytest.fixture(scope="module")
def history(s3_server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One seed ladder with WEEKS published runs, written with the product's builders."""
    import os

    from testkit.year_history import ladder_files, s3_writer

    root = tmp_path_factory.mktemp("page-load")
    ladders_dir = root / "ladders"
    (name,) = ladder_files(ladders_dir, 1)
    old = os.environ.get("TRACELADDER_LADDERS_DIR")
    os.environ["TRACELADDER_LADDERS_DIR"] = str(ladders_dir)
    try:
        writer = s3_writer(s3_server, s3_server.client(), root)
        try:
            entries = writer.write_ladder(name, WEEKS, log=lambda line: None)
        finally:
            writer.close()
    finally:
        if old is None:
            os.environ.pop("TRACELADDER_LADDERS_DIR")
        else:
            os.environ["TRACELADDER_LADDERS_DIR"] = old
    return {"ladders_dir": ladders_dir, "ladder": name, "runs": [e["run_id"] for e in entries]}


@pytest.fixture(scope="module")
def server(s3_server, history):
    with api_server(
        "page-load",
        s3_server.airflow_conn_uri_json(),
        extra_env={"TRACELADDER_LADDERS_DIR": str(history["ladders_dir"])},
    ) as srv:
        yield srv


def test_viewers_get_every_page_and_no_unauthenticated_read(server, history):
    from testkit.page_load import MIN_PROBES, Site, drive

    site = Site(server.url, {history["ladder"]: history["runs"]})
    result = drive(site, "viewer", server.passwords["viewer"], viewers=VIEWERS, seconds=LOAD_S, max_requests=60)
    print(
        f"\n{result.requests} requests, p50 {result.p(0.5):.0f} ms, p95 {result.p(0.95):.0f} ms, "
        f"{result.from_browser_cache} kept by the viewers, load generator CPU {result.cpu_s:.1f} s, "
        f"statuses {dict(result.statuses)}"
    )
    assert result.errors == []
    assert result.unauthenticated_sent >= MIN_PROBES
    assert result.unauthenticated_served == []
    for target in ("ladder list", "run page", "report", "chart"):
        assert result.latencies_ms[target], f"no {target} request was made"


def test_summary_and_analysis_are_immutable_and_run_files_revalidate(server, history):
    ladder, run = history["ladder"], history["runs"][-1]
    base = f"/traceladder/ladders/{ladder}"
    with server.client("viewer") as http:
        for path in (f"{run}/summary/charts/waterfall.png", f"{run}/summary/report.html"):
            resp = http.get(f"{base}/artifacts/{path}?v=entry-etag")
            assert resp.status_code == 200, path
            assert "immutable" in resp.headers["cache-control"], path
            assert "etag" not in resp.headers, path
            # without the run's version (a rerun rewrites these keys) it is revalidated instead
            bare = http.get(f"{base}/artifacts/{path}")
            assert bare.headers["cache-control"] == "private, no-cache" and bare.headers["etag"], path
        runs = http.get(f"{base}/runs/{run}")
        assert runs.status_code == 200
        listed = [k for k in _artifact_links(runs.text) if "/traces/" in k or "/analysis/" in k]
        assert listed, "the run page lists no trace or analysis"
        trace = next(k for k in listed if "/traces/" in k)
        analysis = next(k for k in listed if "/analysis/" in k)
        assert "?v=" in analysis, "the run page's links name the run's version"
        assert "immutable" in http.get(f"{base}/artifacts/{analysis}").headers["cache-control"]
        for path in (f"{base}/runs/{run}", f"{base}/artifacts/{trace}"):
            first = http.get(path)
            assert first.status_code == 200, path
            assert first.headers["cache-control"] == "private, no-cache", path
            etag = first.headers["etag"]
            again = http.get(path, headers={"If-None-Match": etag})
            assert again.status_code == 304, path
            assert again.content == b""
            stale = http.get(path, headers={"If-None-Match": '"not-this-one"'})
            assert stale.status_code == 200 and stale.content == first.content, path


def _artifact_links(html: str) -> list[str]:
    import re

    return [m.split("/artifacts/", 1)[1] for m in re.findall(r'href="([^"]*/artifacts/[^"]+)"', html)]
