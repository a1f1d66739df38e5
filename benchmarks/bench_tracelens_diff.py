"""The differential harness against the real TraceLens v1.0.0 (issue 28):
``python -m benchmarks --only tracelens_diff``.

It runs TraceLens (``TraceLens_generate_perf_report_pytorch --enable_kernel_summary
--short_kernel_study``, as the references were made) and ``traceladder analyze`` on the same
traces, and compares every sheet TraceLens writes by the conformance rule
(tests/conformance.py); a sheet traceladder does not write counts as differing. Traces:

* ``shared``: the shared references (../shared/reference, PyTorch ones, derived/ included);
* ``tl-tests``: every PyTorch trace in TraceLens's own ``tests/traces/`` at v1.0.0, read with
  ``git show`` from the mirror (blobs the mirror lacks are counted, not read);
* ``generated``: :mod:`testkit.tracegen` traces (CPU recordings given device activity);
* ``mutated``: seeded mutations of the shared GPU references.

A trace where TraceLens crashes or writes no sheet is counted apart, with what traceladder
did on it (its one-line error, or its reports). Needs the mirror (``TRACELENS_MIRROR``,
default /work/.mirror/AMD-AGI+TraceLens/repo; without it the ``tl-tests`` source is empty and
its row fails) and the oracle that
``../shared/tools/tracelens_oracle.sh`` builds from it (``TRACELENS_ORACLE``, the venv;
default /tmp/tracelens-oracle). Only runs when named with ``--only``: CI has no mirror.
Environment knobs: ``TRACELENS_DIFF_GENERATED`` (default 200), ``TRACELENS_DIFF_SEED`` (1).
TraceLens's sheets are cached by trace content under .traceladder/bench/tracelens_diff/, so
a rerun after a fix only re-runs traceladder. Details land in ``report.txt`` there.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import CACHE, REPO, SHARED, Context, Row
from testkit.tracelens_oracle import MIRROR, ORACLE_CMD, TAG, oracle_bin

WORK = CACHE / "tracelens_diff"


def _conformance():
    spec = importlib.util.spec_from_file_location("conformance", REPO / "tests" / "conformance.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass
class Outcome:
    source: str
    name: str
    sheets: int = 0
    differ: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    oracle_failed: str = ""  # TraceLens crashed or wrote nothing: why
    ours: str = ""  # what traceladder did on such a trace


# ---------------------------------------------------------------------------------
# the traces


def shared_traces() -> list[Path]:
    ref = SHARED / "reference"
    found = [p for d in ("mi300", "mi250", "h100") for p in sorted((ref / "tracelens-v1.0.0" / d).glob("*.json.gz"))]
    return found + sorted((ref / "derived").glob("*.json.gz"))


def tl_test_traces(dest: Path) -> tuple[list[Path], list[str]]:
    """PyTorch traces of TraceLens's tests/traces at the tag, written to ``dest``; and the
    paths skipped, each with why (absent from the mirror, an LFS pointer, not a PyTorch trace)."""
    git = ["git", "--git-dir", str(MIRROR)]
    listing = subprocess.run(
        [*git, "ls-tree", "-r", "-l", TAG, "tests/traces"], capture_output=True, text=True, check=True
    ).stdout
    got, skipped = [], []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        if not path.endswith((".json", ".json.gz")) or path.endswith("execution_details.json"):
            continue
        sha = meta.split()[2]
        blob = subprocess.run([*git, "cat-file", "blob", sha], capture_output=True)
        if blob.returncode != 0:
            skipped.append(f"{path}: absent from the mirror")
            continue
        data = blob.stdout
        if data.startswith(b"version https://git-lfs"):
            skipped.append(f"{path}: a Git LFS pointer")
            continue
        raw = gzip.decompress(data) if path.endswith(".gz") else data
        try:
            doc = json.loads(raw)
        except ValueError:
            skipped.append(f"{path}: not JSON")
            continue
        if not isinstance(doc, dict) or "traceEvents" not in doc:
            skipped.append(f"{path}: not a PyTorch trace (no traceEvents)")
            continue
        name = path.removeprefix("tests/traces/").replace("/", "__")
        out = dest / (name if name.endswith(".gz") else name + ".gz")
        if not out.exists():
            out.write_bytes(gzip.compress(raw, 1))
        got.append(out)
    return got, skipped


def _write(trace: dict, path: Path) -> Path:
    if not path.exists():
        path.write_bytes(gzip.compress(json.dumps(trace).encode(), 1))
    return path


def generated_traces(dest: Path, n: int, seed: int) -> list[Path]:
    from testkit import tracegen

    marker = dest / f".done-{n}-{seed}"
    if marker.exists():
        return sorted(dest.glob("gen*.json.gz"))[:n]
    paths = [_write(t, dest / f"{name}.json.gz") for name, t in tracegen.generated(n, seed)]
    marker.touch()
    return paths


def mutated_traces(dest: Path, bases: list[Path], seed: int) -> list[Path]:
    from testkit import tracegen

    paths = []
    for i, base in enumerate(bases):
        doc = json.loads(gzip.decompress(base.read_bytes()))
        stem = f"{base.parent.name}_{base.name.removesuffix('.json.gz')[:40]}"
        for k, kind in enumerate(tracegen.MUTATIONS):
            out = dest / f"mut_{stem}_{kind}.json.gz"
            if not out.exists():
                _write(tracegen.mutate(doc, seed * 1000 + i * 10 + k, kind), out)
            paths.append(out)
    return paths


# ---------------------------------------------------------------------------------
# running both


def run_oracle(bin_dir: Path, trace: Path) -> tuple[Path, str]:
    """TraceLens's CSVs for ``trace`` (cached by content); the reason when it wrote none."""
    digest = hashlib.sha1(trace.read_bytes(), usedforsecurity=False).hexdigest()[:16]
    out = WORK / "tl" / digest
    done = out / ".status"
    if not done.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        cmd = ["nice", "-n", "19", str(bin_dir / ORACLE_CMD), "--profile_json_path", str(trace)]
        cmd += ["--output_csvs_dir", str(out), "--enable_kernel_summary", "--short_kernel_study"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        why = ""
        if r.returncode != 0:
            last = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
            why = f"crashed: {last[-1][:200] if last else r.returncode}"
        elif not list(out.glob("*.csv")):
            why = "wrote no sheet"
        done.write_text(why)
    return out, done.read_text()


def run_ours(traces: list[Path], out: Path) -> dict[Path, str]:
    """``traceladder analyze`` on every trace in one call; each failed trace's error line."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(REPO / "include")}
    errors: dict[Path, str] = {}
    for i in range(0, len(traces), 50):
        chunk = traces[i : i + 50]
        r = subprocess.run(
            ["nice", "-n", "19", sys.executable, "-m", "traceladder.cli", "analyze", *map(str, chunk)]
            + ["--out", str(out)],
            capture_output=True,
            text=True,
            env=env,
        )
        for line in r.stderr.splitlines():
            for t in chunk:
                if line.startswith(f"error: {t}"):
                    errors[t] = line
    return errors


def _ours_dir(out: Path, trace: Path) -> Path:
    sys.path.insert(0, str(REPO / "include"))
    from traceladder.analysis.analyzers.trace import output_stem

    return out / output_stem(trace)


def stage_and_analyze(groups: dict[str, list[Path]], work: Path) -> tuple[dict[Path, Path], dict[Path, str], Path]:
    """Each trace copied under a unique name into ``work/stage`` (two references share a name,
    and analyze names its output after a link's target), then ``traceladder analyze`` on all of
    them into ``work/ours``: (trace -> its staged copy, trace -> its error line, the output root)."""
    stage = work / "stage"
    stage.mkdir(parents=True, exist_ok=True)
    staged: dict[Path, Path] = {}
    for source, traces in groups.items():
        for t in traces:
            staged[t] = stage / f"{source}__{t.parent.name}__{t.name}"
            if not staged[t].exists() or staged[t].stat().st_size != t.stat().st_size:
                shutil.copyfile(t, staged[t])
    ours_root = work / "ours"
    raw_errors = run_ours(list(staged.values()), ours_root)
    return staged, {t: raw_errors[s] for t, s in staged.items() if s in raw_errors}, ours_root


def trace_groups(n_generated: int, seed: int) -> tuple[dict[str, list[Path]], list[str]]:
    """The harness's traces by source, and the mirror paths skipped (each with why). Without the
    mirror (``TRACELENS_MIRROR``), TraceLens's own test traces are left out and say so."""
    for sub in ("tl-tests", "generated", "mutated"):
        (WORK / "traces" / sub).mkdir(parents=True, exist_ok=True)
    shared = shared_traces()
    if MIRROR.is_dir():
        tl_tests, skipped = tl_test_traces(WORK / "traces" / "tl-tests")
    else:
        tl_tests, skipped = [], [f"tests/traces: no mirror at {MIRROR}"]
    groups = {
        "shared": shared,
        "tl-tests": tl_tests,
        "generated": generated_traces(WORK / "traces" / "generated", n_generated, seed),
        "mutated": mutated_traces(WORK / "traces" / "mutated", shared, seed),
    }
    return groups, skipped


def compare_all(groups: dict[str, list[Path]], bin_dir: Path) -> list[Outcome]:
    conf = _conformance()
    everything = [t for ts in groups.values() for t in ts]
    with ThreadPoolExecutor(2) as pool:
        oracle = dict(zip(everything, pool.map(lambda t: run_oracle(bin_dir, t), everything)))
    staged, errors, ours_root = stage_and_analyze(groups, WORK)
    outcomes = []
    for source, traces in groups.items():
        for t in traces:
            tl_out, why = oracle[t]
            o = Outcome(source, t.name)
            ours = _ours_dir(ours_root, staged[t])
            if why:
                o.oracle_failed = why
                o.ours = errors.get(t) or f"wrote {len(list(ours.glob('*.csv')))} sheet(s)"
                outcomes.append(o)
                continue
            want = sorted(p.name for p in tl_out.glob("*.csv"))
            o.sheets = len(want)
            for sheet in want:
                try:
                    diffs = conf.compare_csv(ours / sheet, tl_out / sheet, max_report=3)
                except Exception as exc:  # noqa: BLE001 - an unreadable sheet differs
                    diffs = [f"{sheet}: not comparable: {exc}"]
                if diffs:
                    o.differ.append(f"{sheet}: " + " | ".join(d.replace("\n", " ") for d in diffs))
            o.extra = sorted({p.name for p in ours.glob("*.csv")} - set(want))
            if t in errors:
                o.ours = errors[t]
            outcomes.append(o)
    return outcomes


def _report(outcomes: list[Outcome], skipped: list[str]) -> str:
    lines = []
    for o in outcomes:
        if o.oracle_failed:
            lines.append(f"[{o.source}] {o.name}: TraceLens {o.oracle_failed}; traceladder: {o.ours}")
        for d in o.differ:
            lines.append(f"[{o.source}] {o.name}: {d}")
        if o.extra:
            lines.append(f"[{o.source}] {o.name}: sheets only traceladder writes: {o.extra}")
    lines += [f"[tl-tests] skipped {s}" for s in skipped]
    return "\n".join(lines) + "\n"


def summary_line(outcomes: list[Outcome]) -> str:
    ok = [o for o in outcomes if not o.oracle_failed]
    m = sum(o.sheets for o in ok)
    k = sum(len(o.differ) for o in ok)
    apart = len(outcomes) - len(ok)
    return f"{len(ok)} traces, {m} sheets compared, {k} differ ({apart} more where TraceLens wrote no sheet or crashed)"


def bench_tracelens_diff(ctx: Context) -> list[Row]:
    bin_dir = oracle_bin()
    n_gen = int(os.environ.get("TRACELENS_DIFF_GENERATED", "20" if ctx.quick else "200"))
    seed = int(os.environ.get("TRACELENS_DIFF_SEED", "1"))
    groups, skipped = trace_groups(n_gen, seed)
    outcomes = compare_all(groups, bin_dir)
    (WORK / "report.txt").write_text(_report(outcomes, skipped))
    rows = []
    for source in groups:
        mine = [o for o in outcomes if o.source == source]
        ok = [o for o in mine if not o.oracle_failed]
        m = sum(o.sheets for o in ok)
        k = sum(len(o.differ) for o in ok)
        per = m / len(ok) if ok else 0.0
        rows.append(
            Row(
                "tracelens_diff",
                f"{source}: sheets that differ",
                k,
                "sheets",
                "0, with >= 8 sheets per trace",
                k == 0 and per >= 8,
                f"{len(ok)} traces, {m} sheets compared ({per:.1f}/trace); "
                f"{len(mine) - len(ok)} where TraceLens wrote none or crashed"
                + (f"; {len(skipped)} mirror paths skipped" if source == "tl-tests" else ""),
            )
        )
    line = summary_line(outcomes)
    print(f"tracelens_diff: {line}; details in {WORK / 'report.txt'}", file=sys.stderr)
    rows.append(Row("tracelens_diff", "all sources", sum(r.value for r in rows), "sheets", "0", None, line))
    return rows


bench_tracelens_diff.explicit_only = True  # type: ignore[attr-defined]

SECTIONS = [bench_tracelens_diff]
