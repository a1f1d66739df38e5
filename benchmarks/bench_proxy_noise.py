"""The CPU proxy's own noise, before and after pinning, and what the positive control costs.

* ``proxy_noise``: the proxy-local baseline rung run ``NOISE_RUNS`` times unpinned
  (``TRACELADDER_PROXY_PIN=0``: floating ranks, default thread pools; the "before") and
  ``NOISE_RUNS`` times pinned (each rank on its own core, one intra-op and one inter-op thread;
  the "after"), alternating, so a slow spell of the machine hits both alike. Per mode: the
  within-run CV of the measured iteration times (median over runs) and the between-run CV of the
  run medians (the run-level sigma, target <= 4% on an idle machine). The machine this runs on
  may be shared: the load average before and after is in the detail column.
* ``proxy_cpu_noise``: the verdict metric of ``metric: cpu`` (the slowest rank's compute-thread
  CPU time per iteration), baseline rung, ``NOISE_RUNS`` runs with the threshold garbage
  collector (the "before") and ``NOISE_RUNS`` with Megatron's ``--manual_gc`` (proxy-local's
  setting, the "after"), alternating. Per mode, on the log scale: the iteration sd (the sample
  CV the block model floors a mean with, and the scaled MAD, pooled over runs), the between-run
  sd of the run means (a run's figure under ``metric: cpu``), the floor ``sqrt(CV^2 / m)`` and the
  run sd the block model would use, ``sqrt(max(between^2, floor^2))`` (target <= 2%: issue 25).
  From the "after" runs' per-rank CPU times (``TRACELADDER_PROXY_RANK_CPU=1``): the between-run
  sd of the slowest-rank figure against that of the mean over ranks, and the correlation of the
  two ranks' run means (docs/statistics.md, "Where the CPU metric's run-level noise comes from").
* ``noise_sources``: where the CPU metric's run-level noise comes from. The ``recompute_off``
  rung ``NOISE_RUNS`` times in each of five variants, alternating: as the demo runs it; both
  ranks on core 0 (``taskset -c 0``); one rank (EP 1) with the other core idle; one rank with a
  spinning process on the other core; ASLR off (``setarch -R``). Per variant, on the log scale:
  the between-run sd of the run medians and the median within-run sd (docs/statistics.md,
  "Where the CPU metric's run-level noise comes from").
* ``extra_work``: the step-time change ``--extra_work_pct`` really causes, from pinned runs of
  the baseline with and without it, alternating (mean of paired differences, in %).

``TRACELADDER_BENCH_NOISE_RUNS`` changes the run count (``--quick``: 3).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from benchmarks.common import REPO, Context, Row

NOISE_RUNS = int(os.environ.get("TRACELADDER_BENCH_NOISE_RUNS", "10"))
EXTRA_PCTS = (5.0, 10.0)
SIGMA_TARGET = 0.04
CPU_SIGMA_TARGET = 0.02


def proxy_command(rung: str = "baseline") -> tuple[list[str], dict[str, str], int]:
    """argv, environment and warm-up iterations of one proxy-local rung, as the runner builds them."""
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan
    from traceladder.runner.backends import local as local_backend

    spec = build_plan(load_ladder(find_ladder("proxy-local")), rungs=[rung], lens="none", repeats=1, seed=0)[0]
    argv, env = local_backend.command(spec, Path(tempfile.gettempdir()))
    return argv[1:], env, spec.warmup_iters  # argv[0] is this interpreter


def proxy_env(env: Mapping[str, str], *, pin: bool) -> dict[str, str]:
    """A proxy run's environment over this process's: its pinning switch, and the checkout's
    include/ (the package) and root (benchmarks.*) first on PYTHONPATH."""
    path = os.pathsep.join([str(REPO / "include"), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, **env, "TRACELADDER_PROXY_PIN": "1" if pin else "0", "PYTHONPATH": path}


def proxy_output(
    args: list[str], env: dict[str, str], *, pin: bool, python: str = sys.executable, prefix: Sequence[str] = ()
) -> list[str]:
    """One proxy run in a fresh workspace; its stdout lines. `prefix` wraps the interpreter
    (`taskset -c 0`, `setarch -R`)."""
    with tempfile.TemporaryDirectory(prefix="tl-noise-") as tmp:
        full_env = {**proxy_env(env, pin=pin), "PRIMUS_WORKSPACE": tmp}
        argv = [*prefix, python, *args]
        proc = subprocess.run(argv, env=full_env, cwd=tmp, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"proxy exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.splitlines()


def proxy_iterations(
    args: list[str], env: dict[str, str], *, pin: bool, python: str = sys.executable, prefix: Sequence[str] = ()
) -> list:
    """One proxy run's parsed iteration records (runner.primus_log)."""
    from traceladder.runner.primus_log import parse_iterations

    return parse_iterations(proxy_output(args, env, pin=pin, python=python, prefix=prefix))


