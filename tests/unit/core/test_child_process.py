"""The reports split over two processes (core/child_process.py's fork, bound to TraceError by
analysis/model/events.py beside): the same files as one process, and a failure in the child is
raised in the parent, with no child left behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_DIR
from traceladder.cli.analyze import analyze_paths
from traceladder.analysis.analyzers import trace as engine
from traceladder.analysis.model.events import beside
from traceladder.core.child_process import Forked, spare_cpu
from traceladder.analysis.analyzers.trace import analyze_trace
from traceladder.analysis.model.events import TraceError

REF = REFERENCE_DIR / "tracelens-v1.0.0"
TRACE = REF / "mi300" / "resnet_act_checkpoint.json.gz"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_split_writes_the_same_files(tmp_path):
    assert TRACE.is_file(), "reference traces not found"
    one = analyze_trace(TRACE, tmp_path / "one", split=False)
    two = analyze_trace(TRACE, tmp_path / "two", split=True)
    assert one == two
    a, b = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert "unified_perf_summary.csv" in b and len(b) > 10
    assert a == b


def test_child_trace_error_is_raised_in_parent(tmp_path):
    def work():
        raise TraceError("x.json", "bad shapes")

    with beside(work, Path("/data/t.json"), enabled=True) as side:
        assert side.pid > 0
        with pytest.raises(TraceError, match=r"^/data/t.json: bad shapes$"):
            side.result()


def test_child_crash_is_raised_in_parent():
    def work():
        raise ValueError("boom")

    with beside(work, Path("t.json"), enabled=True) as side:
        with pytest.raises(RuntimeError, match=r"in the second analysis process: ValueError: boom"):
            side.result()

    def die():
        os._exit(3)

    with beside(die, Path("t.json"), enabled=True) as side:
        with pytest.raises(RuntimeError, match=r"no result \(exit code 3\)"):
            side.result()


def test_parent_failure_stops_the_child():
    side = None
    with pytest.raises(KeyError):
        with beside(lambda: {"slept": time.sleep(30)}, Path("t.json"), enabled=True) as side:
            raise KeyError("parent failed first")
    assert side is not None and side.pid == 0 and side.fd == -1  # killed and reaped


def test_disabled_runs_inline():
    calls = []
    side = Forked(lambda: calls.append(1) or {"n": len(calls)}, enabled=False)
    assert side.pid == 0 and calls == []
    assert side.result() == {"n": 1}


def test_cli_splits_only_one_trace_at_a_time(tmp_path, monkeypatch):
    seen: list[bool] = []
    real = engine.analyze_trace

    def spy(trace, out, split=False, **options):  # options: the roofline's share and GPU model
        seen.append(split)
        return real(trace, out, split=split, **options)

    monkeypatch.setattr(engine, "analyze_trace", spy)
    assert analyze_paths([TRACE], tmp_path / "a") == 0
    assert seen == [spare_cpu()]


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def test_failed_fork_runs_the_work_here(monkeypatch):
    before = _open_fds()

    def no_fork():
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", no_fork)
    with beside(lambda: {"ran": os.getpid()}, Path("t.json"), enabled=True) as side:
        assert side.pid == 0
        assert side.result() == {"ran": os.getpid()}
    assert _open_fds() == before  # the pipe was closed


def test_child_killed_mid_way_is_no_result():
    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    with beside(die, Path("t.json"), enabled=True) as side:
        with pytest.raises(RuntimeError, match=r"no result \(signal 9\)"):
            side.result()
        with pytest.raises(RuntimeError, match="already taken"):
            side.result()


def test_read_split_falls_back_when_its_child_dies(monkeypatch, tmp_path):
    """A reader child killed (say, by the out-of-memory killer) costs the split, not the trace."""
    from traceladder.analysis.readers import pytorch_json as pj

    monkeypatch.setattr(pj, "SPLIT_MIN_BYTES", 0)
    real = pj._Columns.export

    def killed(self, shm):
        os.kill(os.getpid(), signal.SIGKILL)
        return real(self, shm)

    monkeypatch.setattr(pj._Columns, "export", killed)
    t = pj.read_pytorch_json(TRACE, split=True)
    monkeypatch.setattr(pj._Columns, "export", real)
    assert len(t) == len(pj.read_pytorch_json(TRACE))


def test_parent_failure_leaves_no_unified_part(tmp_path, monkeypatch):
    from traceladder.analysis.reports import short_kernels

    def broken(*args, **kwargs):
        time.sleep(0.5)  # the child is mid-way or done
        raise ValueError("a report failed")

    monkeypatch.setattr(short_kernels, "write_csvs", broken)
    with pytest.raises(ValueError, match="a report failed"):
        analyze_trace(TRACE, tmp_path / "out", split=True)
    assert not [p.name for p in (tmp_path / "out").iterdir() if "unified" in p.name]


def _small_rocprof(tmp_path: Path, dispatches: int = 2500, broken_at: int | None = None) -> Path:
    import gzip

    import orjson

    doc = orjson.loads(gzip.decompress((REF / "rocprof" / "908_results.json.gz").read_bytes()))
    records = doc["rocprofiler-sdk-tool"][0]["buffer_records"]
    records["kernel_dispatch"] = records["kernel_dispatch"][:dispatches]
    if broken_at is not None:
        records["kernel_dispatch"][broken_at]["end_timestamp"] = "late"
    trace = tmp_path / "small_results.json"
    trace.write_bytes(orjson.dumps(doc))
    return trace


@pytest.fixture
def rocprof_split(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Small batches, the split on from 4 of them; the file it returns gets a line per decoded
    part: the pid that decoded it and the part's length."""
    from traceladder.analysis.readers import rocprof_json

    monkeypatch.setattr(rocprof_json, "_DISPATCH_BATCH", 300)
    monkeypatch.setattr(rocprof_json, "SPLIT_MIN_DISPATCHES", 1200)
    pids = tmp_path / "pids"
    real = rocprof_json._dispatch_columns

    def noted(*args):
        with pids.open("a") as fh:
            fh.write(f"{os.getpid()} {len(args[1])}\n")
        return real(*args)

    monkeypatch.setattr(rocprof_json, "_dispatch_columns", noted)
    return pids


