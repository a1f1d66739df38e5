"""The documents the stages hand each other through the artifact store, standard library only.

One frozen dataclass per document, each with ``to_json``/``from_json`` and a schema version:

- ``RungResult``: a rung run's ``metrics.json`` (the runner writes it, the summary reads it);
- ``PlanDoc``: a run's ``plan.json`` (the DAG's plan task writes it);
- ``TraceAnalysis``: one trace's ``analysis.json`` (the analysis engine);
- ``RankCollectives``: a multi-rank rung's ``collectives.json``, one ``CollectiveStats`` per
  collective name;
- ``TraceComparison``: ``compare.json``, what moved between two traces;
- ``Manifest``: a folder's ``manifest.json``, one ``ManifestEntry`` per object;
- ``SummaryRef``: what publishing a summary returns (XCom), and ``IndexEntry``, the same record
  stored in the ladder's index (``runs/<run_id>.json``);
- ``Summary``: a run's ``summary.json``;
- ``TriageDoc``: a suspect rung's ``triage.json`` (issue 51), with its parts ``TriageSuspect``,
  ``DiffField``, ``TriageStep`` and ``Explanation``.

The codec they share is core/codec.py; the parts of a summary that its readers parse (rows,
lenses, history, attribution...) are core/summary_parts.py. The runner spec is
``traceladder.rung_spec.RunnerSpec``; its one purpose rule is here (``spec_purpose``), since plans
and results read it too.

The top-level fields are typed and checked on read; nested open-ended parts (per-report tables)
stay ``JSONValue``. Keys a version does not know are kept in ``extra`` and written
back after the known ones, so a newer writer's fields survive a round trip. A document of an older
schema version is upgraded where the change allows it, and refused otherwise with one line naming
the file and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import ClassVar, cast

from traceladder.core import layout
from traceladder.core.codec import D as D
from traceladder.core.codec import Document as Document
from traceladder.core.codec import DocumentError as DocumentError
from traceladder.core.codec import JSONObject as JSONObject
from traceladder.core.codec import JSONValue as JSONValue
from traceladder.core.codec import _f, _kind_ok, _Part
from traceladder.core.errors import ArtifactStoreError
from traceladder.core.summary_parts import RunPoints

# ---- narrowing a nested JSON value where a reader knows its shape (a wrong shape is a TypeError)


def as_object(value: object) -> JSONObject:
    """A JSON value known to be an object (a nested table of a document)."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def as_list(value: object) -> list[JSONValue]:
    """A JSON value known to be an array."""
    if not isinstance(value, list):
        raise TypeError(f"expected a JSON array, got {type(value).__name__}")
    return value


def as_objects(value: object) -> list[JSONObject]:
    """A JSON value known to be an array of objects (the same list, not a copy)."""
    items = as_list(value)
    for item in items:
        as_object(item)
    return cast(list[JSONObject], items)


def as_number(value: object) -> float | None:
    """A JSON number, or None for null."""
    if value is None:
        return None
    if not isinstance(value, (int, float)):
        raise TypeError(f"expected a JSON number, got {type(value).__name__}")
    return value


def as_float(value: object) -> float:
    """A JSON number that must be there (null is a TypeError)."""
    number = as_number(value)
    if number is None:
        raise TypeError("expected a JSON number, got null")
    return number


def as_int(value: object) -> int:
    """A JSON number or numeric string as an int (``int(value)``)."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"expected a JSON number, got {type(value).__name__}")


# ---- the spec's purpose and what-if params: each rule once


def default_purpose(lens: object) -> str:
    """The purpose of a spec written before specs carried one: an unprofiled run measured, a
    profiled one was a lens run."""
    return "measure" if lens == "none" else "lens"


def spec_purpose(spec: Mapping[str, JSONValue]) -> str:
    """A plan spec's purpose (``measure``, ``lens`` or ``profile``)."""
    return str(spec.get("purpose") or default_purpose(spec.get("lens")))


def what_if_params(params: Mapping[str, JSONValue] | None) -> JSONObject:
    """The params that change what a run measures (a trigger-form run); the ladder's defaults
    (unset, empty, ``ladder``) and the ladder's own name do not."""
    return {k: v for k, v in (params or {}).items() if k != "ladder" and v not in (None, "", [], "ladder")}


# ---- plan.json's adaptive record and an adaptive run's stop record