def rank_cpu_ms(lines: list[str], warmup: int) -> list[list[float]]:
    """Each measured iteration's compute-thread CPU ms per rank, from the lines the proxy prints
    with TRACELADDER_PROXY_RANK_CPU=1 (one per iteration, warm-up first)."""
    from traceladder.workload.train import RANK_CPU_PREFIX

    rows = [
        [float(v) for v in ln.removeprefix(RANK_CPU_PREFIX).split()] for ln in lines if ln.startswith(RANK_CPU_PREFIX)
    ]
    return rows[warmup:]


class RankFigures(NamedTuple):
    slowest_sd: float  # between-run sd (log) of the slowest rank per iteration: the verdict metric
    mean_sd: float  # the same of the mean over ranks: a cost per rank, not inflated by a max
    correlation: float  # of rank 0's and rank 1's run means


def rank_figures(runs: list[list[list[float]]]) -> RankFigures:
    """Between-run sd (log) of a run's mean CPU time per step taken two ways, and how the ranks'
    own run means move together."""
    import math

    kept = [r for r in runs if len(r) > 1]
    if len(kept) < 3:
        raise RuntimeError(f"proxy_cpu_noise: {len(kept)} runs with per-rank CPU times; 3 are needed")
    slowest = [math.log(statistics.fmean(max(it) for it in r)) for r in kept]
    mean = [math.log(statistics.fmean(statistics.fmean(it) for it in r)) for r in kept]
    ranks = [[math.log(statistics.fmean(it[k] for it in r)) for r in kept] for k in range(len(kept[0][0]))]
    return RankFigures(statistics.stdev(slowest), statistics.stdev(mean), statistics.correlation(ranks[0], ranks[1]))


def run_proxy(
    args: list[str], env: dict[str, str], warmup: int, *, pin: bool, python: str = sys.executable
) -> list[float]:
    """One proxy run; its measured iteration times in ms (warm-up left out)."""
    records = proxy_iterations(args, env, pin=pin, python=python)
    return [r.elapsed_ms for r in records if r.iteration > warmup and r.elapsed_ms is not None]


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else float("nan")


def noise_figures(runs: list[list[float]]) -> tuple[float, float]:
    """(median within-run CV, between-run CV of the run medians)."""
    within = statistics.median(cv(r) for r in runs)
    between = cv([statistics.median(r) for r in runs])
    return within, between


def _load() -> str:
    return "load {:.2f}/{:.2f}/{:.2f}".format(*os.getloadavg())


