"""The parts of a published run's summary as their classes, standard library only: a summary is
built and stored as JSON (``core/documents.Summary``), and its readers (the findings, the
renderers, the history, the compare page) read its parts through these instead of walking dicts:

- ``SummaryRung`` (a row of the ladder table) with ``RungChange`` (its ``vs_parent``) and
  ``RunEstimate`` (a run-level figure);
- ``SummaryLens`` (``LensRatio``), ``ProfileWindow``, ``CollectivesSummary``, ``SlurmNodes``,
  ``WhatsLeftEntry`` (``ShapeRates``), ``BlockModelFit``, ``LadderCalls``, ``AdaptiveRepeats``;
- ``AttributionEntry`` (``DeltaRow``, ``AttributionNoise``);
- ``LadderHistory`` (``RungSeries``, ``HistoryPoint``, ``HistorySuspect`` with ``SuspectChange`` or
  ``SuspectBound``, ``SinceLast``) and a run's ``RunPoints`` (``RungPoint``), which its index
  entry stores.

They are read-side parts: a reader parses the part it needs (``summary_rungs``, ``summary_part``...);
keys a part does not name stay in its ``extra``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from traceladder.core import layout
from traceladder.core.codec import D, JSONObject, JSONValue, _f, _Part, _parts, _replace


# ---- a run's points: what one published run contributes to its ladder's history


@dataclass(frozen=True, kw_only=True)
class RunEstimate(_Part):
    """A rung's run-level figure in one run: the mean over its runs, the 95% half-width (None for a
    single run) and how many runs (stats.model.Estimate as stored)."""

    FILE: ClassVar[str] = "estimate"

    mean: float = _f("number")
    ci95: float | None = _f("number?", default=None)
    n: int = _f("int", default=0)


def _estimate(value: object, where: str) -> RunEstimate | None:
    return None if value is None else RunEstimate.from_dict(value, where)


@dataclass(frozen=True, kw_only=True)
class RungPoint(_Part):
    """One rung's figures in a run's points (None: the run had none of that figure)."""

    FILE: ClassVar[str] = "rung point"

    step_ms: RunEstimate | None = _f("object?", default=None, part=RunEstimate)
    step_cpu_ms: RunEstimate | None = _f("object?", default=None, part=RunEstimate)
    tokens_per_sec_per_gpu: RunEstimate | None = _f("object?", default=None, part=RunEstimate)

    def figure(self, name: str) -> RunEstimate | None:
        """The figure a ladder's metric judges (``step_ms`` or ``step_cpu_ms``)."""
        if name not in ("step_ms", "step_cpu_ms", "tokens_per_sec_per_gpu"):
            raise KeyError(f"not a figure of a rung point: {name}")
        value: RunEstimate | None = getattr(self, name)
        return value


@dataclass(frozen=True, kw_only=True)
class RunPoints(_Part):
    """What one run contributes to the history (stats/history.run_points), stored in its index
    entry: the ladder's metric, how a run's figure is made from its iterations (None: unknown),
    each rung's figures and the run's provenance. Entries from before ``metric`` were judged on
    wall time."""

    FILE: ClassVar[str] = "points"

    metric: str | None = _f("str?", default=None, omit_none=True)
    run_statistic: str | None = _f("str?", default=None)
    rungs: dict[str, RungPoint] = _f("object", default={}, part=RungPoint, by_name=True)
    provenance: JSONObject = _f("object", default={})


# ---- a summary's ladder table: one row per rung


@dataclass(frozen=True, kw_only=True)
class RungChange(_Part):
    """A rung against its parent (a row's ``vs_parent``): the figure judged, new minus parent
    (``delta``, and in % ``delta_pct``) with its interval (absolute ``ci95``, in % ``ci95_pct``;
    summaries from before it have none), the call, the MDE at 80% power and, under a ladder-wide
    rule, the call of the rung tested alone (``per_rung``)."""

    FILE: ClassVar[str] = "vs_parent"

    metric: str | None = _f("str?", default=None)
    delta: float | None = _f("number?", default=None)
    ci95: list[float | None] | None = _f("list?", default=None)
    ci95_pct: list[float | None] | None = _f("list?", default=None)
    delta_pct: float | None = _f("number?", default=None)
    verdict: str | None = _f("str?", default=None)
    mde_pct: float | None = _f("number?", default=None)
    per_rung: RungChange | None = _f("object?", default=None, omit_none=True)

    @classmethod
    def from_dict(cls, data: object, source: str | None = None) -> RungChange:
        where = source or cls.FILE
        doc = super().from_dict(data, where)
        if doc.per_rung is None or isinstance(doc.per_rung, RungChange):
            return doc
        return _replace(doc, per_rung=RungChange.from_dict(doc.per_rung, f"{where}: per_rung"))

    @property
    def called(self) -> bool:
        return self.verdict in ("faster", "slower")