@dataclass(frozen=True, kw_only=True)
class AdaptiveRecord(_Part):
    """plan.json's ``adaptive`` record (stats/sequential.Design.as_dict, with ``planned_at``), or
    the ladder's rule it is made from: looks after blocks ``min_blocks``..``max_blocks``, the
    target MDE, the level (None: the design's default) and the time budget."""

    FILE: ClassVar[str] = "adaptive"

    min_blocks: int = _f("int")
    max_blocks: int = _f("int")
    target_mde_pct: float = _f("number")
    alpha: float | None = _f("number?", default=None)
    budget_s: float | None = _f("number?", default=None)


@dataclass(frozen=True, kw_only=True)
class StopRecord(_Part):
    """An adaptive run's stop (``stop.json``, and the plan's ``stop`` as it ran): the blocks run
    and why (``target`` or ``budget``), beside the look it stopped at."""

    FILE: ClassVar[str] = "stop"

    blocks: int = _f("int")
    reason: str | None = _f("str?", default=None)


@dataclass(frozen=True, kw_only=True)
class BatchArgs(_Part):
    """The batch and parallelism settings of a spec's ``model_args`` (Primus's names), the rest of
    its args kept aside: how much work a step holds and over how many ranks. A sequence length
    not given counts as 1 (a step's work is then its global batch)."""

    FILE: ClassVar[str] = "model_args"

    global_batch_size: float | None = _f("number?", default=None)
    micro_batch_size: float | None = _f("number?", default=None)
    seq_length: float | None = _f("number?", default=1)
    expert_model_parallel_size: float | None = _f("number?", default=None)
    tensor_model_parallel_size: float | None = _f("number?", default=None)
    pipeline_model_parallel_size: float | None = _f("number?", default=None)


# ---- metrics.json


@dataclass(frozen=True, kw_only=True)
class RungResult(Document):
    """One rung run's result, as the runner stores it (``metrics.json``). A refused rung (its
    preflight failed) has the same fields, with the run's own figures empty."""

    FILE: ClassVar[str] = layout.METRICS_OBJECT
    SCHEMA: ClassVar[int] = 2  # 2: a schema key; block, position and purpose in every result
    READS: ClassVar[tuple[int, ...]] = (1,)
    UNVERSIONED: ClassVar[int | None] = 1

    run_id: str = _f("str")
    ladder: str = _f("str")
    rung: str = _f("str")
    rung_id: str = _f("str")
    lens: str = _f("str")
    repeat: int = _f("int")
    block: int = _f("int")
    position: int = _f("int")
    purpose: str = _f("str")
    switch: str | None = _f("str?")
    value: bool | int | str | None = _f("scalar?")
    parent: str | None = _f("str?")
    status: str = _f("str")  # ok, failed, timeout, partial, preflight
    exit_code: int | None = _f("int?", default=None)
    step_ms: float | None = _f("number?", default=None)
    step_ms_values: list[float] = _f("list", default=[])
    step_cpu_ms: float | None = _f("number?", default=None)
    step_cpu_ms_values: list[float] = _f("list", default=[])
    # what step_cpu_ms is over step_cpu_ms_values: "mean" (absent: a run from before it, a median)
    step_cpu_statistic: str | None = _f("str?", default=None)
    tokens_per_sec_per_gpu: float | None = _f("number?", default=None)
    tokens_per_cpu_s_per_gpu: float | None = _f("number?", default=None)
    tflops: float | None = _f("number?", default=None)
    peak_mem_gb: float | None = _f("number?", default=None)
    iterations_used: list[int] = _f("list", default=[])
    traces: list[str] = _f("list", default=[])
    error: str | None = _f("str?", default=None)
    prefix: str | None = _f("str?", default=None)  # None: the rung stored nothing (summary/collect.py)
    wall_s: float | None = _f("number?", default=None)
    started_at: float | None = _f("number?", default=None)
    ended_at: float | None = _f("number?", default=None)
    provenance: JSONObject | None = _f("object?", default=None)  # None: the rung never started

    @classmethod
    def upgrade(cls, data: JSONObject, version: int, source: str) -> JSONObject:
        # 1 (no schema key): a refused rung's result lacked its place in the design (it was a plain
        # ladder's run), and hand-written results (tests, older tools) only the summary's fields
        lens = data.get("lens")
        upgraded: JSONObject = {"run_id": "", "ladder": "", "switch": None, "value": None, "parent": None}
        upgraded |= {"block": 0, "position": 0, "purpose": default_purpose(lens)}
        return upgraded | data

    # the run's figures a ladder's metric may name (stats/verdicts.VERDICT_METRICS), and their
    # per-iteration values
    FIGURES: ClassVar[frozenset[str]] = frozenset(
        {"step_ms", "step_cpu_ms", "tokens_per_sec_per_gpu", "tokens_per_cpu_s_per_gpu", "tflops", "peak_mem_gb"}
    )
    ITERATION_VALUES: ClassVar[frozenset[str]] = frozenset({"step_ms_values", "step_cpu_ms_values"})
    JSON_INDENT: ClassVar[int | None] = 2
    JSON_SORT_KEYS: ClassVar[bool] = True

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def figure(self, name: str) -> float | None:
        """One of the run's figures (``FIGURES``) by the name a ladder's metric gives it."""
        if name not in self.FIGURES:
            raise KeyError(f"not a figure of a rung result: {name}")
        value: float | None = getattr(self, name)
        return value

    def iteration_values(self, name: str) -> list[float]:
        """A figure's per-iteration values (``ITERATION_VALUES``), nulls left out."""
        if name not in self.ITERATION_VALUES:
            raise KeyError(f"not per-iteration values of a rung result: {name}")
        values: list[float | None] = getattr(self, name)
        return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