def bench_proxy_noise(ctx: Context) -> list[Row]:
    n = 3 if ctx.quick else NOISE_RUNS
    args, env, warmup = proxy_command()
    before_load = _load()
    runs: dict[bool, list[list[float]]] = {False: [], True: []}
    for _ in range(n):
        for pin in (False, True):
            runs[pin].append(run_proxy(args, env, warmup, pin=pin, python=ctx.python))
    machine = f"{os.cpu_count()} cpus, {before_load} -> {_load()}, {n} runs each, alternating"
    rows = []
    figures = {pin: noise_figures(r) for pin, r in runs.items()}
    for pin, label in ((False, "unpinned (before)"), (True, "pinned (after)")):
        within, between = figures[pin]
        med = statistics.median(statistics.median(r) for r in runs[pin])
        rows.append(
            Row(
                "proxy_noise",
                f"within-run CV, {label}",
                100 * within,
                "%",
                "",
                None,
                f"{100 * within:.2f}%; median step {med:.1f} ms; {machine}",
            )
        )
        rows.append(
            Row(
                "proxy_noise",
                f"between-run CV, {label}",
                100 * between,
                "%",
                f"<= {100 * SIGMA_TARGET:.0f}% (idle machine)" if pin else "",
                between <= SIGMA_TARGET if pin else None,
                f"{100 * between:.2f}%; {machine}",
            )
        )
    rows.append(
        Row(
            "proxy_noise",
            "between-run CV after / before",
            figures[True][1] / figures[False][1],
            "x",
            "< 1",
            figures[True][1] < figures[False][1],
        )
    )
    return rows


def cpu_noise_components(runs: list[list[float]]) -> dict[str, float]:
    """Run-level figures of CPU-time runs (each its measured iterations, ms), on the log scale, as
    the block model takes a `metric: cpu` run: its figure the mean of its iterations, floored by
    their pooled squared coefficient of variation over m (stats.model.iteration_var)."""
    import math

    from traceladder.stats.model import RUN_STATISTICS, iteration_var, robust_iter_var

    kept = [r for r in runs if len(r) > 1]
    logs = [[math.log(v) for v in r] for r in kept]
    df = sum(len(v) - 1 for v in logs)
    classic = sum(iteration_var(v, "mean") * (len(v) - 1) for v in logs) / df
    robust = sum(robust_iter_var(v) * (len(v) - 1) for v in logs) / df
    m = statistics.mean(len(v) for v in logs)
    between = statistics.variance([math.log(statistics.fmean(r)) for r in kept])
    floor = RUN_STATISTICS["mean"] * classic / m
    return {
        "iteration sd (sample CV)": math.sqrt(classic),
        "iteration sd (scaled MAD)": math.sqrt(robust),
        "between-run sd": math.sqrt(between),
        "floor sd": math.sqrt(floor),
        "run sd": math.sqrt(max(between, floor)),
    }


def bench_proxy_cpu_noise(ctx: Context) -> list[Row]:
    n = 3 if ctx.quick else NOISE_RUNS
    args, env, warmup = proxy_command()
    before_load = _load()
    from traceladder.runner.primus_log import parse_iterations
    from traceladder.workload.train import RANK_CPU_ENV

    runs: dict[str, list[list[float]]] = {"before": [], "after": []}
    by_rank: list[list[list[float]]] = []  # the "after" runs, per iteration and rank
    for _ in range(n):
        for mode, extra in (("before", ["--manual_gc", "False"]), ("after", ["--manual_gc", "True"])):
            run_env = {**env, RANK_CPU_ENV: "1"} if mode == "after" else env  # "before" prints nothing extra
            lines = proxy_output([*args, *extra], run_env, pin=True, python=ctx.python)
            records = parse_iterations(lines)
            runs[mode].append([r.step_cpu_ms for r in records if r.iteration > warmup and r.step_cpu_ms])
            if mode == "after":
                by_rank.append(rank_cpu_ms(lines, warmup))
    machine = f"{os.cpu_count()} cpus, {before_load} -> {_load()}, {n} runs each, alternating"
    rows = []
    for mode, label in (("before", "threshold gc (before)"), ("after", "manual gc (after)")):
        for name, value in cpu_noise_components(runs[mode]).items():
            target = name == "run sd" and mode == "after"
            rows.append(
                Row(
                    "proxy_cpu_noise",
                    f"CPU {name}, {label}",
                    100 * value,
                    "%",
                    f"<= {100 * CPU_SIGMA_TARGET:.0f}%" if target else "",
                    value <= CPU_SIGMA_TARGET if target else None,
                    f"{100 * value:.2f}%; {machine}",
                )
            )
    figures = rank_figures(by_rank)
    for name, value in (
        ("between-run sd, slowest rank (the metric)", figures.slowest_sd),
        ("between-run sd, mean over ranks", figures.mean_sd),
    ):
        rows.append(
            Row("proxy_cpu_noise", f"CPU {name}, manual gc", 100 * value, "%", detail=f"{100 * value:.2f}%; {machine}")
        )
    rows.append(
        Row(
            "proxy_cpu_noise",
            "CPU between-run sd, mean over ranks / slowest rank",
            figures.mean_sd / figures.slowest_sd,
            "x",
            detail=f"correlation of rank 0 and rank 1 run means {figures.correlation:.2f}; {machine}",
        )
    )
    return rows