@dataclass(frozen=True, kw_only=True)
class SummaryRung(_Part):
    """A row of the summary's ladder table (``rungs[]``): the rung's place in the ladder, its
    measure runs (how many, how many ok, their statuses), their figures (mean and 95% half-width
    over the runs), its kind (a batch rung is judged on throughput) and its change against the
    parent (``vs_parent``, a non-root rung) and the root (``speedup_vs_root``, tokens/s/GPU)."""

    FILE: ClassVar[str] = "rung row"

    rung: str = _f("str")
    parent: str | None = _f("str?", default=None)
    switch: str | None = _f("str?", default=None)
    value: bool | int | str | None = _f("scalar?", default=None)
    runs: int = _f("int", default=0)
    ok: int = _f("int", default=0)
    statuses: list[str] = _f("list", default=[])
    step_ms: RunEstimate | None = _f("object?", default=None, part=RunEstimate)
    step_ms_per_repeat: list[float | None] = _f("list", default=[])
    step_cpu_ms: RunEstimate | None = _f("object?", default=None, part=RunEstimate)
    tokens_per_sec_per_gpu: RunEstimate | None = _f("object?", default=None, part=RunEstimate)
    peak_mem_gb: float | None = _f("number?", default=None)
    kind: str = _f("str", default="optimisation")  # or batch
    batch_setting: str | None = _f("str?", default=None, omit_none=True)
    vs_parent: RungChange | None = _f("object?", default=None, omit_none=True, part=RungChange)
    speedup_vs_root: RunEstimate | None = _f("object?", default=None, part=RunEstimate)


def summary_rungs(value: object, source: str = layout.SUMMARY_JSON) -> list[SummaryRung]:
    """A summary's ``rungs`` as their class (a summary is built and stored as JSON; its readers
    read the rows through this)."""
    return _parts(SummaryRung, value, f"{source}: rungs")


def summary_part(cls: type[D], value: object, where: str) -> D | None:
    """An optional part of a summary (``profile``, ``collectives``, ...) as its class; None where
    the summary has none (null, absent or empty)."""
    return cls.from_dict(value, where) if value else None


@dataclass(frozen=True, kw_only=True)
class LadderCalls(_Part):
    """A summary's ``calls``: the rule over the ladder's verdicts (per rung, Holm,
    Benjamini-Hochberg), how many comparisons and which rungs it called, which a test of the rung
    alone would call but it does not, the levels and critical values of its intervals and MDEs,
    and its sentence."""

    FILE: ClassVar[str] = "calls"

    rule: str | None = _f("str?", default=None)
    name: str = _f("str", default="")
    alpha: float | None = _f("number?", default=None)
    comparisons: int = _f("int", default=0)
    called: list[str] = _f("list", default=[])
    not_called_over_ladder: list[str] = _f("list", default=[])
    interval_level: float | None = _f("number?", default=None)
    interval_z: float | None = _f("number?", default=None)
    mde_level: float | None = _f("number?", default=None)
    mde_z: float | None = _f("number?", default=None)
    per_rung_z: float | None = _f("number?", default=None)
    sentence: str | None = _f("str?", default=None)

    @property
    def per_rung(self) -> bool:
        """Each rung judged on its own (and summaries from before the record)."""
        return self.rule in (None, "per_rung")

    @property
    def stated_rule(self) -> str:
        """The rule's sentence as the summary states it: "" over no comparison (a one-rung ladder,
        whose summaries from before this check stored "over the ladder's 0 comparisons")."""
        return (self.sentence or "") if self.comparisons else ""