# ---- plan.json


@dataclass(frozen=True, kw_only=True)
class PlanDoc(Document):
    """A run's plan (``plan.json``): its params, the randomised block design, the adaptive
    stopping rule if any, and every spec (as ``RunnerSpec.to_json`` writes it). ``stop`` is set
    on the plan as it ran, after an adaptive early stop (never stored)."""

    FILE: ClassVar[str] = layout.PLAN_OBJECT
    SCHEMA: ClassVar[int] = 1
    UNVERSIONED: ClassVar[int | None] = 1  # plans built in tests and by older tools
    JSON_INDENT: ClassVar[int | None] = 1

    ladder: str = _f("str")
    run_id: str = _f("str")
    metric: str = _f("str", default="wall")
    drift: str = _f("str", default="none")
    correction: str = _f("str", default="per_rung")  # plans from before the field were judged per rung
    params: JSONObject = _f("object", default={})
    design: JSONObject | None = _f("object?", default=None, omit_none=True)
    adaptive: JSONObject | None = _f("object?", default=None, omit_none=True)
    specs: list[JSONObject] = _f("list")
    stop: JSONObject | None = _f("object?", default=None, omit_none=True)
    caveats: list[str] | None = _f("list?", default=None, omit_none=True)  # the ladder file's, for the summary

    def what_if_params(self) -> JSONObject:
        return what_if_params(self.params)

    @property
    def is_what_if(self) -> bool:
        """A run from the trigger form that changes what it measures: kept out of the history
        and of latest.json."""
        return bool(self.what_if_params())


# ---- analysis.json


@dataclass(frozen=True, kw_only=True)
class TraceGate(_Part):
    """A trace's fitness verdict (``analysis.json``'s ``gate``, analysis/reports/trace_gate.py),
    judged once when the trace is analysed: fit, or unfit with its reasons; what the lens records
    (``expect_cpu``/``expect_gpu``/``steps_asked``: None where unknown, then not checked) and the
    figures each rule read. The shares are % of GPU time (docs/trace-gate.md)."""

    FILE: ClassVar[str] = "gate"

    fit: bool = _f("bool")
    reasons: list[str] = _f("list", default=[])
    expect_cpu: bool | None = _f("bool?", default=None)
    expect_gpu: bool | None = _f("bool?", default=None)
    steps: int | None = _f("int?", default=None)
    steps_asked: int | None = _f("int?", default=None)
    host_ops: int = _f("int", default=0)
    gpu_events: int = _f("int", default=0)
    rank: int | None = _f("int?", default=None)
    world_size: int | None = _f("int?", default=None)
    unlaunched_pct: float | None = _f("number?", default=None)  # the rule's share (see `measure`)
    unlaunched_max_pct: float | None = _f("number?", default=None)
    comm_unlaunched_pct: float | None = _f("number?", default=None)  # collectives, set apart
    before_host_pct: float | None = _f("number?", default=None)  # GPU time before the host span
    after_host_pct: float | None = _f("number?", default=None)
    graph_pct: float | None = _f("number?", default=None)
    graph_max_pct: float | None = _f("number?", default=None)
    measure: str | None = _f("str?", default=None)


