"""The summary task's S3 reads against the history's length (issue 30, item 2): a seed ladder
generated week by week in the session's SeaweedFS (testkit/year_history.py), the real summary
and publish tasks run after 1 and after 3 published weeks, every S3 call counted through
botocore's events (testkit/s3_requests.py). The objects under the ladder more than double;
only the index-entry reads (one per published run) may grow, and publishing reads each entry once."""

from __future__ import annotations

from typing import Any


def test_only_index_entry_reads_grow_with_the_history(s3_server, tmp_path, monkeypatch):
    from testkit.summary_task import summary_task
    from testkit.year_history import ladder_files, s3_writer

    (ladder,) = ladder_files(tmp_path / "ladders", 1, stem="reads")
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(tmp_path / "ladders"))
    client = s3_server.client()
    writer = s3_writer(s3_server, client, tmp_path)
    measured: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    try:
        for week in range(4):
            if week in (1, 3):
                m = summary_task(writer, client, s3_server.bucket, ladder, week)
                measured.append(m)
                entries.append(m["entry"])
            else:
                entries.append(writer.write_summary(ladder, week, writer.write_rungs(ladder, week), entries))
    finally:
        writer.close()
    short, long = measured
    assert long["objects"] > 1.8 * short["objects"]
    assert long["history_points"] == 4 and short["history_points"] == 2  # the earlier runs plus this one

    def entry_reads(m: dict[str, Any]) -> int:
        return m["summary_by_kind"].get("GetObject index entry (runs/)", 0)

    assert entry_reads(short) == 1 and entry_reads(long) == 3  # one GET per earlier run
    others = [{k: v for k, v in m["summary_by_kind"].items() if k != "GetObject index entry (runs/)"} for m in measured]
    assert others[0] == others[1], "a summary read other than the index entries grew with the history"
    # one per rung run of the seed plan: 45, and the every-rung profile block's 10 (one per rung)
    assert others[0]["GetObject metrics.json"] == 55

    # publishing reads the index once: one GET per published run (this one too); its check after
    # writing latest.json lists again and reads only what changed since (nothing, here)
    for m, runs in ((short, 2), (long, 4)):
        by_kind = m["publish_by_kind"]
        assert by_kind.get("GetObject index entry (runs/)") == runs, by_kind
        assert by_kind.get("ListObjectsV2 index entry (runs/)") == 2 and by_kind.get("GetObject latest.json") == 2
        # 7: the entry's PUT, index.json's HEAD, two listings, latest.json's two GETs and its PUT
        assert m["publish_requests"] == 7 + runs
