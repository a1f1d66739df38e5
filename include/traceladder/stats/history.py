"""Change points over a ladder's history: which run a rung's step time changed at, by how much,
and whether this evaluation is the first to call it.

The series of one rung is its run-level step time, one point per published full run, in
logical-date order. The detector works on log step time (a shift is a ratio, whatever the
rung's size):

1. Candidates: the optimal l2 (mean-shift) segmentation, ``ruptures.KernelCPD`` with a linear
   kernel (Pelt), on the series scaled by a robust noise estimate (the median absolute successive
   difference), with a low penalty, so it proposes more candidates than it keeps. Segments hold
   at least ``MIN_SIZE`` (3) runs.
2. Significance, per candidate, as Apache Otava does on top of E-divisive: the candidate's left
   and right segments are compared; the least significant candidate is dropped and the rest
   re-tested, until every kept one has p < ``ALPHA`` (``ALPHA_RECENT`` when its newer segment is
   the newest ``RECENT_RUNS`` runs). A segment of at most ``TRIM_UPTO`` runs must also show the
   change without its most extreme run (``_consistent``: the same t-test less that run, at
   ``ALPHA_TRIM``), so one outlying run beside ordinary ones makes no change. Two forms:
   - ``t``: Student's t on the difference of segment means, with the residual variance pooled over
     every segment of the series (one noise level per rung history), floored by half the mean
     squared successive difference within segments (von Neumann), which overfitting cannot shrink;
   - ``permutation``: residual permutation (Freedman-Lane): the series fitted without the
     candidate, its residuals shuffled over all runs by a seeded generator, the statistic the same
     t; deterministic for a seed, but its p cannot go below about 1/C(n, k) on short series.
3. The newest ``TAIL_RUNS`` (2) runs, too few for a segment, may still be one (``_tail``): when
   each of them lies beyond the two-sided 1 − ``ALPHA_TAIL`` prediction bound of the ≥
   ``TAIL_BEFORE`` runs of the segment before them (noise from the runs before them only), a
   change is seen one run after it happened. A single run is never a change: at that point a
   step cannot be told from one outlying run (docs/statistics-history.md).
4. Size: the difference of segment means on the log scale with its Student-t 95% interval, as
   percent of the left segment.

A regression is a ``slower`` change point that is significant in this evaluation and had no
``slower`` change point within ``MATCH_RUNS`` runs of it in the previous evaluation (the same
series without its newest run), wherever in the series it lies: a small persistent shift
becomes significant weeks after it happened and is called then, once.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from collections.abc import Mapping
from typing import Sequence

import numpy as np

from traceladder.core.documents import IndexEntry, JSONObject, JSONValue, as_object
from traceladder.core.summary_parts import (
    HistoryPoint,
    HistorySuspect,
    LadderHistory,
    RungSeries,
    SinceLast,
    SuspectBound,
    SuspectChange,
    RunEstimate,
    RunPoints,
    RungPoint,
    model_fit,
    summary_rungs,
)
from traceladder.stats.verdicts import METRIC_WORDS, STEP, VERDICT_METRICS, plan_metric

# Levels chosen with the replay benches (benchmarks/bench_changes_vs_otava.py, bench_history.py)
ALPHA = 0.0002  # per candidate, anywhere in the history
ALPHA_RECENT, RECENT_RUNS = 0.002, 3  # a change whose newer segment is the newest RECENT_RUNS runs
MIN_SIZE = 3  # runs per segment found by the segmentation
PENALTY = 3.0  # Pelt penalty per change, × log n, in robust noise variances: low on purpose
TRIM_UPTO, ALPHA_TRIM = 4, 0.01  # a segment this short must also pass without its most extreme run
# the newest TAIL_RUNS runs may be a segment of their own, against >= TAIL_BEFORE runs before them
TAIL_RUNS, ALPHA_TAIL, TAIL_BEFORE = 2, 0.02, 8
MATCH_RUNS = 2  # a change point that moved by this many runs is the same change
PERMUTATIONS = 9999  # p >= 1/10000: below ALPHA, so a long history can reach it
TESTS = ("t", "permutation")
DEFAULT_TEST = "t"
# image_id/image_digest come from the Docker daemon (a re-pushed tag changes them), the rest from
# the tools in the container (runner/provenance.py)
PROVENANCE_FIELDS = (
    "image",
    "image_digest",
    "image_id",
    "build",
    "rocm_version",
    "gpu",
    "primus_commit",
    "config_hash",
    "tools",
    "traceladder_version",
    "model_tag",
)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point after the change
    direction: str  # "slower" | "faster" (step time up | down)
    delta_pct: float
    ci95_pct: tuple[float, float]
    p_value: float

    def as_dict(self) -> JSONObject:
        d: JSONObject = asdict(self)
        d["ci95_pct"] = list(self.ci95_pct)
        return d


def _robust_sigma(z: np.ndarray) -> float:
    """Noise level that a step in the mean barely moves: median |successive difference| / (0.6745·√2)."""
    if len(z) < 2:
        return 0.0
    return float(np.median(np.abs(np.diff(z)))) / (0.6745 * math.sqrt(2.0))


def _candidates(z: np.ndarray, min_size: int) -> list[int]:
    import ruptures

    sigma = _robust_sigma(z)
    if sigma <= 0.0:
        # Exact repeats (a test series, a cached value): only an exact step is a candidate.
        return [i for i in range(min_size, len(z) - min_size + 1) if z[i] != z[i - 1]]
    scaled = (z - z.mean()) / sigma
    # KernelCPD with a linear kernel is the l2 (mean-shift) cost, solved exactly by Pelt in C.
    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size).fit(scaled)
    return [int(b) for b in algo.predict(pen=PENALTY * math.log(len(z)))[:-1]]


def _segments(n: int, cps: list[int]) -> list[tuple[int, int]]:
    edges = [0, *cps, n]
    return list(zip(edges[:-1], edges[1:]))


def _pooled_var(z: np.ndarray, cps: list[int]) -> tuple[float, int]:
    """Residual variance over every segment, floored by half the mean squared successive difference
    within segments: many short segments fitted to noise would otherwise shrink it and make every
    candidate look significant."""
    segs = _segments(len(z), cps)
    ss = sum(float(((z[a:b] - z[a:b].mean()) ** 2).sum()) for a, b in segs)
    df = len(z) - len(segs)
    diffs = np.concatenate([np.diff(z[a:b]) for a, b in segs])
    mssd = float(np.mean(diffs**2)) / 2 if len(diffs) else 0.0  # von Neumann, within segments
    return max(ss / df if df > 0 else 0.0, mssd), df


def _consistent(z: np.ndarray, left: tuple[int, int], right: tuple[int, int], var: float, df: int) -> bool:
    """A short segment (2..TRIM_UPTO runs) must show the change without its most extreme run as
    well: the t-test of the segments less that run (``_trimmed``) at ALPHA_TRIM. One outlying run
    beside ordinary ones then makes no change; a real step moves every run."""
    if min(left[1] - left[0], right[1] - right[0]) > TRIM_UPTO or df <= 0:
        return True
    from scipy.special import stdtr

    lz, rz = _trimmed(z, left, right)
    sign = 1.0 if z[right[0] : right[1]].mean() > z[left[0] : left[1]].mean() else -1.0
    diff = sign * (rz.mean() - lz.mean())
    se = math.sqrt(var * (1 / len(lz) + 1 / len(rz)))
    if se == 0.0:
        return diff > 0
    return diff > 0 and float(2 * stdtr(df, -diff / se)) < ALPHA_TRIM


def _trimmed(z: np.ndarray, left: tuple[int, int], right: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The two segments, each of 2..TRIM_UPTO runs without its run that most favours the change
    (the highest of a newer segment that is slower, the lowest of the older one): a change
    must show without its most extreme run, so one outlying run cannot make it."""
    lz, rz = z[left[0] : left[1]], z[right[0] : right[1]]
    sign = 1.0 if rz.mean() > lz.mean() else -1.0
    if 2 <= len(rz) <= TRIM_UPTO:
        rz = np.delete(rz, int(np.argmax(sign * rz)))
    if 2 <= len(lz) <= TRIM_UPTO:
        lz = np.delete(lz, int(np.argmin(sign * lz)))
    return lz, rz


