"""The stage documents (core/documents.py): one builder of metrics.json for run and refused rungs,
schema versions (upgrade or a one-line refusal naming the file and field), and the one what-if
and purpose rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceladder.core.documents import (
    DocumentError,
    IndexEntry,
    Manifest,
    ManifestEntry,
    PlanDoc,
    RungResult,
    Summary,
    SummaryRef,
    TraceAnalysis,
    spec_purpose,
)
from traceladder.runner.rung import record_refused, run_rung
from traceladder.core import layout
from traceladder.storage.artifacts import DirArtifactSink, rung_prefix


def _spec(ladder: str):
    """A plan spec of the shipped proxy-local ladder, in its randomised block design."""
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan

    spec = build_plan(load_ladder(find_ladder("proxy-local")), rungs=["baseline"], lens="none", repeats=2)[1]
    # A one-second deadline: a real run of the real runner, stopped before the proxy trains.
    return spec.model_copy(update={"ladder": ladder, "timeout_s": 1})


def _stored(root: Path, spec, run_id: str) -> dict:
    key = f"{rung_prefix(spec.storage_prefix, spec.ladder, run_id, spec.rung_id)}/{layout.METRICS_OBJECT}"
    return json.loads((root / key).read_text())


def test_a_refused_rungs_metrics_json_has_the_fields_of_a_run_rungs(tmp_path: Path) -> None:
    spec = _spec("documents")
    sink = DirArtifactSink(tmp_path)
    ran = run_rung(spec, "ran", sink, echo=None)
    assert ran["status"] == "timeout", ran
    record_refused(spec, "refused", sink, "preflight", "no GPU visible")
    run_doc, refused_doc = _stored(tmp_path, spec, "ran"), _stored(tmp_path, spec, "refused")
    assert sorted(refused_doc) == sorted(run_doc)
    assert {k: refused_doc[k] for k in ("block", "position", "purpose", "status", "error")} == {
        "block": spec.block,
        "position": spec.position,
        "purpose": spec.purpose,
        "status": "preflight",
        "error": "no GPU visible",
    }
    assert run_doc["wall_s"] is not None and refused_doc["wall_s"] is None
    assert RungResult.from_dict(refused_doc).to_dict() == refused_doc  # the reader keeps every field


def _v1_metrics() -> dict:
    """metrics.json as a refused rung stored it before schema 2: no schema, no place in the design."""
    return {
        "run_id": "r",
        "ladder": "l",
        "rung": "baseline",
        "rung_id": "baseline__l0",
        "lens": "torch_rank0",
        "repeat": 0,
        "switch": None,
        "value": None,
        "parent": None,
        "status": "preflight",
        "error": "no GPU",
        "traces": [],
        "prefix": "p/l/r/baseline__l0",
    }


def test_an_older_metrics_json_is_upgraded() -> None:
    result = RungResult.from_dict(_v1_metrics())
    assert (result.block, result.position, result.purpose) == (0, 0, "lens")
    assert json.loads(result.to_json())["schema"] == RungResult.SCHEMA


@pytest.mark.parametrize(
    ("doc", "source", "message"),
    [
        ({**_v1_metrics(), "schema": 99}, "s3://b/metrics.json", "s3://b/metrics.json: schema: version 99 is newer"),
        ({**_v1_metrics(), "repeat": "0"}, "m.json", "m.json: repeat: expected int, got str"),
        ({k: v for k, v in _v1_metrics().items() if k != "status"}, "m.json", "m.json: status: missing"),
        ([], "m.json", "m.json: (top level): expected a JSON object"),
    ],
)
def test_a_bad_or_newer_document_fails_with_one_line_naming_file_and_field(doc, source: str, message: str) -> None:
    with pytest.raises(DocumentError) as caught:
        RungResult.from_dict(doc, source)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_summary_of_an_unknown_older_schema_is_refused() -> None:
    with pytest.raises(DocumentError, match=r"^summary.json: schema: version 0 is no longer read"):
        Summary.from_json(json.dumps({"schema": 0, "ladder": "l", "run_id": "r", "rungs": []}))


@pytest.mark.parametrize(
    ("params", "what_if"),
    [
        ({}, False),
        ({"ladder": "proxy-local", "lens": "ladder", "rungs": [], "seed": None, "override": ""}, False),
        ({"lens": "torch_rank0"}, True),
        ({"rungs": ["baseline"]}, True),
        ({"repeats": 3}, True),
    ],
)
def test_what_if_is_one_rule_for_the_plan_the_reference_and_the_index(params: dict, what_if: bool) -> None:
    plan = PlanDoc(ladder="l", run_id="r", params=params, specs=[])
    ref = SummaryRef(run_id="r", params=plan.what_if_params())
    entry = IndexEntry.from_dict({"schema": 2, **ref.to_dict(), "published_at": "2026-12-01T00:00:00+00:00"})
    legacy = IndexEntry.from_dict({"run_id": "r", "params": params, "published_at": "x"})  # index.json rows
    assert plan.is_what_if is ref.is_what_if is entry.is_what_if is legacy.is_what_if is what_if


def test_a_specs_purpose_defaults_from_its_lens() -> None:
    assert spec_purpose({"lens": "none"}) == "measure"
    assert spec_purpose({"lens": "torch_rank0"}) == "lens"
    assert spec_purpose({"lens": "torch_rank0", "purpose": "profile"}) == "profile"


def test_unknown_keys_survive_a_round_trip_in_order() -> None:
    text = json.dumps({"schema": 1, "ladder": "l", "run_id": "r", "specs": [], "later_field": {"x": 1}}, indent=1)
    plan = PlanDoc.from_json(text)
    assert plan.extra == {"later_field": {"x": 1}}
    defaults = {"metric": "wall", "drift": "none", "correction": "per_rung", "params": {}}
    assert json.loads(plan.to_json()) == {**json.loads(text), **defaults}


def test_checked_json_is_the_stored_document_after_the_readers_checks() -> None:
    stored = {"run_id": "r", "rungs": [], "zz": 1, "schema": 2, "ladder": "l"}
    assert list(Summary.checked_json(json.dumps(stored))) == list(stored)  # as stored: no defaults, same order
    with pytest.raises(DocumentError, match=r"^summary.json of r: ladder: expected str, got int$"):
        Summary.checked_json(json.dumps({**stored, "ladder": 3}), "summary.json of r")
    with pytest.raises(DocumentError, match=r"^summary.json: \(json\): "):
        Summary.checked_json(b"{not json")


def test_summary_json_keeps_the_bytes_of_the_summary_built() -> None:
    """write_summary stores Summary.to_json(): the same keys in the same order as build_summary's
    dict dumped as before (json.dumps(indent=1)), with the publish step's attribution and history."""
    from traceladder.summary.build import build_summary

    specs, results = [], {}
    for block in range(3):
        for position, (rung, parent, switch, step) in enumerate(
            [("baseline", None, None, 500.0), ("fusions", "baseline", "fusions", 340.0)]
        ):
            rung_id = f"{rung}.none.r{block}"
            specs.append(
                {"rung": rung, "parent": parent, "switch": switch, "value": switch and True, "lens": "none"}
                | {"repeat": block, "block": block, "position": position, "rung_id": rung_id, "purpose": "measure"}
            )
            results[rung_id] = RungResult.from_dict(
                {"run_id": "r1", "ladder": "l", "status": "ok", "step_ms": step + 3 * block - 2 * position}
                | {k: v for k, v in specs[-1].items() if k != "rung_id"}
                | {"rung_id": rung_id, "provenance": {"image": "img"}}
            )
    summary = build_summary({"ladder": "l", "run_id": "r1", "specs": specs}, results, {})
    summary["attribution"] = []
    summary["history"] = {"regressions": []}
    assert Summary.from_dict(summary).to_json() == json.dumps(summary, indent=1)


