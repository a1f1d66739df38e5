"""The demo's `traceladder keys` (embedded/demo.py, `make keys`), on a real SeaweedFS."""

from __future__ import annotations

import pytest

from tests.unit.storage.test_artifacts import _assert_one_line
from traceladder.embedded.embedded_s3 import EmbeddedS3, EmbeddedS3Error
from traceladder.storage.artifacts import S3ArtifactStore


@pytest.mark.service  # starts SeaweedFS itself
def test_keys_lists_a_stored_runs_keys_from_the_demos_kept_data(tmp_path, monkeypatch, capsys) -> None:
    """`traceladder keys` (`make keys`, what the demo's last lines point to): the latest run's
    keys, or a named run's, from the S3 data a stopped demo left; a missing run or no data at all
    is one line and exit 1."""
    from traceladder.core.layout import run_prefix
    from traceladder.embedded import demo
    from traceladder.storage.artifacts import ladder_prefix
    from traceladder.summary.publish import publish_latest

    monkeypatch.setattr(demo, "STATE_DIR", tmp_path / "state")
    assert demo.list_run_keys() == 1
    assert capsys.readouterr().err.strip().endswith("run `make demo` first")

    run_id = "manual__2026-12-05T21-16-27"
    with EmbeddedS3(tmp_path / "state" / "s3", bucket="traceladder") as server:
        store = S3ArtifactStore(server.client(), server.bucket, "traceladder", "proxy-local")
        run = run_prefix("traceladder", "proxy-local", run_id)
        for name in ("baseline.none.r0/metrics.json", "summary/summary.json"):
            store.put_bytes(f"{run}/{name}", b"{}")
        ref = {
            "run_id": run_id,
            "logical_date": "2026-12-05T21:16:27+00:00",
            "summary_json": f"{run}/summary/summary.json",
        }
        publish_latest(store, ladder_prefix("traceladder", "proxy-local"), ref)
        # a second server on the same folder (`make keys` while `make up` runs) is refused in one line
        with pytest.raises(EmbeddedS3Error) as refused:
            demo.list_run_keys()
        _assert_one_line(refused.value, "another S3 server already serves", str(tmp_path / "state" / "s3"))
    capsys.readouterr()

    assert demo.list_run_keys() == 0  # the server is stopped: keys starts its own
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"S3 objects under s3://traceladder/{run}/ (2):"
    assert [line.strip() for line in out[1:]] == [f"{run}/baseline.none.r0/metrics.json", f"{run}/summary/summary.json"]
    assert demo.list_run_keys(run_id=run_id) == 0 and capsys.readouterr().out.splitlines() == out
    assert demo.list_run_keys(run_id="nope") == 1
    err = capsys.readouterr().err.strip()
    assert err == "no run nope of ladder proxy-local in s3://traceladder/traceladder/proxy-local/ (.traceladder/s3)"
    # the demo's pointer to it names the ladder when it is not the default
    assert "`make keys` lists them" in demo.where_the_rest_is("b", "p", 2, "r", "l", 1.0, "proxy-local")[2]
    assert "`make keys LADDER=proxy-aa` lists them" in demo.where_the_rest_is("b", "p", 2, "r", "l", 1.0, "proxy-aa")[2]