@dataclass(frozen=True, kw_only=True)
class AdaptiveRepeats(_Part):
    """A summary's ``repeats`` (an adaptive plan only): the design (``min_blocks``...), the blocks
    run of those planned, why it stopped, the critical value of the look it stopped at, each look
    and the sentence."""

    FILE: ClassVar[str] = "repeats"

    min_blocks: int = _f("int")
    max_blocks: int = _f("int")
    blocks_run: int = _f("int")
    critical_z_used: float | None = _f("number?", default=None)
    sentence: str = _f("str")


@dataclass(frozen=True, kw_only=True)
class ShapeRates(_Part):
    """A What's-left entry's rates per shape (analysis/reports/shape_rates.py): the device the
    peak shares use and where it came from, and the top GEMM shapes and attention calls (each
    ``op``, ``shape``, ``dtype``, ``calls``, ``ms_per_step``, ``tflops``, ``tbps``,
    ``peak_name``, ``pct_of_peak_tflops``, ``pct_of_peak_tbps``)."""

    FILE: ClassVar[str] = "shape rates"

    device: str | None = _f("str?", default=None)
    device_from: str | None = _f("str?", default=None, one_of=("trace", "cluster", "unknown", "cpu"))
    device_note: str | None = _f("str?", default=None)
    gemm: list[JSONObject] = _f("list", default=[])
    attention: list[JSONObject] = _f("list", default=[])


@dataclass(frozen=True, kw_only=True)
class WhatsLeftEntry(_Part):
    """An entry of a summary's what's left (stored as ``headroom``): a covered rung and its role,
    the profiled run's trace, and its ranked targets (each ``kind``, ``target``, ``ms_per_step``,
    ``pct_of_step``, ``recoverable_ms``, ``sentence``), the best of each kind the top lacks, and a
    note (why there is nothing to rank, or no recoverable time)."""

    FILE: ClassVar[str] = "headroom entry"

    rung: str = _f("str")
    role: str = _f("str", default="")
    lens: str | None = _f("str?", default=None)
    trace: str | None = _f("str?", default=None)
    device: str | None = _f("str?", default=None)
    steps: int | None = _f("int?", default=None)
    mean_step_ms: float | None = _f("number?", default=None)
    targets: list[JSONObject] = _f("list", default=[])
    other_kinds: list[JSONObject] | None = _f("list?", default=None)
    note: str | None = _f("str?", default=None)
    rates: ShapeRates | None = _f("object?", default=None, omit_none=True, part=ShapeRates)  # GEMM, attention


def whats_left_entries(value: object, source: str = layout.SUMMARY_JSON) -> list[WhatsLeftEntry]:
    """A summary's what's left (``headroom``) as its class."""
    return _parts(WhatsLeftEntry, value, f"{source}: headroom")


@dataclass(frozen=True, kw_only=True)
class BlockModelFit(_Part):
    """A summary's ``model`` per figure (stats/verdicts._model): the block model's size (runs,
    blocks, missing cells, residual df), its drift terms, what a run's figure is over its
    iterations, its quantiles and noise (residual, iteration and run-level sd)."""

    FILE: ClassVar[str] = "model"

    df: float | None = _f("number?", default=None)
    runs: int | None = _f("int?", default=None)
    blocks: int | None = _f("int?", default=None)
    drift: str | None = _f("str?", default=None)
    drift_terms: int | None = _f("int?", default=None)
    run_statistic: str | None = _f("str?", default=None)  # None: a summary from before it (medians)
    run_sd_pct: float | None = _f("number?", default=None)


def model_fit(model: object, figure: str, source: str = layout.SUMMARY_JSON) -> BlockModelFit | None:
    """The block model of one figure from a summary's ``model`` (None: none fitted)."""
    found = model.get(figure) if isinstance(model, dict) else None
    return summary_part(BlockModelFit, found, f"{source}: model[{figure}]")


