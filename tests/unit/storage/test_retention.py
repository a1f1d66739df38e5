"""The retention policy's parsing and rules (issue 30): durations, one-line errors naming the
field, and which key each limit may remove (the S3 side is in tests/integration/test_retention.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from traceladder.config import LadderConfigError, load_clusters
from traceladder.storage.retention import Policy, RetentionError, parse_duration

pytestmark = pytest.mark.retention


@pytest.mark.parametrize(("text", "days"), [("8w", 56), ("30d", 30), ("12h", 0.5)])
def test_durations(text: str, days: float) -> None:
    assert parse_duration(text, "f") == timedelta(days=days)


@pytest.mark.parametrize("text", ["8", 8, "0w", "-1d", "8 weeks", "", 3.5])
def test_bad_durations_name_the_field(text: object) -> None:
    with pytest.raises(RetentionError, match=r"^storage\.retention\.logs: .* is not a duration"):
        Policy.from_mapping({"logs": text})


def test_unknown_field_is_named() -> None:
    with pytest.raises(RetentionError, match=r"storage\.retention\.trace: unknown retention field"):
        Policy.from_mapping({"trace": "8w"})


def test_which_limit_covers_which_key() -> None:
    policy = Policy.from_mapping({"traces": "8w", "heavy_traces": "4w", "logs": "26w"})
    assert policy.rule_for("traces/rank0.json.gz", "torch_rank0") == ("traces", timedelta(weeks=8))
    assert policy.rule_for("traces/rank0.db", "rocprofv3") == ("heavy_traces", timedelta(weeks=4))
    assert policy.rule_for("traces/x.json", "rocm_trace_lite") == ("heavy_traces", timedelta(weeks=4))
    assert policy.rule_for("log.txt.gz", "none") == ("logs", timedelta(weeks=26))
    kept = ["metrics.json", "spec.json", "manifest.json", "analysis/rank0/analysis.json", "analysis/traces/x"]
    assert all(policy.rule_for(rel, "rocprofv3") is None for rel in kept)
    # without heavy_traces the heavy lenses fall under traces; without traces, plain traces stay
    assert Policy.from_mapping({"traces": "8w"}).rule_for("traces/a", "rocprofv3") == ("traces", timedelta(weeks=8))
    assert Policy.from_mapping({"heavy_traces": "4w"}).rule_for("traces/a", "torch_rank0") is None


@pytest.mark.parametrize(
    ("retention", "message"),
    [
        ({"traces": "8x"}, r"clusters\.local\.storage\.retention\.traces: '8x' is not a duration"),
        ({"trace": "8w"}, r"clusters\.local\.storage\.retention\.trace: unknown key"),
    ],
)
def test_clusters_file_errors_are_one_line_naming_the_field(tmp_path: Path, retention: dict, message: str) -> None:
    doc = {
        "schema": 1,
        "clusters": {
            "local": {"backend": "local", "storage": {"retention": retention}, "hosts": [{"name": "h", "pool": "p"}]}
        },
    }
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(LadderConfigError, match=message) as info:
        load_clusters(path)
    assert "\n" not in str(info.value)


def test_spool_max_age_defaults_to_seven_days(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text(
        yaml.safe_dump({"schema": 1, "clusters": {"c": {"backend": "local", "hosts": [{"name": "h", "pool": "p"}]}}})
    )
    assert parse_duration(load_clusters(path).clusters["c"].spool.max_age, "spool.max_age") == timedelta(days=7)


def test_a_rung_younger_than_every_applicable_limit_is_not_read() -> None:
    policy = Policy.from_mapping({"traces": "8w", "heavy_traces": "4w", "logs": "26w"})
    assert not policy.may_be_due(timedelta(weeks=3), has_traces=True, has_log=True)
    assert policy.may_be_due(timedelta(weeks=5), has_traces=True, has_log=True)  # heavy, if its lens is
    assert not policy.may_be_due(timedelta(weeks=20), has_traces=False, has_log=True)
    assert policy.may_be_due(timedelta(weeks=27), has_traces=False, has_log=True)
    assert policy.shortest() == timedelta(weeks=4) and Policy().shortest() is None