def _t_p(z: np.ndarray, left: tuple[int, int], right: tuple[int, int], var: float, df: int) -> float:
    from scipy.special import stdtr  # the t CDF as a plain ufunc: stats.t.sf is 100x slower here

    diff = z[right[0] : right[1]].mean() - z[left[0] : left[1]].mean()
    if df <= 0:
        return 1.0
    se = math.sqrt(var * (1 / (left[1] - left[0]) + 1 / (right[1] - right[0])))
    if se == 0.0:
        return 0.0 if diff != 0 else 1.0
    return float(2 * stdtr(df, -abs(diff) / se))


def _t_stats(rows: np.ndarray, cps: list[int], i: int) -> np.ndarray:
    """Pooled-variance t statistic of change point `i` for each row of `rows` (batched)."""
    segs = _segments(rows.shape[1], cps)
    ss = np.zeros(rows.shape[0])
    means = []
    for a, b in segs:
        m = rows[:, a:b].mean(axis=1)
        means.append(m)
        ss += ((rows[:, a:b] - m[:, None]) ** 2).sum(axis=1)
    df = rows.shape[1] - len(segs)
    (la, lb), (ra, rb) = segs[i], segs[i + 1]
    se = np.sqrt(ss / max(df, 1) * (1 / (lb - la) + 1 / (rb - ra)))
    diff = np.abs(means[i + 1] - means[i])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 0, diff / se, np.where(diff > 0, np.inf, 0.0))