def test_a_runner_spec_of_another_schema_version_is_refused_in_one_line() -> None:
    from traceladder.rung_spec import RunnerSpec, SpecError

    doc = json.loads(_spec("documents").to_json())
    assert RunnerSpec.from_json(json.dumps(doc)).schema_ == 1
    with pytest.raises(SpecError, match=r"^schema: version 2 is not the one this traceladder reads \(1\)$"):
        RunnerSpec.from_json(json.dumps({**doc, "schema": 2}))


def _reference_traces() -> list[Path]:
    from tests import conformance

    rocprof = sorted((conformance.REF / "rocprof").glob("*.json.gz"))
    return [*conformance.TRACES, *rocprof, *sorted(conformance.DERIVED.glob("*.json.gz"))]


def test_analysis_json_of_every_reference_trace_is_typed_and_keeps_its_bytes(tmp_path: Path) -> None:
    """analysis.json of the reference traces (PyTorch GPU, GPU-only, rocprofv3): every key is a
    field of TraceAnalysis (nothing in ``extra``), and reading then writing gives the same bytes."""
    from traceladder.analysis.analyzers.trace import analyze_trace

    traces = _reference_traces()
    assert len(traces) >= 5, "reference traces not found (../shared/reference)"
    for i, trace in enumerate(traces):
        analyze_trace(trace, tmp_path / str(i))
        stored = (tmp_path / str(i) / layout.ANALYSIS_OBJECT).read_text()
        typed = TraceAnalysis.from_json(stored, str(trace))
        assert typed.extra == {}, (trace.name, sorted(typed.extra))
        assert typed.to_json() == stored, trace.name


