"""A year of published weekly ladder runs, written into a real S3 server (issue 30, item 2).

Every object is written with the product's own layout and builders: ``storage.layout`` spells
the keys, ``plan.build`` plans the seed ladder (45 rung runs a week), ``summary.build`` /
``stats.history`` / ``summary.render`` make the summaries and ``summary.index`` the index
entries. Per rung run: ``spec.json``, ``metrics.json`` (the runner's fields), ``log.txt.gz``,
its traces (shrunk to one small reference trace, ≤ 64 KB), one analysis folder per trace (the
real analyser's reports of that trace) and, for the multi-rank lenses, ``analysis/ranks/``; then
``manifest.json``. A trace's manifest entry records the size the real trace has
(``REAL_TRACE_BYTES``) and the bytes actually stored as ``stored_size``, so retention figures
can report both.

What is not per week: the charts are rendered once per ladder (matplotlib, the summary task's
own cost, is measured separately) and reused; ``attribution/`` is left to the measured summary
task. Stats per rung differ week to week (seeded noise) so histories and change points work
on real numbers.

Used by ``benchmarks/bench_scale.py`` and ``tests/integration/test_page_load.py``. Generation is
cached by ``GENERATOR_VERSION`` and its size (``cached_year``)."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

GENERATOR_VERSION = 1
SEED_LADDER = "deepseek-v4-flash-mi350x"
FIRST_MONDAY = datetime(2025, 12, 1, 3, 0, tzinfo=timezone.utc)
MAX_TRACE_BYTES = 64 * 1024
PUT_THREADS = 8
# Generator processes, each writing whole ladders (``_write_ladders``); the machine has 2 cores.
GENERATOR_PROCESSES = 2

# What each lens's trace weighs for real, stored (gzip): rocprofv3 writes ~150 MB of JSON per rank
# (~12 MB gzipped), a Primus torch trace ~4 MB gzipped, rocm_trace_lite's db ~20 MB; one seed run
# then stores ~0.46 GB of traces (the "about 0.5 GB").
REAL_TRACE_BYTES = {
    "torch_rank0": 4_000_000,
    "torch_all_ranks": 4_000_000,
    "rocprofv3": 12_000_000,
    "rocm_trace_lite": 20_000_000,
}
RANKS = 8  # one node of 8 GPUs

# Step ms per rung on the seed (the vendor's figures' scale) and the lens costs.
STEP_MS = {
    "baseline": 2350.0,
    "fusions": 2100.0,
    "attn_gluon_v3": 2050.0,
    "attn_turbo": 2040.0,
    "deepep": 1930.0,
    "grouped_gemm": 1800.0,
    "megamoe": 1650.0,
    "recompute_off": 1520.0,
    "gbs16": 2900.0,
    "gbs32": 5600.0,
}
LENS_COST = {"torch_rank0": 1.08, "torch_all_ranks": 1.15, "rocprofv3": 1.4, "rocm_trace_lite": 1.03}


class FilerSink:
    """The product's sink (key checks, sizes and sha256 for the manifests) storing through
    SeaweedFS's filer HTTP API: the same objects in the same bucket as an S3 PUT makes, read back
    through S3, at half the CPU of a signed boto3 PUT (generation only; every measured read is S3)."""

    def __new__(cls, host: str, port: int, bucket: str, prefix: str, ladder: str) -> Any:
        import http.client
        import threading
        from urllib.parse import quote

        from traceladder.storage.artifacts import ArtifactSink, ArtifactStoreError

        local = threading.local()

        class _Sink(ArtifactSink):
            def _conn(self) -> http.client.HTTPConnection:
                if getattr(local, "conn", None) is None:
                    local.conn = http.client.HTTPConnection(host, port, timeout=60)
                return local.conn

            def _store_bytes(self, key: str, data: bytes, content_type: str) -> None:
                for attempt in range(3):
                    try:
                        conn = self._conn()
                        conn.request(
                            "PUT", f"/buckets/{bucket}/{quote(key)}", body=data, headers={"Content-Type": content_type}
                        )
                        resp = conn.getresponse()
                        resp.read()
                    except (OSError, http.client.HTTPException):
                        local.conn = None  # a dropped keep-alive: reconnect
                        if attempt == 2:
                            raise
                        continue
                    if resp.status >= 300:
                        raise ArtifactStoreError(f"filer PUT {key}: HTTP {resp.status}", key)
                    return

            def _store_stream(self, key: str, reader: Any, content_type: str) -> None:
                self._store_bytes(key, reader.read(), content_type)

            def _load_bytes(self, key: str) -> bytes:
                raise NotImplementedError("the generator's sink only writes")

            def _exists(self, key: str) -> bool:
                raise NotImplementedError("the generator's sink only writes")

            def _list(self, prefix: str) -> list[str]:
                raise NotImplementedError("the generator's sink only writes")

            def describe(self, key: str | None = None) -> str:
                return f"filer {host}:{port} /buckets/{bucket}/{key or ''}"

        return _Sink(prefix, ladder)


def _shared() -> Path:
    from testkit.paths import SHARED

    return SHARED


def template_trace() -> Path:
    """The small real trace every generated trace key holds (a GPU trace of the reference set)."""
    path = _shared() / "reference" / "derived" / "gaunernst_bert-small-uncased__1016001__gpu_only.json.gz"
    if not path.is_file():
        raise FileNotFoundError(f"reference trace missing: {path} (TRACELADDER_SHARED names the shared folder)")
    if path.stat().st_size > MAX_TRACE_BYTES:
        raise ValueError(f"{path} is over {MAX_TRACE_BYTES} bytes")
    return path


@dataclass
class Template:
    trace: bytes
    reports: dict[str, bytes]  # the analyser's files for that trace
    analysis: dict[str, Any]
    ranks: dict[str, bytes]  # analysis/ranks/ files of an 8-rank join


def make_template(work: Path) -> Template:
    from traceladder.analysis.analyzers.trace import analyze_trace
    from traceladder.core.documents import RankCollectives

    trace = template_trace()
    out = work / "analysis"
    analysis = analyze_trace(trace, out)
    reports = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}
    # collectives.json as analyze_ranks writes it: the ranks joined, nothing matched
    matched = {"collectives": 0, "events": 0, "all_matched": True}
    ranks_doc = RankCollectives(world_size=RANKS, device=str(analysis.get("device")), matched=matched)
    ranks = {"collectives.json": ranks_doc.to_json().encode()}
    return Template(trace.read_bytes(), reports, json.loads(reports["analysis.json"]), ranks)


def ladder_files(folder: Path, ladders: int, stem: str = "seed") -> list[str]:
    """``<stem>-NN.yaml`` copies of the seed ladder in ``folder`` (TRACELADDER_LADDERS_DIR); their names."""
    from traceladder.config import find_ladder

    text = find_ladder(SEED_LADDER).read_text()
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(ladders):
        name = f"{stem}-{i:02d}"
        (folder / f"{name}.yaml").write_text(text.replace(f"ladder: {SEED_LADDER}", f"ladder: {name}", 1))
        names.append(name)
    return names


def _run_id(week: int) -> tuple[str, str]:
    when = FIRST_MONDAY + timedelta(weeks=week)
    stamp = when.isoformat()
    return f"scheduled__{stamp}".replace(":", "-").replace("+", "-"), stamp


def _trace_names(lens: str) -> list[str]:
    if lens == "torch_rank0":
        return ["rank0.pt.trace.json.gz"]
    if lens == "torch_all_ranks":
        return [f"rank{r}.pt.trace.json.gz" for r in range(RANKS)]
    if lens == "rocprofv3":
        return [f"mi350x-node0.{1000 + r}_results.json.gz" for r in range(RANKS)]
    if lens == "rocm_trace_lite":
        return ["trace.db.gz"]
    return []


def _metrics(spec: dict[str, Any], run_id: str, prefix: str, step: float, traces: list[str]) -> dict[str, Any]:
    """A metrics.json with the runner's fields (runner/rung.py)."""
    gbs = {"gbs16": 16, "gbs32": 32}.get(spec["rung"], 8)
    values = [round(step * (1 + 0.002 * (i - 3)), 3) for i in range(7)]
    return {
        "run_id": run_id,
        **{k: spec.get(k) for k in ("ladder", "rung", "rung_id", "lens", "repeat", "block", "position", "purpose")},
        **{k: spec.get(k) for k in ("switch", "value", "parent")},
        "status": "ok",
        "exit_code": 0,
        "step_ms": step,
        "step_ms_values": values,
        "step_cpu_ms": None,
        "step_cpu_ms_values": [],
        "tokens_per_sec_per_gpu": gbs * 4096 / (step / 1000) / RANKS,
        "tokens_per_cpu_s_per_gpu": None,
        "tflops": round(310.0 * STEP_MS["baseline"] / step, 1),
        "peak_mem_gb": 171.5,
        "iterations_used": list(range(4, 11)),
        "traces": traces,
        "error": None,
        "prefix": prefix,
        "wall_s": round(step * 10 / 1000 + 95, 3),
        "provenance": {  # runner/provenance.py's fields on the docker backend
            "image_digest": "sha256:" + "5e" * 32,
            "image_id": None,
            "rocm_version": "7.1.0",
            "gpu": {"name": "AMD Instinct MI350X", "arch": "gfx950", "count": RANKS},
            "primus_commit": "0f3c2a1",
            "tools": {"torch": "2.10.0", "python": "3.12.3", "rocprofv3": "1.0.0", "rtl": "0.4.1"},
        },
    }