def _perm_p(z: np.ndarray, cps: list[int], i: int, rng: np.random.Generator, permutations: int) -> float:
    """Residual permutation (Freedman-Lane): fit the series without change point `i`, shuffle its
    residuals over the whole series, and see how often the t statistic at `i` is as large. Using
    every run (not just the two segments) lets a short newest segment reach small p-values."""
    null_cps = cps[:i] + cps[i + 1 :]
    fitted = np.empty_like(z)
    for a, b in _segments(len(z), null_cps):
        fitted[a:b] = z[a:b].mean()
    resid = z - fitted
    observed = _t_stats(z[None, :], cps, i)[0]
    if observed == 0.0:
        return 1.0
    shuffled = fitted + rng.permuted(np.broadcast_to(resid, (permutations, len(z))), axis=1)
    stats_ = _t_stats(shuffled, cps, i)
    return float((1 + np.count_nonzero(stats_ >= observed * (1 - 1e-12))) / (permutations + 1))


def detect(
    values: Sequence[float],
    alpha: float = ALPHA,
    alpha_recent: float = ALPHA_RECENT,
    test: str = DEFAULT_TEST,
    seed: int = 0,
    min_size: int = MIN_SIZE,
    permutations: int = PERMUTATIONS,
    alpha_tail: float = ALPHA_TAIL,
) -> list[ChangePoint]:
    """Significant change points of a series of positive run-level step times, oldest first."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, not {test!r}")
    z = np.log(np.asarray(values, dtype=float))
    if len(z) < 2 * min_size or not np.all(np.isfinite(z)):
        return []
    cps = _candidates(z, min_size)
    rng = np.random.default_rng(seed)
    pvals: list[float] = []
    while cps:
        var, df = _pooled_var(z, cps)
        segs = _segments(len(z), cps)
        pvals = [
            (_t_p(z, segs[i], segs[i + 1], var, df) if test == "t" else _perm_p(z, cps, i, rng, permutations))
            if _consistent(z, segs[i], segs[i + 1], var, df)
            else 1.0
            for i in range(len(cps))
        ]
        # The newest few runs are tested at ALPHA_RECENT: that is where a fresh change must be
        # seen within a few runs; everywhere else evidence accumulates and a stricter level keeps
        # old noise from being called week after week.
        limits = [
            alpha_recent if segs[i + 1][1] == len(z) and segs[i + 1][1] - segs[i + 1][0] <= RECENT_RUNS else alpha
            for i in range(len(cps))
        ]
        ratios = [p / a for p, a in zip(pvals, limits)]
        worst = int(np.argmax(ratios))
        if ratios[worst] < 1.0:
            break
        del cps[worst]
    pvals = pvals if cps else []
    tail = _tail(z, cps, min_size, alpha_tail)
    if tail is not None:
        cps, pvals = [*cps, tail[0]], [*pvals, tail[1]]
    if not cps:
        return []
    var, df = _pooled_var(z, cps)
    segs = _segments(len(z), cps)
    return [_describe(z, segs[i], segs[i + 1], cps[i], pvals[i], var, df) for i in range(len(cps))]


def _tail(z: np.ndarray, cps: list[int], min_size: int, alpha_tail: float) -> tuple[int, float] | None:
    """A change in the newest TAIL_RUNS runs alone, seen a run earlier than a full segment allows:
    each of them must lie beyond the two-sided (1 - alpha_tail) prediction bound of the segment
    before them (at least TAIL_BEFORE runs), the noise estimated from the runs before them only.
    The p-value is that of the least extreme of them: one outlying run next to an ordinary one
    is no change. (index, p) of the change, or None."""
    from scipy.special import stdtr

    at = len(z) - TAIL_RUNS
    last = cps[-1] if cps else 0
    if at - last < max(min_size, TAIL_BEFORE):
        return None
    var, df = _pooled_var(z[:at], cps)
    left, tail = z[last:at], z[at:]
    sign = 1.0 if tail.mean() > left.mean() else -1.0
    least = float(np.min(sign * (tail - left.mean())))
    if df <= 0 or least <= 0.0:
        return None
    se = math.sqrt(var * (1 + 1 / len(left)))
    p = 0.0 if se == 0.0 else float(2 * stdtr(df, -least / se))
    return (at, p) if p < alpha_tail else None


def _describe(
    z: np.ndarray, left: tuple[int, int], right: tuple[int, int], index: int, p: float, var: float, df: int
) -> ChangePoint:
    from scipy.special import stdtrit

    diff = float(z[right[0] : right[1]].mean() - z[left[0] : left[1]].mean())
    half = (
        float(stdtrit(df, 0.975)) * math.sqrt(var * (1 / (left[1] - left[0]) + 1 / (right[1] - right[0])))
        if df > 0
        else 0.0
    )

    def pct(x: float) -> float:
        return 100.0 * math.expm1(x)

    return ChangePoint(index, "slower" if diff > 0 else "faster", pct(diff), (pct(diff - half), pct(diff + half)), p)


def new_regressions(now: list[ChangePoint], previous: list[ChangePoint]) -> list[ChangePoint]:
    """Slower change points of this evaluation that the previous one did not have (near by)."""
    return new_changes(now, previous, "slower")


def new_changes(now: list[ChangePoint], previous: list[ChangePoint], direction: str) -> list[ChangePoint]:
    """Change points of `direction` in this evaluation that the previous one did not have (near by):
    the regression call for "slower", its faster counterpart for "faster"."""
    before = [c.index for c in previous if c.direction == direction]
    return [c for c in now if c.direction == direction and not any(abs(c.index - i) <= MATCH_RUNS for i in before)]


# ---------------------------------------------------------------------------------------
# Suspects (issue 51): rungs worth re-measuring side by side. A suspect costs machine time, not a
# false alarm: only a confirmed triage is reported as a regression (docs/statistics-history.md,
# "Suspects").

# the two-sided level of the newest run's prediction bound against the segment before it
SUSPECT_LEVEL = 0.99
SUSPECT_MIN_RUNS = MIN_SIZE  # runs the segment before the newest needs for a bound


@dataclass(frozen=True)
class PredictionBound:
    """The two-sided SUSPECT_LEVEL prediction interval of one new run from a segment of m runs on
    the log scale: mean ± t(1 − (1 − level)/2, m − 1) · s · √(1 + 1/m)."""

    mean: float  # log
    sd: float
    runs: int
    low: float  # log
    high: float  # log

    @property
    def df(self) -> int:
        return self.runs - 1

    def as_dict(self) -> JSONObject:
        return {
            "runs": self.runs,
            "df": self.df,
            "level": SUSPECT_LEVEL,
            "mean": math.exp(self.mean),
            "low": math.exp(self.low),
            "high": math.exp(self.high),
        }


def prediction_bound(segment: Sequence[float], level: float = SUSPECT_LEVEL) -> PredictionBound | None:
    """The prediction bound of a segment of positive run figures (None under SUSPECT_MIN_RUNS
    runs, where the sd has too few df to bound anything)."""
    from scipy.special import stdtrit

    z = np.log(np.asarray(segment, dtype=float))
    m = len(z)
    if m < SUSPECT_MIN_RUNS or not np.all(np.isfinite(z)):
        return None
    mean, sd = float(z.mean()), float(z.std(ddof=1))
    half = float(stdtrit(m - 1, 0.5 + level / 2)) * sd * math.sqrt(1 + 1 / m)
    return PredictionBound(mean, sd, m, mean - half, mean + half)


@dataclass(frozen=True)
class Suspect:
    """Why the newest run of a rung is a suspect. `good_index`: its last good run, the newest run of
    the segment before; `delta_pct`: the newest run against that segment's mean (log scale, in %)."""

    reason: str  # "change point" | "prediction bound"
    direction: str  # "slower" | "faster" (the judged figure up | down)
    good_index: int
    delta_pct: float
    change_point: ChangePoint | None
    bound: PredictionBound | None

    def as_dict(self) -> JSONObject:
        return {
            "reason": self.reason,
            "direction": self.direction,
            "good_index": self.good_index,
            "delta_pct": self.delta_pct,
            "change_point": self.change_point.as_dict() if self.change_point else None,
            "bound": self.bound.as_dict() if self.bound else None,
        }


