"""Why each rung moved: the rung's trace compared with its parent's, for every rung that has both.

The comparison reads the per-trace reports that the analysis tasks already stored beside each
trace (`<rung>/analysis/<stem>/*.csv` + analysis.json), never the traces: a summary stays cheap
however large the traces are. Each entry says which categories, ops (CPU proxy: ops and named
regions; GPU: kernels and categories) moved, which appeared or vanished, how compute, exposed
communication and idle time changed, and one sentence built only from those numbers. A profiled
repeat is one run: a CPU trace is taken at its rung's measured speed (`run_speed`), so the VM's
speed between two profiled runs is not read as the change, and the entry is marked indicative
when the rung's `vs_parent` verdict is `no_change`/`single_run`, when that speed is unknown, when
its op time moved against the verdict, when the change is inside what profiled runs of one rung
vary by here (`ProfileNoise`), or when its largest category delta is inside the width of the
step-time interval.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence, Mapping
from typing import TYPE_CHECKING, Any, Callable

from traceladder.core.documents import JSONObject, JSONValue, BatchArgs, PlanDoc, RungResult
from traceladder.core.summary_parts import AttributionEntry, AttributionNoise, SummaryRung, summary_rungs
from traceladder.stats.verdicts import STEP_METRICS, change_word
from traceladder.summary.trace_gate import unfit_reason, unfit_traces
from traceladder.core.layout import ATTRIBUTION_FOLDER, COMPARE_OBJECT, REGION_OP_TIME

if TYPE_CHECKING:  # pandas stays out of render/UI imports
    from traceladder.analysis.api import Comparison, Reports

# lenses whose traces have ops and categories, best first (the per-rank window of the method)
TRACE_LENSES = ("torch_rank0", "torch_all_ranks")
TOP = 5
# what each entry compares, after the section's title in summary.md, report.html and the Ladders page
ATTRIBUTION_SCOPE = (
    "profiled window vs parent, per step, a CPU trace at its rung's measured speed; "
    "a batch rung per its parent's tokens"
)
_RANK0 = re.compile(r"rank[\[_-]?0(?!\d)", re.IGNORECASE)  # the runner's rank0.pt.trace.json.gz, Primus's rank[0]


def fmt_us(us: float) -> str:
    """Signed time: ms with one decimal, or µs when under a millisecond."""
    if us == 0:
        return "±0"
    return f"{us / 1e3:+.1f} ms" if abs(us) >= 1e3 else f"{us:+.1f} µs"


def _rank0(keys: list[str]) -> str | None:
    for key in keys:
        if _RANK0.search(key.rsplit("/", 1)[-1]):
            return key
    return keys[0] if keys else None


def profiled_traces(
    results: Mapping[str, RungResult], purposes: dict[str, str]
) -> dict[str, dict[str, list[tuple[str, RungResult]]]]:
    """rung → lens → (rank-0 trace key, run result) of each of its profiled runs: every-rung
    profile runs first, then by repeat. The first is the one attributed; all measure the noise."""
    found: dict[str, dict[str, list[tuple[str, RungResult]]]] = {}
    ranked = sorted(results.values(), key=lambda r: (purposes.get(r.rung_id) != "profile", r.repeat))
    for r in ranked:
        if not r.ok or r.lens not in TRACE_LENSES:
            continue
        key = _rank0([str(k) for k in r.traces])
        if key:
            found.setdefault(r.rung, {}).setdefault(r.lens, []).append((key, r))
    return found


def _measured_step_ms(row: SummaryRung) -> float | None:
    mean = row.step_ms.mean if row.step_ms else None
    return mean if mean and mean > 0 else None


def run_speed(row: SummaryRung | None, run: RungResult) -> float | None:
    """How fast a profiled run went against its rung's measured runs: the rung's mean step time
    over the run's own step time in its profiled window, both wall clock as the trace's op and
    kernel times are (the window's profiler overhead is in it, alike for a rung and its parent
    under one lens). None where either is missing."""
    measured = _measured_step_ms(row) if row is not None else None
    own = run.step_ms
    return measured / own if measured and own and own > 0 else None


@dataclass(frozen=True)
class ProfileNoise:
    """How much a profiled run's op time per step varies between runs of one rung here, each
    taken as the attribution takes it (a CPU trace at its rung's measured speed, `run_speed`):
    the sd of its natural log, pooled over each (rung, lens) with more than one ok profiled run
    (the lens rung's runs under each trace lens, its every-rung run among them), each about its
    own mean. One profiled run per rung cannot tell a change from that noise; this says how large
    a change must be to stand out."""

    sd_log: float
    df: int
    runs: int
    rungs: tuple[str, ...]

    @classmethod
    def pooled(cls, per_rung: Mapping[str, list[float]]) -> ProfileNoise | None:
        """From each group's op µs per step (a group: one rung under one lens), one figure per
        profiled run; None below 1 df."""
        logs = {r: [math.log(x) for x in xs if x > 0] for r, xs in per_rung.items()}
        logs = {r: xs for r, xs in logs.items() if len(xs) >= 2}
        df = sum(len(xs) - 1 for xs in logs.values())
        if df < 1:
            return None
        ss = sum(sum((x - statistics.fmean(xs)) ** 2 for x in xs) for xs in logs.values())
        return cls(math.sqrt(ss / df), df, sum(map(len, logs.values())), tuple(sorted(logs)))

    @functools.cached_property
    def t(self) -> float:
        """t(0.975, df): one scipy call per pool, not one per entry and rendering."""
        from traceladder.stats.model import t_quantile

        return t_quantile(0.975, self.df)

    def half_width_us(self, base_us: float, new_us: float) -> float:
        """The 95% range of one run against one run, at their mean level:
        t(0.975, df) · √2 · sd · (base + new) / 2."""
        return self.t * math.sqrt(2) * self.sd_log * (base_us + new_us) / 2

    def to_json(self, half_width_us: float) -> JSONObject:
        return {
            "sd_pct": 100 * self.sd_log,
            "df": self.df,
            "t": self.t,
            "runs": self.runs,
            "rungs": [*self.rungs],
            "half_width_us": half_width_us,
        }


def noise_line(entries: Sequence[AttributionEntry | JSONObject]) -> str | None:
    """The noise statement under the section's title, from the first entry that carries it (one
    pool serves every entry of a summary). A template passes the stored JSON: read as the class."""
    typed = [e if isinstance(e, AttributionEntry) else AttributionEntry.from_dict(e) for e in entries]
    n = next((e.noise for e in typed if e.noise), None)
    if n is None:
        return None
    return (
        "One profiled run per rung. A CPU trace's op times are taken at its rung's measured speed (× the "
        "rung's mean step time / the window's step time). Between profiled runs of one rung, op time per step "
        f"varies by sd {n.sd_pct:.1f}% (of its natural log; pooled over {n.runs} runs of "
        f"{', '.join(n.rungs)}, {n.df} df). A change smaller than t(0.975, {n.df}) "
        f"({n.t:.2f}) × √2 × sd × the mean of the two sides' op time per step is marked indicative, "
        "as is, on a step-time verdict, one whose largest category delta is smaller than the width of its 95% "
        "interval."
    )


def _against(verdict: JSONValue, delta_us: float) -> bool:
    """The op time moved the other way from the verdict (faster: less op time per parent's work)."""
    return (verdict == "faster" and delta_us > 0) or (verdict == "slower" and delta_us < 0)


def _indicative(
    row: SummaryRung,
    largest_us: float,
    delta_us: float = 0.0,
    noise_us: float | None = None,
    uncorrected: str | None = None,
) -> str | None:
    """Why the attribution is only indicative, or None when the step-time change is resolved.
    `uncorrected` says why a CPU trace could not be taken at its rung's measured speed."""
    vs = row.vs_parent
    if vs is not None:
        verdict = vs.verdict
        if verdict == "no_change":
            return "no change detected in its measured runs"
        if verdict == "single_run":
            return "too few measured runs for a verdict"
        if uncorrected:
            return uncorrected
        if _against(verdict, delta_us):
            return f"its profiled op time moved the other way ({fmt_us(delta_us)}) from the {change_word(vs)} verdict"
        if noise_us is not None and abs(delta_us) < noise_us:
            return (
                f"the op-time change {fmt_us(delta_us)} is inside the ±{fmt_abs_us(noise_us)} "
                "that two profiled runs of one rung differ by here (95%)"
            )
        ci = vs.ci95
        if vs.metric in STEP_METRICS and ci is not None and len(ci) == 2 and ci[0] is not None and ci[1] is not None:
            width_ms = ci[1] - ci[0]
            if largest_us / 1e3 < width_ms:
                return (
                    f"largest category delta {largest_us / 1e3:.1f} ms is inside the {width_ms:.1f} ms width "
                    "of the step-time 95% interval"
                )
        return None
    # a summary from before vs_parent (schema 1): its row's tokens_gained or ms_removed
    change = row.extra.get("tokens_gained") if row.kind == "batch" else row.extra.get("ms_removed")
    if not change or not isinstance(change, dict):
        return "no step-time comparison with the parent"
    if change.get("single_run"):
        return "a single run per rung"
    if not change.get("significant"):
        return "the step-time change is within noise"
    return None


def fmt_abs_us(us: float) -> str:
    return f"{abs(us) / 1e3:.1f} ms" if abs(us) >= 1e3 else f"{abs(us):.1f} µs"


def short_name(name: str, width: int = 48) -> str:
    """A kernel or op name cut for prose: no `void `, no argument list, at most `width` chars."""
    name = name.removeprefix("void ")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the first "(" outside template brackets starts the arguments
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    name = name[:cut]
    return name if len(name) <= width else name[: width - 1] + "…"


def _names(names: list[str], n: int = 3) -> str:
    return ", ".join(short_name(x) for x in names[:n]) + (", ..." if len(names) > n else "")


def sentence(e: AttributionEntry) -> str:
    """One line in the write-up's style, from the entry's numbers only."""
    what = "kernel" if e.device == "gpu" else "op"
    d = e.kernel_time_delta_us or 0.0  # set on every entry but an unfit one, which has its own sentence
    verb = "removed" if d < 0 else "added"
    work = e.work_ratio or 1.0
    if work != 1.0:  # a batch rung: the time for the parent's tokens per step, so fixed costs show
        parts = [
            f"{e.rung} runs {work:.2f}x {e.parent}'s tokens per step; for {e.parent}'s tokens it "
            f"{verb} {fmt_abs_us(d)} of {what} time"
        ]
    else:
        parts = [f"{e.rung} {verb} {fmt_abs_us(d)} of {what} time per step against {e.parent}"]
    cats = [c for c in e.categories if c.delta_us != 0][:3]
    if cats:
        parts[0] += ": " + ", ".join(f"{c.name} {fmt_us(c.delta_us)}" for c in cats)
    regions = [r for r in e.regions if r.delta_us != 0][:3]
    if regions:
        # entries from before `regions_measure` compared the regions' range wall time
        by = "by region" if e.regions_measure == REGION_OP_TIME else "by region's range wall time"
        outside = e.regions_outside_us
        parts.append(
            f"{by} "
            + ", ".join(f"{r.name} {fmt_us(r.delta_us)}" for r in regions)
            # the op time in no region, where it is as large as the regions named
            + (
                f" ({fmt_us(outside)} outside the named regions)"
                if outside and abs(outside) >= min(abs(r.delta_us) for r in regions)
                else ""
            )
        )
    unit = "kernels" if e.device == "gpu" else "ops"
    if e.vanished or e.appeared:
        bits = []
        if e.vanished:
            bits.append(f"{e.n_vanished} {unit} vanished ({_names([str(x) for x in e.vanished])})")
        if e.appeared:
            bits.append(f"{e.n_appeared} appeared ({_names([str(x) for x in e.appeared])})")
        parts.append(" and ".join(bits))
    t = e.timeline_us
    parts.append(
        f"compute {fmt_us(t['computation_time'])}, exposed communication {fmt_us(t['exposed_comm_time'])}, "
        f"idle {fmt_us(t['idle_time'])}"
    )
    text = "; ".join(parts) + "."
    if e.indicative:
        text += f" Indicative: {e.indicative}."
    return text


def step_tokens(specs: list[JSONObject]) -> dict[str, float]:
    """rung → the work one step holds, as its plan sets it: `global_batch_size` × `seq_length`
    from its model args (× 1 where no spec of the ladder sets a sequence length). Only batch
    rungs and their parents need it; a rung whose spec sets no global batch is left out."""
    out: dict[str, float] = {}
    for spec in specs:
        found = spec.get("model_args")
        if str(spec["rung"]) in out or not isinstance(found, dict):
            continue
        args = BatchArgs.from_dict(found, f"{spec.get('rung_id')}: model_args")
        batch, seq = args.global_batch_size, args.seq_length
        if batch and batch > 0 and seq and seq > 0:
            out[str(spec["rung"])] = batch * seq
    return out


def _run_tokens(r: RungResult) -> float | None:
    """One run's measured tokens per step per GPU. Its tokens per CPU-second times its step CPU
    time is exact (the runner derives one from the other); tokens/s/GPU times the median step
    time is a product of two medians, within a few % on a noisy run."""
    for rate, step in ((r.tokens_per_cpu_s_per_gpu, r.step_cpu_ms), (r.tokens_per_sec_per_gpu, r.step_ms)):
        if rate and step:
            return rate * step / 1e3
    return None


def measured_tokens(results: Mapping[str, RungResult], rung: str) -> float | None:
    """A rung's measured tokens per step per GPU: the median over its ok runs."""
    per_run = [t for r in results.values() if r.rung == rung and r.ok if (t := _run_tokens(r))]
    return statistics.median(per_run) if per_run else None


def work_ratio(row: SummaryRung, results: Mapping[str, RungResult], planned: Mapping[str, float]) -> float | None:
    """How many of its parent's steps of tokens a batch rung's step holds: from the plan's
    `planned` step tokens, else from the runs' figures; 1 for other rungs; None for a batch rung
    where neither says."""
    if row.kind != "batch":
        return 1.0
    rung, parent = row.rung, str(row.parent)
    new, base = planned.get(rung), planned.get(parent)
    if not (new and base):
        new, base = measured_tokens(results, rung), measured_tokens(results, parent)
    return new / base if new and base else None


NO_WORK_RATIO = (
    "neither the plan nor the runs give the batch rung's and its parent's tokens per step, so it is "
    "compared per step, not for the same tokens"
)


def entry(
    row: SummaryRung,
    lens: str,
    base_key: str,
    new_key: str,
    c: Comparison,
    work_known: bool = True,
    noise: JSONObject | None = None,
    uncorrected: str | None = None,
) -> JSONObject:
    """`noise` (ProfileNoise.to_json) marks a change inside what two profiled runs differ by;
    `uncorrected` (why the speeds are unknown) marks the entry indicative."""
    doc = c.doc
    cats = sorted(doc.categories.items(), key=lambda kv: -abs(kv[1]))
    gpu = "gpu" in (doc.device["base"], doc.device["new"])
    kernels = c.kernels if gpu else None  # GPU traces: kernels; the CPU proxy: ops
    movers = doc.top_kernels if kernels is not None else doc.top_ops
    ops_side = kernels if kernels is not None else c.ops
    key = "Kernel name" if "Kernel name" in ops_side.columns else "name"
    appeared = [
        str(x)
        for x in ops_side.loc[ops_side["status"] == "appeared"].sort_values("new::per_step_us", ascending=False)[key]
    ]
    vanished = [
        str(x)
        for x in ops_side.loc[ops_side["status"] == "vanished"].sort_values("base::per_step_us", ascending=False)[key]
    ]
    largest = max((abs(v) for _, v in cats), default=0.0)
    delta = float(doc.total_kernel_time_delta_us)
    by_region = [] if gpu else sorted(doc.regions.items(), key=lambda kv: -abs(kv[1]))
    regions: list[JSONValue] = [{"name": k, "delta_us": v} for k, v in by_region[:TOP]]
    e: JSONObject = {
        "rung": row.rung,
        "parent": row.parent,
        "switch": row.switch,
        "value": row.value,
        "lens": lens,
        "base_trace": base_key,
        "new_trace": new_key,
        "device": "gpu" if gpu else "cpu",
        "steps": dict(doc.steps),
        "work_ratio": doc.work_ratio,
        "speed": dict(doc.speed),
        "kernel_time_delta_us": doc.total_kernel_time_delta_us,
        "busy_time_delta_us": doc.busy_time_delta_us,
        "residual_us": doc.residual_us,
        "category_deltas_us": dict(doc.categories),
        "categories": [{"name": k, "delta_us": v} for k, v in cats[:TOP]],
        "moved": [{k: m[k] for k in ("name", "delta_us", "status")} for m in movers[:TOP]],
        "regions": regions,
        "regions_measure": doc.regions_measure,
        "regions_outside_us": None if gpu else doc.regions_outside_us,
        "appeared": [*appeared[:TOP]],
        "n_appeared": len(appeared),
        "vanished": [*vanished[:TOP]],
        "n_vanished": len(vanished),
        "timeline_us": {k: doc.timeline.get(k, 0.0) for k in ("computation_time", "exposed_comm_time", "idle_time")},
        "noise": noise,
        "indicative": _indicative(
            row, largest, delta, AttributionNoise.from_dict(noise).half_width_us if noise else None, uncorrected
        )
        if work_known
        else NO_WORK_RATIO,
        "notes": [*doc.notes],
    }
    e["sentence"] = sentence(AttributionEntry.from_dict(e))
    return e


def gate_unfit(unfit: Mapping[str, str], *sides: tuple[str, str, Reports]) -> str | None:
    """ "<rung>'s trace: <reason>" for each side whose trace the gate judged unfit (the summary's
    row, else its analysis's own verdict); None when both are fit."""
    found = [
        f"{rung}'s trace: {why}" for rung, key, r in sides if (why := unfit.get(key) or unfit_reason(r.analysis.gate))
    ]
    return "; ".join(found) or None


def unfit_entry(row: SummaryRung, lens: str, base_key: str, new_key: str, why: str) -> JSONObject:
    """An entry with no figures: a side's trace failed the gate, so nothing built on it is said."""
    e = AttributionEntry(
        rung=row.rung,
        parent=row.parent,
        switch=row.switch,
        value=row.value,
        lens=lens,
        base_trace=base_key,
        new_trace=new_key,
        device="unknown",
        kernel_time_delta_us=None,
        busy_time_delta_us=None,
        unfit=why,
        sentence=f"trace unfit: {why}.",
    )
    return e.to_dict()


def attribute(
    summary: Mapping[str, JSONValue],
    results: Mapping[str, RungResult],
    purposes: dict[str, str],
    load: Callable[[str], Reports | None],
    keep: Callable[[str, Comparison], str | None] | None = None,
    specs: list[JSONObject] | None = None,
) -> list[JSONObject]:
    """One entry per rung whose trace and parent's trace (same lens) both have reports.
    `load(trace key)` gives a trace's stored reports (None: not analysed); `keep(rung, c)` may
    store the comparison's files and return where; `specs` (the plan's) give a batch rung's
    tokens per step."""
    from traceladder.analysis.api import CompareError, compare_reports

    traces = profiled_traces(results, purposes)
    planned = step_tokens(specs or [])
    cache: dict[str, Reports | None] = {}

    def reports(key: str) -> Reports | None:
        if key not in cache:
            cache[key] = load(key)
        return cache[key]

    rows = {r.rung: r for r in summary_rungs(summary["rungs"])}
    unfit = unfit_traces(summary)  # the summary's trace gate (ranks included)

    def speed_of(rung: str, key: str, run: RungResult) -> float | None:
        """The factor a run's trace is taken at: its speed for a CPU trace (None when unknown);
        1 for a GPU trace, whose kernel times run on the device's clock, not the step's."""
        r = reports(key)
        if r is None:
            return None
        return run_speed(rows.get(rung), run) if r.analysis.device == "cpu" else 1.0

    def at_speed(rung: str, key: str, run: RungResult) -> float | None:
        """A profiled run's op µs per step, taken as the attribution takes it."""
        r, speed = reports(key), speed_of(rung, key, run)
        return r.op_us() / r.steps * speed if r is not None and speed else None

    pooled = ProfileNoise.pooled(
        {
            f"{rung} ({lens})": [x for k, run in runs if (x := at_speed(rung, k, run))]
            for rung, by_lens in traces.items()
            for lens, runs in by_lens.items()
            if len(runs) > 1
        }
    )
    out = []
    for row in rows.values():
        if not row.parent or row.rung not in traces or row.parent not in traces:
            continue
        rung, parent = row.rung, row.parent
        lens = next(
            (lens_name for lens_name in TRACE_LENSES if lens_name in traces[rung] and lens_name in traces[parent]),
            None,
        )
        if lens is None:
            continue
        (base_key, base_run), (new_key, new_run) = traces[parent][lens][0], traces[rung][lens][0]
        base, new = reports(base_key), reports(new_key)
        if base is None or new is None:
            continue
        if why := gate_unfit(unfit, (parent, base_key, base), (rung, new_key, new)):
            out.append(unfit_entry(row, lens, base_key, new_key, why))
            continue
        ratio = work_ratio(row, results, planned)
        base_speed, new_speed = speed_of(parent, base_key, base_run), speed_of(rung, new_key, new_run)
        uncorrected = None
        if base_speed is None or new_speed is None:
            missing = " and ".join(r for r, sp in ((parent, base_speed), (rung, new_speed)) if sp is None)
            uncorrected = (
                f"no measured or profiled step time for {missing}, so its trace is not taken at its rung's "
                "measured speed and the VM's speed between the two profiled runs is in the change"
            )
        speed = (base_speed or 1.0, new_speed or 1.0)
        try:
            c = compare_reports(base, new, ratio or 1.0, speed)
        except CompareError:
            continue
        if uncorrected:
            c.doc.notes.append(f"not speed-corrected: {uncorrected}")
        noise = None
        if pooled is not None and not uncorrected:  # at the two sides' levels, the new one per the parent's work
            level_base = base.op_us() / base.steps * speed[0]
            level_new = new.op_us() / (new.steps * (ratio or 1.0)) * speed[1]
            noise = pooled.to_json(pooled.half_width_us(level_base, level_new))
        e = entry(row, lens, base_key, new_key, c, ratio is not None, noise, uncorrected)
        if keep:
            e["compare"] = keep(rung, c)
        out.append(e)
    return out


def attribute_stored(
    store: Any,
    summary_prefix: str,
    plan: Mapping[str, JSONValue],
    summary: Mapping[str, JSONValue],
    results: Mapping[str, RungResult],
) -> list[JSONObject]:
    """`attribute` over the artifact store: reports read from each trace's analysis folder (by the
    summary's reading step, `collect.read_reports`, as the comparisons ask for them), each
    comparison's CSVs and compare.json kept under `<summary>/attribution/<rung>/`."""
    from traceladder.analysis.api import write_comparison
    from traceladder.summary.collect import read_reports

    specs = PlanDoc.from_dict(plan).specs
    purposes = {str(s["rung_id"]): str(s.get("purpose") or "") for s in specs}

    def load(trace_key: str) -> Reports | None:
        return read_reports(store, trace_key)

    # Each comparison's files are stored here, as it is made, not by the publish step: a
    # comparison holds both traces' report tables (pandas), so keeping every rung's until the
    # summary is rendered would hold them all in memory; the entry names its compare.json.
    def keep(rung: str, c: Comparison) -> str:
        folder = f"{summary_prefix}/{ATTRIBUTION_FOLDER}/{rung}"
        with tempfile.TemporaryDirectory(prefix="traceladder-compare-") as tmp:
            for path in write_comparison(c, Path(tmp)):
                store.put_file(f"{folder}/{path.name}", path)
        return f"{folder}/{COMPARE_OBJECT}"

    return attribute(summary, results, purposes, load, keep, specs)


def markdown(entries: list[AttributionEntry]) -> list[str]:
    """The summary.md section (what `make demo` prints per rung)."""
    if not entries:
        return []
    lines = ["", f"## Why each rung moved ({ATTRIBUTION_SCOPE})"]
    if line := noise_line(entries):
        lines.append(line)
    for e in entries:
        lines.append(f"- **{e.rung}** vs {e.parent} ({e.lens}): {e.sentence}")
    return lines