def s3_writer(s3: Any, client: Any, work: Path) -> "YearWriter":
    """A writer for ``s3`` (an EmbeddedS3): generated weeks through its filer, reads through ``client``."""
    from traceladder.storage.artifacts import S3ArtifactStore
    from traceladder.core.layout import DEFAULT_PREFIX

    return YearWriter(
        lambda name: FilerSink(s3.host, s3.ports["filer.port"], s3.bucket, DEFAULT_PREFIX, name),
        DEFAULT_PREFIX,
        make_template(work),
        reader_for=lambda name: S3ArtifactStore(client, s3.bucket, DEFAULT_PREFIX, name),
    )


class YearWriter:
    """Writes runs of the generated ladders; ``store_for(ladder)`` gives a fresh product store."""

    def __init__(
        self,
        store_for: Callable[[str], Any],
        prefix: str,
        template: Template,
        reader_for: Callable[[str], Any] | None = None,
        seed: int = 30,
    ) -> None:
        self.store_for = store_for  # what the generated weeks are written with
        self.reader_for = reader_for or store_for  # a store that also reads (S3)
        self.prefix = prefix
        self.template = template
        self.seed = seed
        self.charts: dict[str, dict[str, bytes]] = {}
        self.pool = ThreadPoolExecutor(PUT_THREADS)
        self._loaded: dict[str, Any] = {}

    def close(self) -> None:
        self.pool.shutdown()

    def _put_all(self, store: Any, items: list[tuple[str, bytes, str]]) -> None:
        for _ in self.pool.map(lambda item: store.put_bytes(*item), items):
            pass

    def plan(self, ladder: str, run_id: str) -> dict[str, Any]:
        from traceladder.config import find_ladder, load_ladder
        from traceladder.plan.build import build_plan, plan_design, resolve_seed

        if ladder not in self._loaded:  # parsing the YAML is most of a plan's cost
            self._loaded[ladder] = load_ladder(find_ladder(ladder))
        loaded = self._loaded[ladder]
        seed = resolve_seed(loaded, run_id)
        specs = build_plan(loaded, seed=seed)
        return {
            "schema": 1,
            "ladder": ladder,
            "run_id": run_id,
            "metric": loaded.ladder.metric,
            "params": {},
            "design": plan_design(specs, seed),
            "specs": [json.loads(s.to_json()) for s in specs],
        }

    def write_rungs(self, ladder: str, week: int, with_summary_inputs: bool = True) -> dict[str, Any]:
        """plan.json and every rung folder of one week's run (what the DAG's rung and analysis
        tasks store); returns the plan, the results and the analyses for the summary."""
        from traceladder.analysis.stored import analysis_prefix, collectives_key
        from traceladder.core import layout
        from traceladder.core.documents import RankCollectives

        run_id, stamp = _run_id(week)
        store = self.store_for(ladder)
        plan = self.plan(ladder, run_id)
        run = layout.run_prefix(self.prefix, ladder, run_id)
        rng = random.Random(f"{self.seed}-{ladder}-{week}")
        drift = 1.0 + (0.06 if week >= 40 and ladder.endswith("1") else 0.0)  # one ladder regresses late
        items: list[tuple[str, bytes, str]] = [
            (f"{run}/{layout.PLAN_OBJECT}", json.dumps(plan, indent=1).encode(), "application/json")
        ]
        results: dict[str, dict[str, Any]] = {}
        analyses: dict[str, dict[str, Any]] = {}
        collectives: dict[str, dict[str, Any]] = {}
        real_sizes: dict[str, int] = {}
        rung_prefixes: list[str] = []
        ranks_folders: list[str] = []
        for spec in plan["specs"]:
            rung = layout.rung_prefix(self.prefix, ladder, run_id, spec["rung_id"])
            rung_prefixes.append(rung)
            step = STEP_MS[spec["rung"]] * LENS_COST.get(spec["lens"], 1.0) * math.exp(rng.gauss(0.0, 0.015))
            step = round(step * (drift if spec["rung"] == "megamoe" else 1.0), 3)
            traces = [layout.trace_key(rung, n) for n in _trace_names(spec["lens"])]
            metrics = _metrics(spec, run_id, rung, step, traces)
            results[spec["rung_id"]] = metrics
            log = "".join(
                f"[Primus] iteration {i:>4}/10 | elapsed time per iteration (ms): {v:.1f}\n"
                for i, v in enumerate((step * (1 + 0.01 * rng.random()) for _ in range(10)), start=1)
            )
            items += [
                (
                    f"{rung}/{layout.SPEC_OBJECT}",
                    json.dumps(spec, indent=2, sort_keys=True).encode(),
                    "application/json",
                ),
                (
                    f"{rung}/{layout.METRICS_OBJECT}",
                    json.dumps(metrics, indent=2, sort_keys=True).encode(),
                    "application/json",
                ),
                (f"{rung}/{layout.LOG_OBJECT}", gzip.compress(log.encode(), mtime=0), "application/gzip"),
            ]
            for key in traces:
                items.append((key, self.template.trace, "application/gzip"))
                real_sizes[key] = REAL_TRACE_BYTES[spec["lens"]]
                folder = analysis_prefix(key)
                for name, body in self.template.reports.items():
                    items.append((f"{folder}/{name}", body, ""))
                analyses[key] = self.template.analysis
            if len([k for k in traces if ".pt.trace.json" in k]) > 1:
                for name, body in self.template.ranks.items():
                    items.append((f"{layout.ranks_prefix(rung)}/{name}", body, ""))
                collectives[spec["rung_id"]] = RankCollectives.from_json(self.template.ranks["collectives.json"])
                ranks_folders.append(layout.ranks_prefix(rung))
                assert collectives_key(rung).startswith(ranks_folders[-1])
        self._put_all(store, items)
        # Manifests last, as the runner and the analysis tasks write them: the analysis folders'
        # own, then the rung's (which covers everything under it, traces at their real size).
        folders = {analysis_prefix(k) for r in results.values() for k in r["traces"]}
        folders |= set(ranks_folders)
        manifests = [(f, store.manifest_for(f)) for f in sorted(folders)]
        for rung in rung_prefixes:
            doc = store.manifest_for(rung)
            entries = [
                replace(o, stored_size=o.size, size=real_sizes[o.key]) if o.key in real_sizes else o
                for o in doc.objects
            ]
            manifests.append((rung, replace(doc, objects=entries)))
        self._put_all(
            store,
            [(f"{f}/{layout.MANIFEST_NAME}", d.to_json().encode(), "application/json") for f, d in manifests],
        )
        return {
            "store": store,
            "plan": plan,
            "run": run,
            "stamp": stamp,
            "results": results,
            "analyses": analyses,
            "collectives": collectives,
        }

    def write_summary(
        self, ladder: str, week: int, written: dict[str, Any], earlier: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The summary folder and the index entry of one run, as the summary and publish tasks
        store them (history over ``earlier`` entries in memory: the same evaluate call)."""
        from traceladder.stats.history import evaluate, regression_lines, run_points
        from traceladder.core import layout
        from traceladder.core.documents import TraceAnalysis
        from traceladder.summary import index as run_index
        from traceladder.summary.build import build_summary, findings
        from traceladder.summary.render.charts import render_charts
        from traceladder.summary.render.html import to_html
        from traceladder.summary.render.markdown import to_markdown
        from traceladder.summary.render.perf_csv import perf_csv
        from testkit.results import typed
        from traceladder.core.documents import IndexEntry

        store, plan, run = written["store"], written["plan"], written["run"]
        analyses = {key: TraceAnalysis.from_dict(doc) for key, doc in written["analyses"].items()}
        results = typed(written["results"])
        summary = build_summary(plan, results, analyses, written["collectives"])
        summary["attribution"] = []
        points = run_points(summary)
        current = IndexEntry(
            run_id=plan["run_id"], logical_date=written["stamp"], published_at=written["stamp"], points=points
        )
        history = evaluate([IndexEntry.from_dict(e) for e in earlier] + [current])
        summary["history"] = history.to_dict()
        summary["findings"] = findings(summary)
        if ladder not in self.charts:
            self.charts[ladder] = render_charts(summary)
        charts = self.charts[ladder]
        base = layout.summary_prefix(run)
        items = [(layout.chart_key(run, name), png, "image/png") for name, png in charts.items()]
        items += [
            (f"{base}/{layout.SUMMARY_JSON}", json.dumps(summary, indent=1).encode(), "application/json"),
            (f"{base}/{layout.SUMMARY_MD}", to_markdown(summary).encode(), "text/markdown"),
            (f"{base}/{layout.REPORT_HTML}", to_html(summary, charts).encode(), "text/html"),
            (f"{base}/{layout.PERF_CSV}", perf_csv(plan, results).encode(), "text/csv"),
        ]
        self._put_all(store, items)
        store.write_manifest(base)
        ref = {
            "params": {},
            "unanalysed_traces": [],
            "run_id": plan["run_id"],
            "summary_json": f"{base}/{layout.SUMMARY_JSON}",
            "summary_md": f"{base}/{layout.SUMMARY_MD}",
            "report_html": f"{base}/{layout.REPORT_HTML}",
            "failed_rungs": summary["failed_rungs"],
            "logical_date": written["stamp"],
            "points": points.to_dict(),
            "regressions": sorted({r.rung for r in history.regressions}),
            "regression_calls": regression_lines(history),
            "provenance_changes": history.since_last.provenance_changes if history.since_last else [],
        }
        from traceladder.core.documents import SummaryRef

        entry = run_index.put_entry(store, layout.ladder_prefix(self.prefix, ladder), SummaryRef.from_dict(ref))
        return {**entry.to_dict(), "logical_date": written["stamp"]}

    def write_ladder(self, ladder: str, weeks: int, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
        from traceladder.core import layout
        from traceladder.summary import index as run_index

        entries: list[dict[str, Any]] = []
        for week in range(weeks):
            written = self.write_rungs(ladder, week)
            entries.append(self.write_summary(ladder, week, written, entries))
            if week % 13 == 12:
                log(f"year: {ladder} week {week + 1}/{weeks}")
        if entries:
            run_index.update_latest(self.reader_for(ladder), layout.ladder_prefix(self.prefix, ladder))
        return entries


def object_count(client: Any, bucket: str, prefix: str) -> tuple[int, int]:
    """(objects, bytes) stored under ``prefix/``."""
    count = size = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/"):
        for obj in page.get("Contents", []) or []:
            count += 1
            size += int(obj["Size"])
    return count, size


def cache_key(ladders: int, weeks: int) -> str:
    trace = template_trace()
    digest = hashlib.sha256(trace.read_bytes()).hexdigest()[:12]
    return f"v{GENERATOR_VERSION}-{ladders}x{weeks}-{digest}"


@dataclass
class Year:
    """A generated year on disk: the SeaweedFS folder, the ladder files and what generating took."""

    root: Path
    ladders: list[str]
    weeks: int
    seconds: float
    objects: int
    bytes: int

    @property
    def s3_dir(self) -> Path:
        return self.root / "s3"

    @property
    def ladders_dir(self) -> Path:
        return self.root / "ladders"


def _write_ladders_in_process(
    s3: Any, names: list[str], weeks: int, log: Callable[[str], None], done: Any = None
) -> None:
    """Write whole ladders, one after another, through one writer (its own put pool)."""
    client = s3.client(max_pool_connections=PUT_THREADS * 2)
    with tempfile.TemporaryDirectory(prefix="tl-year-") as work:
        writer = s3_writer(s3, client, Path(work))
        try:
            for name in names:
                writer.write_ladder(name, weeks, log)
                if done is not None:
                    done.put(name)
        finally:
            writer.close()


def _ladder_worker(endpoint: dict[str, Any], ladders_dir: str, names: list[str], weeks: int, done: Any) -> None:
    """A generator process (spawned): the same writes as in-process, for its share of the ladders."""
    import os

    os.environ["TRACELADDER_LADDERS_DIR"] = ladders_dir
    _write_ladders_in_process(_RunningS3(**endpoint), names, weeks, lambda line: print(line, flush=True), done)


@dataclass
class _RunningS3:
    """What a generator process needs of the parent's EmbeddedS3 (which it must not start or stop)."""

    host: str
    ports: dict[str, int]
    bucket: str
    env: dict[str, str]  # EmbeddedS3.env(): the endpoint and the keys, handed over, never printed

    def client(self, **config: Any) -> Any:
        from traceladder.storage.artifacts import s3_client_from_env

        return s3_client_from_env(self.env, **{"read_timeout": 60, **config})


def _write_ladders(s3: Any, names: list[str], weeks: int, workers: int, log: Callable[[str], None]) -> None:
    """Every ladder written, ``workers`` processes at a time: one process's serial steps (a week's
    summary, history and renderers; manifests) overlap another's puts, which one process under
    the GIL cannot do. Each ladder is one process's whole job, so what it writes (seeded per
    ladder and week) does not depend on the split."""
    import multiprocessing

    workers = max(1, min(workers, len(names)))
    if workers == 1:
        _write_ladders_in_process(s3, names, weeks, log)
        return
    import os

    endpoint = {"host": s3.host, "ports": dict(s3.ports), "bucket": s3.bucket, "env": s3.env()}
    ctx = multiprocessing.get_context("spawn")  # the parent runs threads (the S3 server's readers)
    done = ctx.Queue()
    shares = [names[i::workers] for i in range(workers)]
    procs = [
        ctx.Process(
            target=_ladder_worker,
            args=(endpoint, os.environ["TRACELADDER_LADDERS_DIR"], share, weeks, done),
            name=f"year-writer-{i}",
        )
        for i, share in enumerate(shares)
    ]
    for proc in procs:
        proc.start()
    try:
        for proc in procs:
            proc.join()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"year generation: {', '.join(failed)} exited non-zero (see its output above)")
    written = []
    while not done.empty():
        written.append(done.get())
    if sorted(written) != sorted(names):
        raise RuntimeError(f"year generation: ladders not written: {sorted(set(names) - set(written))}")