def suspect(
    values: Sequence[float],
    now: list[ChangePoint] | None = None,
    previous: list[ChangePoint] | None = None,
    test: str = DEFAULT_TEST,
    seed: int = 0,
    level: float = SUSPECT_LEVEL,
) -> Suspect | None:
    """Is the newest run of this series (positive run figures, oldest first) a suspect?

    1. this evaluation newly calls a change point, slower or faster (`new_changes` against the
       evaluation without the newest run): the last good run is the one before the change;
    2. else the newest run lies outside the prediction bound of the segment before it: the runs
       since the previous evaluation's last change point, less the newest.
    `now`/`previous`: `detect` of the series and of the series less its newest run, when the
    caller has them."""
    if len(values) < 2:
        return None
    now = detect(values, test=test, seed=seed) if now is None else now
    previous = detect(values[:-1], test=test, seed=seed) if previous is None else previous
    fresh = [c for d in ("slower", "faster") for c in new_changes(now, previous, d)]
    if fresh:
        c = max(fresh, key=lambda c: c.index)
        return Suspect("change point", c.direction, c.index - 1, c.delta_pct, c, None)
    start = previous[-1].index if previous else 0
    bound = prediction_bound(values[start:-1], level)
    if bound is None:
        return None
    y = math.log(values[-1])
    if bound.low <= y <= bound.high:
        return None
    direction = "slower" if y > bound.high else "faster"
    return Suspect("prediction bound", direction, len(values) - 2, 100 * math.expm1(y - bound.mean), None, bound)