ONE_RANK = ["--expert_model_parallel_size", "1", "--global_batch_size", "1"]
NOISE_VARIANTS: dict[str, tuple[list[str], list[str], bool]] = {  # label: (prefix, extra args, spinner)
    "2 ranks on cores 0 and 1 (the demo)": ([], [], False),
    "2 ranks on core 0": (["taskset", "-c", "0"], [], False),
    "1 rank, other core idle": ([], ONE_RANK, False),
    "1 rank, other core spinning": ([], ONE_RANK, True),
    "2 ranks, ASLR off": (["setarch", "-R"], [], False),
}


def bench_noise_sources(ctx: Context) -> list[Row]:
    import math

    n = 3 if ctx.quick else NOISE_RUNS
    args, env, warmup = proxy_command("recompute_off")
    before_load = _load()
    runs: dict[str, list[list[float]]] = {label: [] for label in NOISE_VARIANTS}
    # the spinner takes the core that rank 0 (pinned to the lowest) does not
    spin_argv = ["taskset", "-c", str(max(os.sched_getaffinity(0))), ctx.python, "-c", "while 1: pass"]
    for _ in range(n):
        for label, (prefix, extra, spin) in NOISE_VARIANTS.items():
            spinner = subprocess.Popen(spin_argv) if spin else None
            try:
                records = proxy_iterations([*args, *extra], env, pin=True, python=ctx.python, prefix=prefix)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            runs[label].append([math.log(r.step_cpu_ms) for r in records if r.iteration > warmup and r.step_cpu_ms])
    machine = f"{os.cpu_count()} cpus, {before_load} -> {_load()}, {n} runs each, alternating"
    rows = []
    for label, logs in runs.items():
        between = statistics.stdev([statistics.median(v) for v in logs])
        within = statistics.median(statistics.stdev(v) for v in logs)
        med = math.exp(statistics.median(statistics.median(v) for v in logs))
        detail = f"within-run sd {100 * within:.1f}%; median step {med:.1f} CPU ms; {machine}"
        rows.append(Row("noise_sources", f"between-run sd, {label}", 100 * between, "%", "", None, detail))
    return rows


def bench_extra_work(ctx: Context) -> list[Row]:
    n = 2 if ctx.quick else max(2, NOISE_RUNS // 2)
    base_args, env, warmup = proxy_command()
    rows = []
    for pct in EXTRA_PCTS:
        diffs = []
        for _ in range(n):
            plain = statistics.median(run_proxy(base_args, env, warmup, pin=True, python=ctx.python))
            extra = statistics.median(
                run_proxy([*base_args, "--extra_work_pct", f"{pct:g}"], env, warmup, pin=True, python=ctx.python)
            )
            diffs.append(100.0 * (extra - plain) / plain)
        half = 2.0 * statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
        rows.append(
            Row(
                "extra_work",
                f"step-time change at extra_work_pct={pct:g}",
                statistics.mean(diffs),
                "%",
                "",
                None,
                f"{statistics.mean(diffs):.2f}% +/- {half:.2f}% (2 s.e.), {n} alternating pairs, {_load()}",
            )
        )
    return rows


SECTIONS = [bench_proxy_noise, bench_proxy_cpu_noise, bench_noise_sources, bench_extra_work]