@dataclass(frozen=True, kw_only=True)
class LensRatio(_Part):
    """A lens's step time over the unprofiled run of its block: the geometric mean ratio, its 95%
    interval ``[low, high]`` (None below 1 df), the pairs and the df."""

    FILE: ClassVar[str] = "overhead_ratio"

    mean: float = _f("number")
    ci95: list[float] | None = _f("list?", default=None)
    n: int | None = _f("int?", default=None)
    df: float | None = _f("number?", default=None)


@dataclass(frozen=True, kw_only=True)
class SummaryLens(_Part):
    """A row of the summary's lens table: a lens on the lens rung, its runs and step time, and its
    overhead against the unprofiled runs (paired within lens blocks)."""

    FILE: ClassVar[str] = "lens row"

    lens: str = _f("str")
    rung: str = _f("str")
    runs: int = _f("int", default=0)
    ok: int = _f("int", default=0)
    step_ms: RunEstimate | None = _f("object?", default=None, part=RunEstimate)
    overhead_ratio: LensRatio | None = _f("object?", default=None, part=LensRatio, empty_is_none=True)
    traces: int = _f("int", default=0)


def summary_lenses(value: object, source: str = layout.SUMMARY_JSON) -> list[SummaryLens]:
    """A summary's ``lenses`` as their class."""
    return _parts(SummaryLens, value, f"{source}: lenses")


@dataclass(frozen=True, kw_only=True)
class AttributionNoise(_Part):
    """How much a profiled run's op time per step varies between runs of one rung
    (summary/attribution.ProfileNoise), with the ± it gives an entry (``half_width_us``)."""

    FILE: ClassVar[str] = "noise"

    sd_pct: float = _f("number")
    df: int = _f("int")
    t: float = _f("number")
    runs: int = _f("int")
    rungs: list[str] = _f("list", default=[])
    half_width_us: float = _f("number")


@dataclass(frozen=True, kw_only=True)
class DeltaRow(_Part):
    """A named part's change, new minus base, in µs per profiled step (a category, a region)."""

    FILE: ClassVar[str] = "delta"

    name: str = _f("str")
    delta_us: float = _f("number")