# ---------------------------------------------------------------------------------------
# A ladder's history: the series per rung, from published run entries (oldest first)


@dataclass
class RungHistory:
    rung: str
    run_ids: list[str] = field(default_factory=list)
    step_ms: list[RunEstimate | None] = field(default_factory=list)  # per run
    tokens_per_sec_per_gpu: list[RunEstimate | None] = field(default_factory=list)
    # the figure the change points run on: step_ms, or step_cpu_ms on a `metric: cpu` ladder
    judged: list[RunEstimate] = field(default_factory=list)


def _points(entry: IndexEntry) -> RunPoints:
    """An index entry's points (`run_points`); every entry a history reads carries them."""
    if entry.points is None:
        raise ValueError(f"index entry {entry.run_id} has no points")
    return entry.points


def run_points(summary: Mapping[str, JSONValue]) -> RunPoints:
    """What one run contributes to the history (stored in its index entry, so a history needs
    no summary reads): each rung's run-level step time and tokens/s/GPU, and its provenance."""
    provenance = as_object(summary.get("provenance") or {})
    metric = plan_metric(summary)
    fit = model_fit(summary.get("model"), VERDICT_METRICS[metric][0])
    return RunPoints(
        metric=metric,
        # how a run's figure is made from its iterations (stats.model.RUN_STATISTICS): a change
        # is a change of method, marked beside the provenance's. Summaries from before the field
        # record none: unknown, not assumed.
        run_statistic=fit.run_statistic if fit else None,
        rungs={
            r.rung: RungPoint(
                step_ms=r.step_ms, step_cpu_ms=r.step_cpu_ms, tokens_per_sec_per_gpu=r.tokens_per_sec_per_gpu
            )
            for r in summary_rungs(summary.get("rungs", []))
            if r.step_ms
        },
        provenance={k: provenance.get(k) for k in PROVENANCE_FIELDS},
    )