def test_an_analysis_without_whats_left_writes_none_of_its_keys() -> None:
    bare = TraceAnalysis(trace="t.json", notes=[])
    assert list(bare.to_dict()) == [
        *("schema", "trace", "device", "rank", "steps", "timeline", "timeline_percent"),
        *("top_ops", "categories", "regions", "notes"),
    ]
    left = TraceAnalysis(trace="t.json", headroom=[])
    assert {"mean_step_ms", "roofline_device", "roofline_share"} <= set(left.to_dict())
    assert left.to_dict()["roofline_device"] is None


def test_a_manifest_keeps_its_version_and_bytes_and_a_bad_one_names_its_field(tmp_path: Path) -> None:
    """manifest.json as a sink writes it (schema 1) and as retention rewrites it (schema 2, the
    removed objects listed): each reads into Manifest and writes back the same bytes."""
    sink = DirArtifactSink(tmp_path, prefix="traceladder", ladder="l")
    folder = f"{sink.namespace}run/rung"
    sink.put_bytes(f"{folder}/traces/t.json.gz", b"trace", "application/gzip")
    written = (tmp_path / sink.write_manifest(folder)).read_text()
    manifest = Manifest.from_json(written)
    assert manifest.version == 1 and manifest.to_json() == written
    assert manifest.entry(f"{folder}/traces/t.json.gz") == ManifestEntry(
        key=f"{folder}/traces/t.json.gz", sha256=manifest.objects[0].sha256, size=5
    )
    removed = {"key": f"{folder}/log.txt.gz", "bytes": 3, "sha256": None, "removed_at": "t", "policy": "logs"}
    retained = json.dumps({"schema": 2, "objects": [], "removed": [removed]}, indent=2, sort_keys=True) + "\n"
    assert Manifest.from_json(retained).to_json() == retained
    bad = {"schema": 1, "objects": [{"key": "k", "sha256": "s", "size": "5"}]}
    with pytest.raises(DocumentError, match=r"^manifest.json: objects\[0\]: size: expected int, got str$"):
        Manifest.from_dict(bad)