@dataclass(frozen=True, kw_only=True)
class AttributionEntry(_Part):
    """Why one rung moved against its parent (an entry of a summary's ``attribution``): its
    profiled trace against its parent's, µs per profiled step of the parent's work; the deltas by
    category, region and timeline part, the top movers, the ops or kernels that appeared or
    vanished, the noise of one profiled run, why it is only indicative, and its sentence. Entries
    from before ``regions_measure`` compared the regions' range wall time."""

    FILE: ClassVar[str] = "attribution entry"

    rung: str = _f("str")
    parent: str | None = _f("str?", default=None)
    switch: str | None = _f("str?", default=None)
    value: bool | int | str | None = _f("scalar?", default=None)
    lens: str | None = _f("str?", default=None)
    base_trace: str | None = _f("str?", default=None)
    new_trace: str | None = _f("str?", default=None)
    device: str = _f("str")  # gpu | cpu
    steps: JSONObject = _f("object", default={})
    work_ratio: float | None = _f("number?", default=None)
    speed: JSONObject | None = _f("object?", default=None)
    kernel_time_delta_us: float | None = _f("number?")  # None: an unfit entry (no figures)
    busy_time_delta_us: float | None = _f("number?")
    residual_us: float = _f("number", default=0.0)
    category_deltas_us: dict[str, float] = _f("object", default={})
    categories: list[DeltaRow] = _f("list", default=[], part=DeltaRow)  # the largest first
    moved: list[JSONObject] = _f("list", default=[])
    regions: list[DeltaRow] = _f("list", default=[], part=DeltaRow)
    regions_measure: str | None = _f("str?", default=None)
    regions_outside_us: float | None = _f("number?", default=None)
    appeared: list[str] = _f("list", default=[])
    n_appeared: int = _f("int", default=0)
    vanished: list[str] = _f("list", default=[])
    n_vanished: int = _f("int", default=0)
    timeline_us: dict[str, float] = _f("object", default={})
    noise: AttributionNoise | None = _f("object?", default=None, part=AttributionNoise, empty_is_none=True)
    indicative: str | None = _f("str?", default=None)
    notes: list[str] = _f("list", default=[])
    sentence: str | None = _f("str?", default=None, omit_none=True)
    # a side's trace failed the trace gate: its reason, and no figure was made (summary/trace_gate.py)
    unfit: str | None = _f("str?", default=None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class GateRow(_Part):
    """One trace's verdict in a summary's ``trace_gate`` (summary/trace_gate.py): the trace gate's,
    stored in its analysis.json, with the run's missing ranks added; ``fit`` None where the trace
    was analysed before the gate."""

    FILE: ClassVar[str] = "trace gate row"

    rung: str = _f("str")
    rung_id: str = _f("str")
    lens: str = _f("str")
    trace: str = _f("str")
    fit: bool | None = _f("bool?", default=None)
    reasons: list[str] = _f("list", default=[])


def attribution_entries(value: object, source: str = layout.SUMMARY_JSON) -> list[AttributionEntry]:
    """A summary's ``attribution`` as its class."""
    return _parts(AttributionEntry, value, f"{source}: attribution")


@dataclass(frozen=True, kw_only=True)
class ProfileWindow(_Part):
    """A summary's ``profile``: the rank-0 analysis of the first profiled run (its timeline in ms
    and %, top ops, categories, regions in ms and notes)."""

    FILE: ClassVar[str] = "profile"

    lens: str = _f("str")
    rung_id: str = _f("str")
    trace: str | None = _f("str?", default=None)
    device: str | None = _f("str?", default=None)
    timeline: dict[str, float] = _f("object", default={})
    timeline_percent: dict[str, float] = _f("object", default={})
    top_ops: list[JSONObject] = _f("list", default=[])
    categories: JSONValue = _f("any?", default=None)
    regions: dict[str, float] | None = _f("object?", default=None)
    notes: list[str] | None = _f("list?", default=None)


@dataclass(frozen=True, kw_only=True)
class CollectivesSummary(_Part):
    """A summary's ``collectives``: the first all-ranks run's per-collective rows (latency,
    bandwidth, skew, straggler) and the one whose straggler made the others wait longest."""

    FILE: ClassVar[str] = "collectives"

    rung_id: str = _f("str")
    device: str | None = _f("str?", default=None)
    world_size: int = _f("int")
    matched: JSONObject = _f("object", default={})
    by_collective: list[JSONObject] = _f("list", default=[])
    worst_straggler: JSONObject | None = _f("object?", default=None)


@dataclass(frozen=True, kw_only=True)
class SlurmNodes(_Part):
    """A Slurm ladder's ``nodes``: which rungs ran on which node list; more than one node list
    makes the node a possible confounder."""

    FILE: ClassVar[str] = "nodes"

    rungs_by_nodes: dict[str, list[str]] = _f("object", default={})
    confounder: bool = _f("bool", default=False)


# ---- a ladder's history as a summary carries it (stats/history.evaluate)


@dataclass(frozen=True, kw_only=True)
class HistoryPoint(_Part):
    """A change point of a rung's run-level step time: the first run after it (``index`` in the
    rung's series, ``run_id``), its size in % with its 95% interval and p value, the provenance
    changes near it, whether this run calls it (a new slower one) and, once triaged, the triage's
    label or state."""

    FILE: ClassVar[str] = "change point"

    index: int = _f("int")
    direction: str = _f("str")  # slower | faster
    delta_pct: float = _f("number")
    ci95_pct: list[float] = _f("list")
    p_value: float = _f("number")
    rung: str = _f("str")
    run_id: str = _f("str")
    provenance_changes: list[str] = _f("list", default=[])
    regression: bool = _f("bool", default=False)
    triage: str | None = _f("str?", default=None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class RungSeries(_Part):
    """One rung's series over the ladder's full runs: its runs, their step time and tokens/s/GPU
    (and the step CPU time on a ``metric: cpu`` ladder, the figure judged there), its change points."""

    FILE: ClassVar[str] = "rung history"

    rung: str = _f("str")
    run_ids: list[str] = _f("list", default=[])
    step_ms: list[RunEstimate | None] = _f("list", default=[])  # per run
    tokens_per_sec_per_gpu: list[RunEstimate | None] = _f("list", default=[])
    step_cpu_ms: list[RunEstimate | None] | None = _f("list?", default=None, omit_none=True)
    change_points: list[HistoryPoint] = _f("list", default=[])

    @classmethod
    def from_dict(cls, data: object, source: str | None = None) -> RungSeries:
        where = source or cls.FILE

        def series(values: list[RunEstimate | None], key: str) -> list[RunEstimate | None]:
            return [_estimate(v, f"{where}: {key}[{i}]") for i, v in enumerate(values)]

        doc = super().from_dict(data, where)
        return _replace(
            doc,
            step_ms=series(doc.step_ms, "step_ms"),
            tokens_per_sec_per_gpu=series(doc.tokens_per_sec_per_gpu, "tokens_per_sec_per_gpu"),
            step_cpu_ms=None if doc.step_cpu_ms is None else series(doc.step_cpu_ms, "step_cpu_ms"),
            change_points=_parts(HistoryPoint, doc.change_points, f"{where}: change_points"),
        )


@dataclass(frozen=True, kw_only=True)
class SuspectChange(_Part):
    """The new change point that made a suspect (stats/history.ChangePoint as stored): the first
    run after it (``index`` in the rung's series), its size in % with its 95% interval, p."""

    FILE: ClassVar[str] = "suspect change point"

    index: int = _f("int")
    direction: str = _f("str")  # slower | faster
    delta_pct: float = _f("number")
    ci95_pct: list[float] = _f("list")
    p_value: float = _f("number")


@dataclass(frozen=True, kw_only=True)
class SuspectBound(_Part):
    """The prediction bound a suspect's newest run lies beyond (stats/history.PredictionBound as
    stored): the segment's runs and df, the level, and its mean and bounds in the judged figure's
    unit (ms)."""

    FILE: ClassVar[str] = "suspect bound"

    runs: int = _f("int")
    df: int = _f("int")
    level: float = _f("number")
    mean: float = _f("number")
    low: float = _f("number")
    high: float = _f("number")


@dataclass(frozen=True, kw_only=True)
class HistorySuspect(_Part):
    """A rung to confirm side by side (issue 51): a new change point or a newest run beyond the
    prediction bound, with its last good run."""

    FILE: ClassVar[str] = "history suspect"

    rung: str = _f("str")
    run_id: str = _f("str")
    good_run_id: str = _f("str")
    reason: str = _f("str")  # change point | prediction bound
    direction: str = _f("str")
    good_index: int | None = _f("int?", default=None)  # the last good run in the rung's series
    delta_pct: float = _f("number")  # the newest run against the segment before it (log scale, in %)
    change_point: SuspectChange | None = _f("object?", default=None, part=SuspectChange)
    bound: SuspectBound | None = _f("object?", default=None, part=SuspectBound)


@dataclass(frozen=True, kw_only=True)
class SinceLast(_Part):
    """The newest run against the one before, figures only: per rung ``{"rung", "previous",
    "current", "delta_ms", "delta_pct"}`` (estimates as stored), and the provenance changes."""

    FILE: ClassVar[str] = "since_last"

    previous_run_id: str = _f("str")
    rungs: list[JSONObject] = _f("list", default=[])
    provenance_changes: list[str] = _f("list", default=[])


@dataclass(frozen=True, kw_only=True)
class LadderHistory(_Part):
    """A summary's ``history``: the ladder's full runs oldest first, the levels of the change-point
    test, each rung's series, this run's regression calls and suspects, and "since last week"."""

    FILE: ClassVar[str] = "history"

    runs: list[str] = _f("list", default=[])
    logical_dates: list[str | None] = _f("list", default=[])
    provenance_changes: list[list[str]] = _f("list", default=[])
    test: str = _f("str", default="t")
    metric: str = _f("str", default="step_ms")  # the judged figure
    alpha: float | None = _f("number?", default=None)
    alpha_recent: float | None = _f("number?", default=None)
    recent_runs: int | None = _f("int?", default=None)
    rungs: list[RungSeries] = _f("list", default=[], part=RungSeries)
    regressions: list[HistoryPoint] = _f("list", default=[], part=HistoryPoint)
    suspects: list[HistorySuspect] = _f("list", default=[], part=HistorySuspect)
    since_last: SinceLast | None = _f("object?", default=None, part=SinceLast)