def provenance_changes(points: Sequence[RunPoints]) -> list[list[str]]:
    """Per run, the provenance fields that differ from the run before (none for the first), and
    the run statistic where both runs record it (index entries from before the field do not say
    which figure their runs took, so no change is claimed against them)."""
    out: list[list[str]] = []
    for i, now in enumerate(points):
        if i == 0:
            out.append([])
            continue
        before = points[i - 1]
        old, new = before.provenance, now.provenance
        changes = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in PROVENANCE_FIELDS if old.get(k) != new.get(k)]
        was, is_ = before.run_statistic, now.run_statistic
        if was and is_ and was != is_:
            changes.append(f"run_statistic: {was!r} -> {is_!r}")
        out.append(changes)
    return out


def rung_histories(entries: Sequence[IndexEntry]) -> dict[str, RungHistory]:
    """Each rung's series over full runs (oldest first), on the newest run's judged figure: the
    step CPU time on `metric: cpu`, else the step time; runs without that figure are left out."""
    judged_key = VERDICT_METRICS[plan_metric({"metric": _points(entries[-1]).metric} if entries else {})][0]
    rungs: dict[str, RungHistory] = {}
    for entry in entries:
        for name, p in _points(entry).rungs.items():
            judged = p.figure(judged_key)
            if not judged:
                continue  # a run before the ladder judged on this figure
            h = rungs.setdefault(name, RungHistory(name))
            h.run_ids.append(entry.run_id)
            h.step_ms.append(p.step_ms)
            h.tokens_per_sec_per_gpu.append(p.tokens_per_sec_per_gpu)
            h.judged.append(judged)
    return rungs


