"""Triage (issue 51), simulated with the measured noise model (testkit/simulation, the proxy's 48
back-to-back runs): the confirm's false confirmations on A/A, its power, a bisection over 8 builds
with one +15% build, the suspect rate on flat histories, and the detection delay (the week the
ladder first flags a rung against the week the detector alone calls the change point).

The confirm is simulated as `triage/confirm.py` runs it: blocks of one A and one B run in a seeded
random order, one execution sequence (the noise model's slow spells run across blocks), a look
after every block from CONFIRM_MIN_BLOCKS on with `triage.confirm.look_at`."""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

from benchmarks.common import REPO, Context, Row
from traceladder.stats.history import detect, suspect
from traceladder.stats.model import clopper_pearson
from traceladder.stats.sequential import CONFIRM_MIN_BLOCKS, CONFIRMED
from testkit.simulation.noise import NoiseModel, Slot, load_proxy_noise, simulate_runs
from testkit.simulation.simulate import log_shift
from traceladder.triage.bisect import Candidate, bisect
from traceladder.triage.confirm import look_at

SECTION = "triage"
BUDGET_BLOCKS = 16  # the `triage: {budget_blocks}` default (config/models.py TriageSettings)
AA_TARGET_UPPER = 0.065
POWER_TARGET = 0.95
BISECT_TARGET = 0.90
WEEK_REPEATS = 3  # runs per weekly figure in the history simulations (a ladder's default repeats)
# The proxy's step CPU time (what proxy-local's `metric: cpu` judges, and so what its confirm
# compares) has a measured between-run sd of 6.8% (docs/figures/2026-12-04-bench-1707-proxy_cpu_noise.md,
# manual gc); the wall-time model below is the fitted one (run sd 16.5% on this shared VM).
CPU_RUN_SD = 0.068


def noise_models() -> list[tuple[str, NoiseModel, bool]]:
    """(label, model, gated): the fitted wall-time model, and its shape at the CPU time's run sd."""
    wall = load_proxy_noise()
    return [
        (f"cpu time (run sd {100 * CPU_RUN_SD:.1f}%)", wall.scaled(CPU_RUN_SD), True),
        (f"wall time (run sd {100 * wall.run_sd:.1f}%)", wall, False),
    ]


def simulate_confirm(
    model: NoiseModel, true_log: float, suspect_log: float, rng: np.random.Generator, max_blocks: int = BUDGET_BLOCKS
) -> tuple[str, int]:
    """One simulated confirm: (verdict, blocks run)."""
    schedule = []
    for b in range(max_blocks):
        order = ["A", "B"] if rng.random() < 0.5 else ["B", "A"]
        schedule += [Slot(b, p, t) for p, t in enumerate(order)]
    runs = simulate_runs(model, schedule, {"B": true_log}, rng)
    for n in range(CONFIRM_MIN_BLOCKS, max_blocks + 1):
        look = look_at([r for r in runs if int(r.block) < n], suspect_log, max_blocks)  # type: ignore[call-overload]
        if look.stop is not None:
            return look.stop, n
    raise AssertionError("the last look always stops")


def bench_triage_confirm(ctx: Context) -> list[Row]:
    rows = []
    t0 = time.perf_counter()
    for label, model, gated in noise_models():
        rng = np.random.default_rng(20261206)
        n_aa = 2000
        # A/A: the suspect said +15% slower (what a ladder's prediction bound flags), no true change
        aa = [simulate_confirm(model, 0.0, log_shift(15), rng) for _ in range(n_aa)]
        k = sum(v == CONFIRMED for v, _ in aa)
        lo, hi = clopper_pearson(k, n_aa)
        rows.append(
            Row(
                SECTION,
                f"confirm A/A false confirmations, simulated, {label}",
                100 * k / n_aa,
                "%",
                f"CI upper <= {100 * AA_TARGET_UPPER:.1f}",
                hi <= AA_TARGET_UPPER,
                f"{k}/{n_aa} triages, Clopper-Pearson 95% CI {100 * lo:.2f}-{100 * hi:.2f}%; "
                f"not reproduced {sum(v == 'not reproduced' for v, _ in aa)}, insufficient "
                f"{sum(v == 'insufficient' for v, _ in aa)}; median blocks "
                f"{statistics.median(b for _, b in aa):g} of {BUDGET_BLOCKS}",
            )
        )
        n_pow = 1000
        for pct in (5, 10, 15):
            out = [simulate_confirm(model, log_shift(pct), log_shift(pct), rng) for _ in range(n_pow)]
            k = sum(v == CONFIRMED for v, _ in out)
            lo, hi = clopper_pearson(k, n_pow)
            gate = pct == 15 and gated
            rows.append(
                Row(
                    SECTION,
                    f"confirm power at +{pct}%, simulated, {label}",
                    100 * k / n_pow,
                    "%",
                    f">= {100 * POWER_TARGET:.0f}" if gate else "",
                    (k / n_pow >= POWER_TARGET) if gate else None,
                    f"{k}/{n_pow} confirmed (95% CI {100 * lo:.1f}-{100 * hi:.1f}%), not reproduced "
                    f"{sum(v == 'not reproduced' for v, _ in out)}, "
                    f"insufficient {sum(v == 'insufficient' for v, _ in out)}; "
                    f"median blocks {statistics.median(b for _, b in out):g}",
                )
            )
    rows.append(Row(SECTION, "confirm simulation time", time.perf_counter() - t0, "s", "", None, ""))
    return rows