_TABLE_ARRAYS = ("cat", "name", "pid", "tid", "stream", "corr", "ts", "dur")


def _same_table(a, b) -> None:
    """Row by row: every column, the values the codes stand for, and the exact nanoseconds."""
    import numpy as np

    assert len(a) == len(b)
    for col in _TABLE_ARRAYS:
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert (a.names, a.pids, a.tids, a.streams, a.cats) == (b.names, b.pids, b.tids, b.streams, b.cats)
    for ns in ("ns_start", "ns_end"):
        assert np.array_equal(a.metadata[ns], b.metadata[ns]), ns


def test_rocprof_split_reads_the_same_table_and_writes_the_same_files(tmp_path, rocprof_split):
    """A big rocprofv3 JSON's dispatches are decoded in part by a forked child: the same table
    row by row, and the same reports."""
    from traceladder.analysis.readers import rocprof_json

    trace = _small_rocprof(tmp_path)
    one = rocprof_json.read_rocprof_json(trace, trace.read_bytes())
    rocprof_split.unlink()
    two = rocprof_json.read_rocprof_json(trace, trace.read_bytes(), split=True)
    parts = [line.split() for line in rocprof_split.read_text().splitlines()]
    # two parts, each decoded once, by two processes: the child's own half was used
    assert len(parts) == 2 and len({pid for pid, _ in parts}) == 2
    assert sorted(int(n) for _, n in parts) == [1000, 1500]
    _same_table(one, two)
    reports = [analyze_trace(trace, tmp_path / name, split=name == "two") for name in ("one", "two")]
    assert reports[0] == reports[1] and reports[0]["top_ops"]
    files = _files(tmp_path / "two")
    assert len(files) == 4 and files == _files(tmp_path / "one")


def test_rocprof_split_error_in_the_childs_half_reads_as_in_one_process(tmp_path, rocprof_split):
    trace = _small_rocprof(tmp_path, broken_at=2300)
    with pytest.raises(TraceError) as one:
        analyze_trace(trace, tmp_path / "one", split=False)
    with pytest.raises(TraceError) as two:
        analyze_trace(trace, tmp_path / "two", split=True)
    assert "kernel_dispatch" in str(two.value) and "$[200].end_timestamp" in str(two.value)
    assert str(one.value) == str(two.value)


def test_rocprof_split_falls_back_when_its_child_dies(tmp_path, rocprof_split, monkeypatch):
    from traceladder.analysis.readers import rocprof_json

    trace = _small_rocprof(tmp_path)
    whole = rocprof_json.read_rocprof_json(trace, trace.read_bytes())
    parent, real = os.getpid(), rocprof_json._dispatch_columns

    def killed_in_child(*args):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args)

    monkeypatch.setattr(rocprof_json, "_dispatch_columns", killed_in_child)
    split = rocprof_json.read_rocprof_json(trace, trace.read_bytes(), split=True)
    assert len(whole) == 2500
    _same_table(whole, split)