def generate(
    root: Path, ladders: int, weeks: int, log: Callable[[str], None] = print, workers: int = GENERATOR_PROCESSES
) -> Year:
    """Generate into ``root`` (a fresh SeaweedFS folder there); stops the server when done."""
    import os

    from traceladder.embedded.embedded_s3 import EmbeddedS3
    from traceladder.core.layout import DEFAULT_PREFIX

    root.mkdir(parents=True, exist_ok=True)
    names = ladder_files(root / "ladders", ladders)
    old = os.environ.get("TRACELADDER_LADDERS_DIR")
    os.environ["TRACELADDER_LADDERS_DIR"] = str(root / "ladders")  # find_ladder reads the generated files
    s3 = EmbeddedS3(root / "s3", bucket="traceladder")
    s3.start()
    try:
        client = s3.client(max_pool_connections=PUT_THREADS * 2)
        t0 = time.perf_counter()
        _write_ladders(s3, names, weeks, workers, log)
        seconds = time.perf_counter() - t0
        objects, size = object_count(client, s3.bucket, DEFAULT_PREFIX)
    finally:
        s3.stop()
        if old is None:
            os.environ.pop("TRACELADDER_LADDERS_DIR", None)
        else:
            os.environ["TRACELADDER_LADDERS_DIR"] = old
    year = Year(root, names, weeks, seconds, objects, size)
    (root / "year.json").write_text(
        json.dumps({"ladders": names, "weeks": weeks, "seconds": seconds, "objects": objects, "bytes": size})
    )
    return year


def cached_year(ladders: int, weeks: int, cache_root: Path | None = None, log: Callable[[str], None] = print) -> Year:
    """The generated year under ``cache_root`` (default /var/tmp/traceladder-scale), made once per
    generator version and size."""
    base = cache_root or Path("/var/tmp/traceladder-scale")  # noqa: S108 - a cache that outlives the run
    root = base / cache_key(ladders, weeks)
    meta = root / "year.json"
    if meta.is_file():
        doc = json.loads(meta.read_text())
        return Year(root, doc["ladders"], doc["weeks"], doc["seconds"], doc["objects"], doc["bytes"])
    if root.exists():
        shutil.rmtree(root)  # an interrupted generation
    return generate(root, ladders, weeks, log)