@dataclass(frozen=True, kw_only=True)
class TraceAnalysis(Document):
    """One trace's analysis (``analysis.json``). The report sections (timeline, top ops,
    categories, GEMM rates, perf sheets, what's left) are open-ended tables. The sections only
    some traces get are None where absent and then not written: GEMM rates and perf sheets (not
    rocprof/RPD traces) and what's left, whose scalars (``mean_step_ms``, the roofline's) may be
    null and are written with ``headroom`` (the section is one report: all of it or none)."""

    FILE: ClassVar[str] = layout.ANALYSIS_OBJECT
    SCHEMA: ClassVar[int] = 2  # 2: shape_rates (a version 1 document reads as it is, without them)
    READS: ClassVar[tuple[int, ...]] = (1,)
    JSON_INDENT: ClassVar[int | None] = 2
    JSON_NEWLINE: ClassVar[bool] = True
    # written exactly when headroom is (None inside a present section is a JSON null)
    WITH_HEADROOM: ClassVar[frozenset[str]] = frozenset(
        {"step_regions_outside_ms_per_step", "mean_step_ms", "roofline_share", "roofline_device"}
    )

    trace: str = _f("str")
    device: str | None = _f("str?", default=None)
    rank: int | None = _f("int?", default=None)
    steps: int | None = _f("int?", default=None)
    timeline: JSONObject = _f("object", default={})
    timeline_percent: JSONObject = _f("object", default={})
    top_ops: list[JSONObject] = _f("list", default=[])
    categories: JSONValue = _f("any?", default=None)
    regions: JSONValue = _f("any?", default=None)
    gemm: list[JSONObject] | None = _f("list?", default=None, omit_none=True)
    perf_sheets: JSONObject | None = _f("object?", default=None, omit_none=True)
    # what's left (analysis/reports/whats_left.py; docs/whats-left.md)
    step_regions: list[JSONObject] | None = _f("list?", default=None, omit_none=True)
    step_regions_outside_ms_per_step: float | None = _f("number?", default=None, omit_none=True)
    idle_breakdown: list[JSONObject] | None = _f("list?", default=None, omit_none=True)
    op_origins: list[JSONObject] | None = _f("list?", default=None, omit_none=True)
    headroom: list[JSONObject] | None = _f("list?", default=None, omit_none=True)  # the ranked targets
    mean_step_ms: float | None = _f("number?", default=None, omit_none=True)
    roofline_share: float | None = _f("number?", default=None, omit_none=True)
    roofline_device: str | None = _f("str?", default=None, omit_none=True)
    # GEMM and attention rates per shape (analysis/reports/shape_rates.py)
    shape_rates: JSONObject | None = _f("object?", default=None, omit_none=True)
    notes: list[str] | None = _f("list?", default=None, omit_none=True)
    # the trace gate's verdict (None: analysed before the gate, not judged)
    gate: TraceGate | None = _f("object?", default=None, part=TraceGate, omit_none=True)

    def _written(self, name: str, value: object) -> bool:
        if name in self.WITH_HEADROOM:
            return self.headroom is not None
        return super()._written(name, value)


# ---- collectives.json (analysis/analyzers/ranks.py): the all-ranks join of one rung's traces


@dataclass(frozen=True, kw_only=True)
class CollectiveStats(Document):
    """One collective name's figures over the ranks: each ``*_us``/``*_mb``/``*_gbs`` table is
    ``{"total"?, "mean", "min", "max"}`` (nulls where no value was finite), the waits are per rank
    (keys are rank numbers as strings), and the straggler is the rank that waited least."""

    FILE: ClassVar[str] = "collective"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    device: str | None = _f("str?")
    type: str | None = _f("str?")  # TraceLens's collective type (None: not one it names)
    implicit_sync: bool = _f("bool")
    process_groups: list[str] = _f("list")
    dtypes: list[str] = _f("list")
    count: int = _f("int")
    latency_us: JSONObject = _f("object")
    wall_time_us: JSONObject = _f("object")
    msg_size_mb: JSONObject = _f("object")
    algo_bw_gbs: JSONObject = _f("object")  # GiB/s, implicit-sync collectives only (else nulls)
    bus_bw_gbs: JSONObject = _f("object")
    start_skew_us: JSONObject = _f("object")
    end_skew_us: JSONObject = _f("object")
    wait_us: JSONObject = _f("object")
    mean_wait_us: JSONObject = _f("object")
    straggler: JSONObject = _f("object")  # rank, total_wait_us, times_arrived_last, others_waited_*