def bench_triage_bisect(ctx: Context) -> list[Row]:
    """8 builds by creation time, build 0 the known good, build 7 the known bad; the +15% build is
    drawn at 1..7 and every later build carries it. Each step a simulated confirm."""
    rows = []
    for label, model, gated in noise_models():
        rng = np.random.default_rng(20261207)
        n = 1000
        right, steps, insufficient = 0, [], 0
        t0 = time.perf_counter()
        for _ in range(n):
            bad_at = int(rng.integers(1, 8))
            builds = [Candidate(f"nightly-{i}", "build", {"build": f"nightly-{i}"}) for i in range(8)]

            def step(
                good: Candidate,
                cand: Candidate,
                bad_at: int = bad_at,
                model: NoiseModel = model,
                rng: np.random.Generator = rng,
            ) -> tuple[str, dict]:
                gi, ci = int(good.name.rsplit("-", 1)[1]), int(cand.name.rsplit("-", 1)[1])
                true = log_shift(15) * ((ci >= bad_at) - (gi >= bad_at))
                verdict, blocks = simulate_confirm(model, true, log_shift(15), rng)
                return verdict, {"blocks": blocks}

            result = bisect(builds, step)
            steps.append(len(result.steps))
            insufficient += result.first_bad is None
            right += result.first_bad == f"nightly-{bad_at}"
        lo, hi = clopper_pearson(right, n)
        rows.append(
            Row(
                SECTION,
                f"bisection over 8 builds (+15% build), simulated, {label}",
                100 * right / n,
                "%",
                f">= {100 * BISECT_TARGET:.0f}" if gated else "",
                right / n >= BISECT_TARGET if gated else None,
                f"{right}/{n} found the injected build (95% CI {100 * lo:.1f}-{100 * hi:.1f}%); {insufficient} "
                f"stopped 'between X and Y'; median steps {statistics.median(steps):g} (max {max(steps)}); "
                f"{time.perf_counter() - t0:.0f} s",
            )
        )
    return rows


def _weekly_figures(
    model: NoiseModel, weeks: int, shift_from: int | None, shift_log: float, rng: np.random.Generator
) -> list[float]:
    """One rung's weekly history: each week the mean (log) of WEEK_REPEATS runs of a fresh run's
    sequence, step time in ms; from week `shift_from` on, `shift_log` added."""
    schedule = [Slot(b, 0, "r") for b in range(WEEK_REPEATS)]
    out = []
    for w in range(weeks):
        shift = shift_log if shift_from is not None and w >= shift_from else 0.0
        runs = simulate_runs(model, schedule, {"r": shift}, rng)
        out.append(math.exp(float(np.mean([r.y for r in runs]))))
    return out


