"""The analysis task's path (analysis/stored.py -> analysis/spawned.py): a spawned interpreter,
started from a process that has threads (as an Airflow task runner has), writes the same
reports as one process; a bad trace fails with the same one line; no child outlives its use."""

from __future__ import annotations

import gzip
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from traceladder.analysis.analyzers.trace import analyze_trace
from traceladder.analysis.model.events import TraceError
from traceladder.analysis.spawned import InProcessAnalysis, SpawnedAnalysis, analysis_runner
from traceladder.analysis.stored import analysis_prefix, analyze_stored
from traceladder.storage.artifacts import DirArtifactSink
from tests.conftest import REFERENCE_DIR

REF = REFERENCE_DIR / "tracelens-v1.0.0"
TRACE = REF / "mi300" / "gaunernst_bert-small-uncased__1016001.json.gz"
RUNG = "traceladder/lad/run1/r0"


@pytest.fixture
def threads() -> Iterator[None]:
    """A thread of the caller's own, alive while the test runs, as in an Airflow task."""
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    yield
    stop.set()
    t.join()


def _store(tmp_path: Path, name: str, data: bytes) -> tuple[DirArtifactSink, str]:
    tmp_path.mkdir(exist_ok=True)
    store = DirArtifactSink(tmp_path / "store")
    src = tmp_path / name
    src.write_bytes(data)
    key = f"{RUNG}/traces/{name}"
    store.put_file(key, src)
    store.write_manifest(RUNG)
    return store, key


def _reports(store: DirArtifactSink, key: str) -> dict[str, bytes]:
    folder = Path(store.describe(analysis_prefix(key)))
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_spawned_task_path_writes_the_files_of_one_process(tmp_path: Path, threads: None) -> None:
    assert TRACE.is_file(), "reference traces not found"
    store, key = _store(tmp_path / "a", "rank0.pt.trace.json.gz", TRACE.read_bytes())
    alone, _ = _store(tmp_path / "b", "rank0.pt.trace.json.gz", TRACE.read_bytes())
    assert analyze_stored(store, key, spawn=True) == analyze_stored(alone, key, spawn=False)
    got, want = _reports(store, key), _reports(alone, key)
    assert len(want) > 10 and "unified_perf_summary.csv" in want and "headroom.csv" in want
    assert got == want
    # the analysis.json the task returns is the in-process one, through the child's JSON
    with analysis_runner(spawn=True) as runner:
        assert runner.run(TRACE, tmp_path / "again") == analyze_trace(TRACE, tmp_path / "one")


@pytest.mark.parametrize(
    "source,name",
    [
        (TRACE, "rank0.pt.trace.json.gz"),
        (TRACE, "rank0.pt.trace.json"),  # stored gunzipped: the plain in-memory path
        (REF / "rocprof" / "908_results.json.gz", "rank0_results.json.gz"),
    ],
)
def test_the_task_reads_the_verified_download_as_the_cli_reads_the_file(
    tmp_path: Path, source: Path, name: str
) -> None:
    # in one process, the task analyses the downloaded bytes in memory (no temporary file)
    data = source.read_bytes() if name.endswith(".gz") else gzip.decompress(source.read_bytes())
    store, key = _store(tmp_path / "task", name, data)
    result = analyze_stored(store, key, spawn=False)
    local = tmp_path / name
    local.write_bytes(data)
    expected = analyze_trace(local, tmp_path / "cli")
    assert result["device"] == expected["device"]
    got = {name: body for name, body in _reports(store, key).items() if name != "manifest.json"}
    want = {p.name: p.read_bytes() for p in sorted((tmp_path / "cli").iterdir())}
    assert len(want) >= 3 and got == want


def test_bad_trace_fails_with_one_line_naming_the_stored_object(tmp_path: Path, threads: None) -> None:
    truncated = gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel"')[:-7]
    store, key = _store(tmp_path, "rank0.pt.trace.json.gz", truncated)
    with pytest.raises(TraceError) as spawned:
        analyze_stored(store, key, spawn=True)
    with pytest.raises(TraceError) as one:
        analyze_stored(store, key, spawn=False)
    assert str(spawned.value) == str(one.value)
    assert str(spawned.value).startswith(store.describe(key) + ": ")
    assert "\n" not in str(spawned.value)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_no_child_outlives_its_runner(tmp_path: Path) -> None:
    with SpawnedAnalysis() as runner:  # never given work: killed and reaped on leaving
        assert runner.proc is not None
        pid = runner.proc.pid
    assert _gone(pid)
    with pytest.raises(ValueError, match="caller failed"), SpawnedAnalysis() as runner:
        assert runner.proc is not None
        pid = runner.proc.pid
        raise ValueError("the caller failed first")
    assert _gone(pid)
    # a child killed under the caller (the OOM killer) is an error with its exit status
    runner = SpawnedAnalysis()
    assert runner.proc is not None
    runner.proc.kill()
    with pytest.raises(RuntimeError, match=r"stopped with no result \(exit code -9\)"):
        runner.run(TRACE, tmp_path / "x")
    with pytest.raises(RuntimeError, match="already used"):
        runner.run(TRACE, tmp_path / "x")


def test_one_cpu_keeps_to_one_process() -> None:
    with analysis_runner(spawn=False) as runner:
        assert isinstance(runner, InProcessAnalysis)


def test_truncated_gzip_is_not_read_into_its_bogus_size(tmp_path: Path) -> None:
    """A truncated gzip's last 4 bytes (read as the size, ISIZE) are any bytes: up to 4 GiB
    was allocated (and zeroed, ~10 s) before the truncation showed."""
    import tracemalloc

    from traceladder.analysis.readers.pytorch_json import load_bytes

    bad = tmp_path / "t.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [' + b'{"ph": "X"},' * 1000)[:-9] + b"\xff\xff\xff\xfe")
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match="truncated gzip stream"):
            load_bytes(bad)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 << 20


def test_one_allowed_cpu_is_never_free() -> None:
    from traceladder.analysis.spawned import cpu_free_now

    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        assert not cpu_free_now()
    finally:
        os.sched_setaffinity(0, allowed)


def test_mapped_rocprof_json_in_batches_reads_as_its_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain rocprofv3 JSON is decoded from the mapped file, its dispatches a batch at a time
    with the file's pages dropped between batches: the reports are those of the same trace
    gzipped (read whole into memory)."""
    from tests.unit.core.test_child_process import _small_rocprof
    from traceladder.analysis.readers import rocprof_json

    trace = _small_rocprof(tmp_path)  # 2,500 dispatches of the reference
    (tmp_path / "packed_results.json.gz").write_bytes(gzip.compress(trace.read_bytes(), 1))
    monkeypatch.setattr(rocprof_json, "_DISPATCH_BATCH", 300)
    plain = analyze_trace(trace, tmp_path / "plain")
    packed = analyze_trace(tmp_path / "packed_results.json.gz", tmp_path / "packed")
    assert plain["top_ops"] and plain["top_ops"] == packed["top_ops"]
    got = {p.name: p.read_bytes() for p in (tmp_path / "plain").glob("*.csv")}
    assert len(got) == 3
    assert got == {p.name: p.read_bytes() for p in (tmp_path / "packed").glob("*.csv")}