@dataclass(frozen=True, kw_only=True)
class RankCollectives(Document):
    """A multi-rank rung's ``collectives.json``: the ranks joined, the collectives matched across
    them, each collective name's figures and the straggler (docstring of ``analyze_ranks``)."""

    FILE: ClassVar[str] = layout.COLLECTIVES_OBJECT
    SCHEMA: ClassVar[int] = 1
    JSON_INDENT: ClassVar[int | None] = 2
    JSON_NEWLINE: ClassVar[bool] = True

    world_size: int = _f("int")
    gpus_per_node: int | None = _f("int?", default=None)
    gpus_per_node_source: str | None = _f("str?", default=None)  # given | deviceProperties
    device: str = _f("str")  # gpu | cpu | mixed
    ranks: list[JSONObject] = _f("list", default=[])
    process_groups: list[str] = _f("list", default=[])
    matched: JSONObject = _f("object")  # collectives, events, all_matched
    collectives: dict[str, CollectiveStats] = _f("object", default={}, part=CollectiveStats, by_name=True)
    straggler: JSONObject | None = _f("object?", default=None)
    stragglers_per_step: list[JSONObject] = _f("list", default=[])
    files: list[str] = _f("list", default=[])
    notes: list[str] = _f("list", default=[])


# ---- compare.json (analysis/analyzers/diff.py): what moved between two traces' analyses


@dataclass(frozen=True, kw_only=True)
class TraceComparison(Document):
    """A comparison of a new trace against a base one (``compare.json``). Every delta is new minus
    base in µs per profiled step (``unit`` says when a work ratio or the runs' speeds scale a
    side); ``device``, ``steps`` and ``speed`` are ``{"base", "new"}``; the top movers are rows of
    the compare sheets (``name``, ``delta_us``, ``status``)."""

    FILE: ClassVar[str] = layout.COMPARE_OBJECT
    SCHEMA: ClassVar[int] = 1
    JSON_INDENT: ClassVar[int | None] = 1
    JSON_NEWLINE: ClassVar[bool] = True

    base: str = _f("str")
    new: str = _f("str")
    device: dict[str, str | None] = _f("object")
    steps: dict[str, int] = _f("object")
    work_ratio: float = _f("number")
    speed: dict[str, float] = _f("object")
    unit: str = _f("str")
    total_kernel_time_delta_us: float = _f("number")
    busy_time_delta_us: float = _f("number")
    residual_us: float = _f("number")
    categories: dict[str, float] = _f("object")  # op category -> delta (the gap row left out)
    timeline: dict[str, float] = _f("object")  # gpu_timeline.csv type -> delta
    regions: dict[str, float] = _f("object")
    regions_measure: str = _f("str")  # layout.REGION_OP_TIME or REGION_RANGE_TIME
    regions_outside_us: float | None = _f("number?", default=None)  # None: an analysis predates it
    appeared: list[str] = _f("list", default=[])
    vanished: list[str] = _f("list", default=[])
    top_ops: list[JSONObject] = _f("list", default=[])
    top_kernels: list[JSONObject] = _f("list", default=[])
    notes: list[str] = _f("list", default=[])


# ---- manifest.json (storage/artifacts.py): what a folder holds, for verified reads