def bench_triage_suspects(ctx: Context) -> list[Row]:
    """The suspect rate per weekly evaluation on flat histories of 12 to 30 weeks, and the detection
    delay of a +15% step at week 16 of 30 (week 1: the step's first run)."""
    model = load_proxy_noise()
    rng = np.random.default_rng(20261208)
    n = 200 if ctx.quick else 500
    t0 = time.perf_counter()
    flagged = evaluations = 0
    for _ in range(n):
        values = _weekly_figures(model, 30, None, 0.0, rng)
        for w in range(12, 31):
            evaluations += 1
            flagged += suspect(values[:w]) is not None
    lo, hi = clopper_pearson(flagged, evaluations)
    rows = [
        Row(
            SECTION,
            "suspect rate on flat histories, simulated",
            100 * flagged / evaluations,
            "% of evaluations",
            "",
            None,
            f"{flagged}/{evaluations} weekly evaluations (weeks 12-30 of {n} flat histories, "
            f"{WEEK_REPEATS} runs a week), "
            f"95% CI {100 * lo:.2f}-{100 * hi:.2f}% (not independent within a history)",
        )
    ]
    step_at, weeks = 15, 30
    delay_noise = [(label, noise) for label, noise, _ in noise_models()] + [
        ("GPU-like (run sd 2%)", model.scaled(0.02))
    ]
    for label, noise in delay_noise:
        first_flag, first_call = [], []
        for _ in range(n // 2):
            values = _weekly_figures(noise, weeks, step_at, log_shift(15), rng)
            flag = call = None
            for w in range(step_at + 1, weeks + 1):
                if flag is None and suspect(values[:w]) is not None:
                    flag = w - step_at
                if call is None and any(
                    c.direction == "slower" and abs(c.index - step_at) <= 2 for c in detect(values[:w])
                ):
                    call = w - step_at
                if flag is not None and call is not None:
                    break
            first_flag.append(flag if flag is not None else math.inf)
            first_call.append(call if call is not None else math.inf)
        rows.append(
            Row(
                SECTION,
                f"detection delay of a +15% step, {label}: ladder flags (median week)",
                statistics.median(first_flag),
                "week",
                "",
                None,
                f"week 1 = the step's first run; flagged at week 1 in "
                f"{sum(f == 1 for f in first_flag)}/{len(first_flag)}, "
                f"not within {weeks - step_at} weeks in {sum(f == math.inf for f in first_flag)}; "
                f"the detector alone calls it at median week {statistics.median(first_call):g} "
                f"(at week 1 in {sum(c == 1 for c in first_call)}, not within {weeks - step_at} weeks in "
                f"{sum(c == math.inf for c in first_call)})",
            )
        )
    rows.append(Row(SECTION, "suspect simulation time", time.perf_counter() - t0, "s", "", None, ""))
    return rows


def bench_triage_real(ctx: Context) -> list[Row]:
    """Real triages on the local backend: proxy-local's `baseline` rung through the real runner,
    confirms judged on its metric (CPU time), each a fresh process per run. A/A: the same build
    both sides; power: a build that adds 15% of the step's time as real matmul work in the
    `attention` region; bisection: 8 builds by creation time with that work from a drawn build on.
    10 of each (`--quick`: 1); about 2 minutes per confirm on 2 shared CPUs."""
    import os
    import random

    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan
    from traceladder.triage.bisect import BuildChanges, candidate_spec
    from traceladder.triage.confirm import Budget, confirm
    from traceladder.triage.runs import local_run_block

    os.environ["TRACELADDER_WARM_LAUNCHER"] = "0"
    os.environ["PYTHONPATH"] = str(REPO / "include")  # the workload processes run this checkout
    loaded = load_ladder(find_ladder("proxy-local"))
    base = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0].to_dict()
    n = 1 if ctx.quick else 10
    budget = Budget(BUDGET_BLOCKS)
    run_block = local_run_block(ctx.scratch / "triage-real")
    rng = random.Random(20261209)
    size = log_shift(15)

    def catalog(bad_at: int) -> dict[str, BuildChanges]:
        slow = {"extra_work_pct": 15, "extra_work_region": "attention"}
        return {
            f"nightly-{i}": BuildChanges(
                f"nightly-{i}", f"2026-12-{i + 1:02d}T02:00:00+00:00", slow if i >= bad_at else {}, {}
            )
            for i in range(8)
        }

    def one(builds: dict[str, BuildChanges], a: str, b: str, seed: int) -> str:
        spec_a = candidate_spec(base, Candidate(a, "build", {"build": a}), builds)
        spec_b = candidate_spec(base, Candidate(b, "build", {"build": b}), builds)
        return confirm(
            spec_a, spec_b, size, run_block, budget, rung="baseline", names=(a, b), metric="cpu", seed=seed
        ).verdict

    rows = []
    t0 = time.perf_counter()
    builds = catalog(1)
    aa = [one(builds, "nightly-0", "nightly-0", rng.randrange(1 << 30)) for _ in range(n)]
    power = [one(builds, "nightly-0", "nightly-1", rng.randrange(1 << 30)) for _ in range(n)]
    confirm_s = (time.perf_counter() - t0) / (2 * n)
    rows.append(
        Row(
            SECTION,
            "confirm A/A false confirmations, real",
            sum(v == CONFIRMED for v in aa),
            f"of {n}",
            "<= 1 of 10",
            sum(v == CONFIRMED for v in aa) <= n / 10,
            f"verdicts {aa}; {confirm_s:.0f} s per confirm",
        )
    )
    rows.append(
        Row(
            SECTION,
            "confirm power at +15% (real build)",
            sum(v == CONFIRMED for v in power),
            f"of {n}",
            ">= 8 of 10",
            sum(v == CONFIRMED for v in power) >= 0.8 * n,
            f"verdicts {power}",
        )
    )
    right, steps, walls = 0, [], []
    for _ in range(n):
        bad_at = rng.randrange(1, 8)
        builds = catalog(bad_at)
        cands = [Candidate(name, "build", {"build": name}, b.created) for name, b in builds.items()]
        t1 = time.perf_counter()
        result = bisect(cands, lambda g, c, builds=builds: (one(builds, g.name, c.name, rng.randrange(1 << 30)), {}))
        walls.append(time.perf_counter() - t1)
        steps.append(len(result.steps))
        right += result.first_bad == f"nightly-{bad_at}"
    rows.append(
        Row(
            SECTION,
            "bisection over 8 builds (+15% build), real",
            right,
            f"of {n}",
            ">= 8 of 10",
            right >= 0.8 * n,
            f"median steps {statistics.median(steps):g}, median wall {statistics.median(walls) / 60:.1f} min",
        )
    )
    return rows


bench_triage_real.explicit_only = True  # type: ignore[attr-defined]  # real runs: tens of minutes

SECTIONS = [bench_triage_confirm, bench_triage_bisect, bench_triage_suspects, bench_triage_real]