def evaluate(entries: Sequence[IndexEntry], test: str = DEFAULT_TEST, seed: int = 0) -> LadderHistory:
    """The history verdicts of a ladder. `entries` are full runs, oldest first, each
    with its points (`run_points`); the last one is the run being published.
    The change points run on the newest run's verdict metric: on `metric: cpu`, the step CPU time,
    over the runs that recorded it."""
    judged_key = VERDICT_METRICS[plan_metric({"metric": _points(entries[-1]).metric} if entries else {})][0]
    rungs = rung_histories(entries)
    prov = provenance_changes([_points(e) for e in entries])
    prov_at = {e.run_id: c for e, c in zip(entries, prov)}
    current = entries[-1].run_id if entries else None
    out_rungs: list[RungSeries] = []
    regressions: list[HistoryPoint] = []
    suspects: list[HistorySuspect] = []
    for h in rungs.values():
        values = [s.mean for s in h.judged]
        now = detect(values, test=test, seed=seed)
        previous = detect(values[:-1], test=test, seed=seed) if h.run_ids[-1] == current else now
        fresh = {c.index for c in new_regressions(now, previous)} if h.run_ids[-1] == current else set()
        found = suspect(values, now, previous) if h.run_ids[-1] == current else None
        if found is not None:
            suspects.append(
                HistorySuspect(
                    rung=h.rung,
                    run_id=h.run_ids[-1],
                    good_run_id=h.run_ids[found.good_index],
                    reason=found.reason,
                    direction=found.direction,
                    good_index=found.good_index,
                    delta_pct=found.delta_pct,
                    change_point=SuspectChange.from_dict(found.change_point.as_dict()) if found.change_point else None,
                    bound=SuspectBound.from_dict(found.bound.as_dict()) if found.bound else None,
                )
            )
        points: list[HistoryPoint] = []
        for c in now:
            near = [
                x
                for j in (c.index - 1, c.index, c.index + 1)
                if 0 <= j < len(h.run_ids)
                for x in prov_at.get(h.run_ids[j], [])
            ]
            point = HistoryPoint(
                index=c.index,
                direction=c.direction,
                delta_pct=c.delta_pct,
                ci95_pct=list(c.ci95_pct),
                p_value=c.p_value,
                rung=h.rung,
                run_id=h.run_ids[c.index],
                provenance_changes=near,
                regression=c.index in fresh,
            )
            points.append(point)
            if point.regression:
                regressions.append(point)
        out_rungs.append(
            RungSeries(
                rung=h.rung,
                run_ids=[*h.run_ids],
                step_ms=[*h.step_ms],
                tokens_per_sec_per_gpu=[*h.tokens_per_sec_per_gpu],
                step_cpu_ms=[*h.judged] if judged_key != STEP else None,
                change_points=points,
            )
        )
    return LadderHistory(
        runs=[e.run_id for e in entries],
        logical_dates=[e.logical_date for e in entries],
        provenance_changes=[[*changes] for changes in prov],
        test=test,
        metric=judged_key,
        alpha=ALPHA,
        alpha_recent=ALPHA_RECENT,
        recent_runs=RECENT_RUNS,
        rungs=out_rungs,
        regressions=regressions,
        # rungs to re-measure side by side (issue 51): a new change point or a run beyond the bound
        suspects=suspects,
        since_last=since_last(entries),
    )


def since_last(entries: Sequence[IndexEntry]) -> SinceLast | None:
    """ "Since last week": the newest run against the one before, figures only (the calls come
    from the change points above, not from two runs)."""
    if len(entries) < 2:
        return None
    before, now = _points(entries[-2]), _points(entries[-1])
    rows: list[JSONObject] = []
    for name, p in now.rungs.items():
        old = before.rungs.get(name)
        if old is not None and old.step_ms and p.step_ms:
            a, b = old.step_ms.mean, p.step_ms.mean
            rows.append(
                {
                    "rung": name,
                    "previous": old.step_ms.to_dict(),
                    "current": p.step_ms.to_dict(),
                    "delta_ms": b - a,
                    "delta_pct": 100.0 * (b / a - 1),
                }
            )
    return SinceLast(
        previous_run_id=entries[-2].run_id, rungs=rows, provenance_changes=[*provenance_changes([before, now])[1]]
    )