@dataclass(frozen=True, kw_only=True)
class ManifestEntry(Document):
    """One object a manifest lists: its key, size and sha256 as written."""

    FILE: ClassVar[str] = "manifest entry"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    key: str = _f("str")
    sha256: str = _f("str")
    size: int = _f("int")
    # a generated history's shrunk trace: the bytes stored, where `size` is the real trace's
    stored_size: int | None = _f("int?", default=None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class Manifest(Document):
    """A folder's ``manifest.json``: every object written under it (``objects``). Schema 1 as a
    sink writes it; 2 once retention has moved removed objects to ``removed`` (their key, bytes,
    sha256, removed_at and policy; storage/retention.py). The version is a field: both are
    written back as read."""

    FILE: ClassVar[str] = layout.MANIFEST_NAME
    SCHEMA: ClassVar[int] = 2
    READS: ClassVar[tuple[int, ...]] = (1,)
    WRITES_SCHEMA: ClassVar[bool] = False
    JSON_INDENT: ClassVar[int | None] = 2
    JSON_SORT_KEYS: ClassVar[bool] = True
    JSON_NEWLINE: ClassVar[bool] = True

    version: int = _f("int", key="schema")
    objects: list[ManifestEntry] = _f("list", default=[], part=ManifestEntry)
    removed: list[JSONObject] | None = _f("list?", default=None, omit_none=True)

    def entry(self, key: str) -> ManifestEntry | None:
        return next((o for o in self.objects if o.key == key), None)


# ---- the published run: summary.json, its reference, the index entry


@dataclass(frozen=True, kw_only=True)
class Summary(Document):
    """A run's summary (``summary.json``): the ladder table with its verdicts, lens overheads, the
    profiled rung's breakdown, collectives, what's left (``headroom``), failures, provenance,
    findings, and once published the attribution and the history verdicts. ``repeats`` is set
    for an adaptive plan only. Each ``rungs[].vs_parent`` is the ladder-wide call (``calls``
    names the rule); its ``per_rung`` holds the call, interval and MDE of the rung tested alone."""

    FILE: ClassVar[str] = layout.SUMMARY_JSON
    SCHEMA: ClassVar[int] = 2  # 2: vs_parent from the block model replaces ms_removed / tokens_gained
    READS: ClassVar[tuple[int, ...]] = (1,)  # the top level is unchanged; readers of rows check
    JSON_INDENT: ClassVar[int | None] = 1

    ladder: str = _f("str")
    run_id: str = _f("str")
    root: str | None = _f("str?", default=None)
    rungs: list[JSONObject] = _f("list")
    metric: str = _f("str", default="wall")
    model: JSONObject | None = _f("object?", default=None)
    # the ladder-wide rule over the verdicts (stats/verdicts.ladder_verdicts); summaries before it: none
    calls: JSONObject | None = _f("object?", default=None, omit_none=True)
    repeats: JSONObject | None = _f("object?", default=None, omit_none=True)
    lenses: list[JSONObject] = _f("list", default=[])
    lens_rung: str | None = _f("str?", default=None)
    profile: JSONObject | None = _f("object?", default=None)
    collectives: JSONObject | None = _f("object?", default=None)  # the multi-rank rung, if any
    headroom: list[JSONObject] = _f("list", default=[])  # what's left: the ranked targets per rung
    failed_rungs: list[str] = _f("list", default=[])
    failures: list[JSONObject] = _f("list", default=[])
    provenance: JSONObject = _f("object", default={})
    findings: list[str] = _f("list", default=[])
    caveats: list[str] | None = _f("list?", default=None, omit_none=True)  # the ladder's limits, printed first
    # one core/summary_parts.GateRow per trace (summary/trace_gate.py); None: a summary before the gate
    trace_gate: list[JSONObject] | None = _f("list?", default=None, omit_none=True)
    attribution: list[JSONObject] | None = _f("list?", default=None)
    history: JSONObject | None = _f("object?", default=None, omit_none=True)
    # summary/lens_runs.py, after the attribution: the heavy lens's kernel names (analysis's
    # KernelNames), the every-rung block's cost, each rung with no "why it moved" line and why
    kernel_names: JSONObject | None = _f("object?", default=None, omit_none=True)
    every_rung: JSONObject | None = _f("object?", default=None, omit_none=True)
    unexplained: list[JSONObject] | None = _f("list?", default=None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class SummaryRef(Document):
    """What publishing a run returns (the publish task's XCom): where its summary lies, its
    what-if params, failures, history points and the regressions the history found."""

    FILE: ClassVar[str] = "summary reference"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    params: JSONObject = _f("object", default={})  # the what-if params only (what_if_params)
    unanalysed_traces: list[str] = _f("list", default=[])
    run_id: str = _f("str")
    summary_json: str | None = _f("str?", default=None)
    summary_md: str | None = _f("str?", default=None)
    report_html: str | None = _f("str?", default=None)
    failed_rungs: list[str] = _f("list", default=[])
    logical_date: str | None = _f("str?", default=None)
    points: RunPoints | None = _f("object?", default=None, omit_none=True, part=RunPoints)
    regressions: list[str] = _f("list", default=[])
    regression_calls: list[str] = _f("list", default=[])
    provenance_changes: list[JSONValue] = _f("list", default=[])
    # rungs to confirm side by side (issue 51): history.suspects less their numbers' detail
    suspects: list[JSONObject] = _f("list", default=[])

    @property
    def is_what_if(self) -> bool:
        """A trigger-form run that changes what it measures (the one rule: ``what_if_params``)."""
        return bool(what_if_params(self.params))


@dataclass(frozen=True, kw_only=True)
class IndexEntry(SummaryRef):
    """A published run in the ladder's index (``runs/<run_id>.json``, or a row of the older
    ``index.json``, which is read as version 1)."""

    FILE: ClassVar[str] = "index entry"
    SCHEMA: ClassVar[int] = 2  # 2: one object per run
    READS: ClassVar[tuple[int, ...]] = (1,)
    WRITES_SCHEMA: ClassVar[bool] = True
    JSON_INDENT: ClassVar[int | None] = 1

    published_at: str = _f("str", default="")

    @classmethod
    def of(cls, ref: SummaryRef, published_at: str) -> IndexEntry:
        fields_of_ref = {f.name: getattr(ref, f.name) for f in fields(SummaryRef)}
        return cls(**fields_of_ref, published_at=published_at)

    def order_key(self) -> tuple[str, str]:
        """Runs in logical-date order (entries from before logical dates use their publish time)."""
        return (self.logical_date or self.published_at, self.published_at)


# ---- the run index's one reading rule (the summary, the Ladders page and retention read by it)


def legacy_rows(doc: object, key: str) -> list[tuple[object, str]]:
    """The rows of an older ``index.json`` (None: it is gone), each with where it came from; a
    document without a runs list is an ArtifactStoreError."""
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if doc is not None and not isinstance(runs, list):
        raise ArtifactStoreError(f"{key} has no runs list", key)
    return [(row, f"{key} runs[{i}]") for i, row in enumerate(runs or [])]


def entries_from(rows: Iterable[tuple[object, str]], skip_bad: bool = False) -> list[IndexEntry]:
    """The index's one reading rule, oldest first: a row that is not an object with a non-empty
    string `run_id` is left out (a stray object); a later row of the same run wins; a row with a
    field of the wrong type is a one-line DocumentError naming its object and field (left out
    instead with `skip_bad`: a page lists the runs it can read, retention judges only the runs it
    can date)."""
    found: dict[str, IndexEntry] = {}
    for row, source in rows:
        if isinstance(row, dict) and isinstance(row.get("run_id"), str) and row["run_id"]:
            try:
                entry = IndexEntry.from_dict(row, source)
            except DocumentError:
                if skip_bad:
                    continue
                raise
            found[entry.run_id] = entry
    return sorted(found.values(), key=IndexEntry.order_key)


# ---- triage.json (issue 51): a suspect rung confirmed, bisected, explained


TRIAGE_STATES = ("running", "done", "not approved", "failed")
TRIAGE_LABELS = ("confirmed regression", "confirmed improvement", "not reproduced", "insufficient data", "not approved")
STEP_VERDICTS = ("confirmed", "not reproduced", "insufficient", "skipped")


@dataclass(frozen=True, kw_only=True)
class DiffField(_Part):
    """One field that differs between the last good run and the suspect run: `section` says where
    it was read (image: the image digest; spec: the resolved rung spec from spec.json/plan.json;
    provenance: metrics.json's provenance; build: the build catalog's entry)."""

    FILE: ClassVar[str] = "diff field"

    section: str = _f("str", one_of=("image", "spec", "provenance", "build"))
    field: str = _f("str")
    good: JSONValue = _f("any?")
    bad: JSONValue = _f("any?")
    bisectable: bool = _f("bool", default=True)  # a driver or a host is reported, not bisected


@dataclass(frozen=True, kw_only=True)
class TriageSuspect(_Part):
    """Why the rung is a suspect (stats/history.py `suspect`) and what differs from its last good run."""

    FILE: ClassVar[str] = "suspect"

    rung: str = _f("str")
    run_id: str = _f("str")
    good_run_id: str = _f("str")
    reason: str = _f("str", one_of=("change point", "prediction bound", "manual"))
    direction: str = _f("str", one_of=("slower", "faster"))
    delta_pct: float = _f("number")
    diff: list[DiffField] = _f("list", default=[], part=DiffField)


@dataclass(frozen=True, kw_only=True)
class TriageStep(_Part):
    """One confirm between two setups (the suspect's own, a bisection step, or another rung at the
    first bad candidate), or a skipped candidate: its verdict and interval (B minus A, in %)."""

    FILE: ClassVar[str] = "step"

    # confirm: the suspect's own; bisect: a candidate against its range's good end (by size);
    # pair: a culprit's two neighbours compared directly; range: a range's two ends, to decide
    # whether it holds another culprit; at first bad: another rung at the culprit
    kind: str = _f("str", one_of=("confirm", "bisect", "pair", "range", "at first bad"))
    rung: str = _f("str")
    good: str = _f("str")  # the A side: a run id or a candidate's name
    candidate: str = _f("str")  # the B side
    verdict: str = _f("str", one_of=STEP_VERDICTS)
    delta_pct: float | None = _f("number?", default=None)
    interval_pct: list[float] | None = _f("list?", default=None)
    blocks: int = _f("int", default=0)
    looks: list[JSONObject] = _f("list", default=[])
    reason: str | None = _f("str?", default=None, omit_none=True)  # a skip's, or why insufficient
    runs: int = _f("int", default=0)  # runs started, failed ones and retries included
    run_s: float = _f("number", default=0.0)  # their seconds, summed (device-seconds / devices)
    more_blocks: int | None = _f("int?", default=None, omit_none=True)  # insufficient: about how many more
    size_pct: float | None = _f("number?", default=None, omit_none=True)  # the size s the step judged against

    @classmethod
    def from_dict(cls, data: object, source: str | None = None) -> TriageStep:
        where = source or cls.FILE
        doc = super().from_dict(data, where)
        if doc.interval_pct is not None and (
            len(doc.interval_pct) != 2 or not all(_kind_ok("number", x) for x in doc.interval_pct)
        ):
            raise DocumentError(f"{where}: interval_pct: expected [low, high] numbers")
        return doc


@dataclass(frozen=True, kw_only=True)
class Culprit(_Part):
    """A candidate named as a cause: its pair (last good, first bad) compared directly on the
    bisected rung, and the share of the confirmed change that pair carries, with its interval."""

    FILE: ClassVar[str] = "culprit"

    name: str = _f("str")
    last_good: str = _f("str")
    delta_pct: float = _f("number")
    share_pct: float = _f("number")
    share_interval_pct: list[float] = _f("list")

    def share_text(self) -> str:
        """`share 63% [34%, 91%]`, as the notice and the demo print it."""
        low, high = self.share_interval_pct
        return f"share {self.share_pct:.0f}% [{low:.0f}%, {high:.0f}%]"


@dataclass(frozen=True, kw_only=True)
class Explanation(_Part):
    """The attribution between one profiled run of the good and of the first bad candidate."""

    FILE: ClassVar[str] = "explanation"

    lens: str = _f("str")
    good: str = _f("str")
    bad: str = _f("str")
    sentence: str | None = _f("str?", default=None)
    top_ops: list[JSONObject] = _f("list", default=[])
    top_kernels: list[JSONObject] = _f("list", default=[])
    regions: list[JSONObject] = _f("list", default=[])
    error: str | None = _f("str?", default=None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class TriageDoc(Document):
    """A suspect rung's triage (``triage.json``, layout.triage_key): its suspect, every step, the
    bisection's conclusion, the explanation, the label and the state. One suspect group per ladder
    run: `group` names its rungs and `bisected_on` the rung the one bisection ran on."""

    FILE: ClassVar[str] = layout.TRIAGE_OBJECT
    SCHEMA: ClassVar[int] = 1
    JSON_INDENT: ClassVar[int | None] = 1

    ladder: str = _f("str")
    run_id: str = _f("str")
    rung: str = _f("str")
    state: str = _f("str", one_of=TRIAGE_STATES)
    label: str | None = _f("str?", default=None, one_of=TRIAGE_LABELS)
    suspect: TriageSuspect = _f("object", part=TriageSuspect)
    group: list[str] = _f("list", default=[])
    bisected_on: str | None = _f("str?", default=None)
    candidates: list[JSONObject] = _f("list", default=[])
    steps: list[TriageStep] = _f("list", default=[], part=TriageStep)
    first_bad: str | None = _f("str?", default=None)  # the largest culprit's (or this rung's own)
    last_good: str | None = _f("str?", default=None)
    culprits: list[Culprit] = _f("list", default=[], part=Culprit)  # largest share first
    conclusion: str | None = _f("str?", default=None)
    non_bisectable: list[DiffField] = _f("list", default=[], part=DiffField)
    explanation: Explanation | None = _f("object?", default=None, part=Explanation)
    # "confirm" / "pair <culprit>" -> `traceladder triage repro` of that step (record.reproduce_commands);
    # a triage.json from before it: "good"/"bad" -> a `traceladder run-rung` command
    reproduce: JSONObject = _f("object", default={})
    error: str | None = _f("str?", default=None, omit_none=True)
    updated_at: str = _f("str", default="")