def regression_lines(history: LadderHistory | None) -> list[str]:
    """One sentence per regression call, for findings and the notifier."""
    out = []
    for r in history.regressions if history else []:
        lo, hi = r.ci95_pct
        changes = r.provenance_changes
        prov = f"; coincides with a provenance change ({'; '.join(changes)})" if changes else "; no provenance change"
        what = METRIC_WORDS.get(history.metric if history else STEP, METRIC_WORDS[STEP])[0]
        out.append(
            f"{r.rung}: {what} {r.delta_pct:+.1f}% (95% CI {lo:+.1f}% to {hi:+.1f}%) from run {r.run_id} on{prov}."
        )
    return out


def history_findings(history: LadderHistory) -> list[str]:
    """The summary's sentences about the ladder's history: the regression calls, else each suspect
    (a run that moved is not "no new regression"), else that nothing was called."""
    n = len(history.runs)
    calls = regression_lines(history)
    suspects = suspect_lines(history)
    if calls:
        return [f"Step-time regression called in this run's history ({n} runs): {c}" for c in calls] + suspects
    out = suspects or [f"No new step-time regression in the ladder's history ({n} full runs)."]
    last = history.since_last
    if last:
        out += [f"Provenance changed since {last.previous_run_id}: {p}." for p in last.provenance_changes]
    return out


def suspect_lines(history: LadderHistory) -> list[str]:
    """One sentence per suspect: to be confirmed side by side, not a call."""
    return [suspect_sentence(history, s) for s in history.suspects]


SENT_TO_TRIAGE = "A suspect, sent to the triage to be confirmed side by side."


def suspect_sentence(history: LadderHistory, found: HistorySuspect) -> str:
    """What made a rung a suspect, in one sentence that the findings and the History section of
    summary.md, report.html and the Ladders page share: its rung, direction and size, the reason
    (a new change point, or this run beyond the prediction bound of the runs before it, which
    then says whether a change point was ever called) and the last good run it is judged against."""
    what, _, unit = METRIC_WORDS.get(history.metric, METRIC_WORDS[STEP])
    series = next((r for r in history.rungs if r.rung == found.rung), None)
    cp = found.change_point
    if found.reason == "change point" and cp is not None:
        first = series.run_ids[cp.index] if series and 0 <= cp.index < len(series.run_ids) else found.run_id
        lo, hi = cp.ci95_pct
        return (
            f"A new change point in {found.rung}'s {what} from run {first} on: {cp.direction}, "
            f"{cp.delta_pct:+.1f}% (95% CI {lo:+.1f}% to {hi:+.1f}%, p {cp.p_value:.1g}); last good run "
            f"{found.good_run_id}. {SENT_TO_TRIAGE}"
        )
    called = "No new change point" if series and series.change_points else "No change point called yet"
    b = found.bound
    if b is None:  # a summary from before the bound was stored
        beyond = "lies beyond the 99% prediction bound of the runs before it"
    else:
        now = b.mean * (1 + found.delta_pct / 100)  # delta_pct: this run against the segment's mean
        beyond = (
            f"({now:.1f} {unit}) lies beyond the {100 * b.level:g}% prediction bound of the {b.runs} runs "
            f"before it ({b.low:.1f} to {b.high:.1f} {unit})"
        )
    return (
        f"{called} in {found.rung}'s {what}, but this run {beyond}: {found.direction}, "
        f"{found.delta_pct:+.1f}% against their mean; last good run {found.good_run_id}. {SENT_TO_TRIAGE}"
    )
