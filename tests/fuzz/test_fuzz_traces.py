"""PyTorch profiler trace headers and event records, and rocprofv3 CSV rows, fuzzed from real
traces: analysis either writes its reports, or raises `TraceError` whose text is one line that
starts with the file (`traceladder analyze` prints it and exits 2)."""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testkit.rocprof_files import KERNEL_TRACE_TIMES
from tests.conftest import REFERENCE_DIR
from traceladder.analysis.analyzers.trace import analyze_trace
from traceladder.analysis.model.events import TraceError
from traceladder.analysis.readers import pytorch_json as pj

from .common import assert_one_line, cli_contract, fuzz_settings

pytestmark = [pytest.mark.faults, pytest.mark.fuzz]

BERT = REFERENCE_DIR / "derived" / "gaunernst_bert-small-uncased__1016001__gpu_only.json.gz"

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["X", "i", "M", "kernel", "cpu_op", "ProfilerStep#3", "nccl:all_reduce", "1e400"]),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(
        st.sampled_from(["External id", "correlation", "stream", "device", "Input Dims", "Input type"]),
        st.integers(-1, 9) | st.text(max_size=4),
        max_size=3,
    ),
)


def _contract(path: Path, out: Path) -> None:
    try:
        analyze_trace(path, out)
    except TraceError as exc:
        assert_one_line(str(exc), starts_with=str(path))


@pytest.fixture(scope="module")
def bert() -> dict[str, Any]:
    if not BERT.is_file():
        pytest.fail(f"{BERT}: reference trace missing (../shared must sit beside the repo)")
    doc = json.loads(gzip.decompress(BERT.read_bytes()))
    doc["metadata"] = {}  # the original's metadata is large and the readers ignore it
    return doc


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-traces")


HEADER_KEYS = [
    "traceEvents",
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "traceName",
]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp"]


@fuzz_settings(60)
@given(data=st.data())
def test_pytorch_trace_headers(bert: dict[str, Any], tmp: Path, data: st.DataObject) -> None:
    doc = dict(bert)
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(HEADER_KEYS))
        if data.draw(st.booleans()):
            doc.pop(key, None)
        else:
            doc[key] = data.draw(VALUES | st.just([{"rank": 0, "world_size": 2}]))
    path = tmp / "header.json"
    path.write_text(json.dumps(doc))
    _contract(path, tmp / "out-header")


@fuzz_settings(80)
@given(data=st.data())
def test_pytorch_event_records(bert: dict[str, Any], tmp: Path, data: st.DataObject) -> None:
    events = copy.deepcopy(bert["traceEvents"])
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(events) - 1))
        op = data.draw(st.sampled_from(["set", "drop_key", "drop_event", "replace_event"]))
        ev = events[i]
        if op == "drop_event":
            del events[i]
        elif op == "replace_event":
            events[i] = data.draw(VALUES)
        elif isinstance(ev, dict):
            key = data.draw(st.sampled_from(EVENT_KEYS))
            if op == "drop_key":
                ev.pop(key, None)
            else:
                ev[key] = data.draw(VALUES)
        if not events:
            break
    path = tmp / "events.json"
    path.write_text(json.dumps({**bert, "traceEvents": events}, allow_nan=True))
    _contract(path, tmp / "out-events")


def test_args_that_are_no_object_link_nothing(bert: dict[str, Any], tmp: Path) -> None:
    """Found by the fuzzer in CI: a runtime event whose args is null, beside a kernel whose args is a
    string, made the link decode raise (an internal error); now such events just link nothing."""
    events = copy.deepcopy(bert["traceEvents"])
    next(e for e in events if isinstance(e, dict) and e.get("cat") == "cuda_runtime")["args"] = None
    next(e for e in events if isinstance(e, dict) and e.get("cat") == "kernel")["args"] = "x"
    path = tmp / "null-args.json"
    path.write_text(json.dumps({**bert, "traceEvents": events}))
    result = analyze_trace(path, tmp / "out-null-args")
    assert result["timeline"]["total_time"] > 0


def test_an_unhashable_name_pid_or_tid_is_kept_as_text(bert: dict[str, Any], tmp: Path) -> None:
    """Found by the fuzzer run with random seeds (issue 19's flaky event-records test): a name, pid
    or tid that is a JSON object or array made the reader's interning raise TypeError (unhashable),
    an internal error; such a value now stands for itself as text."""
    events = copy.deepcopy(bert["traceEvents"])
    kernels = [e for e in events if isinstance(e, dict) and e.get("cat") == "kernel"]
    runtime = next(e for e in events if isinstance(e, dict) and e.get("cat") == "cuda_runtime")
    kernels[0]["tid"] = {"stream": 7}
    kernels[1]["name"] = ["Cijk_gemm"]
    runtime["pid"] = [1, 2]
    path = tmp / "unhashable.json"
    path.write_text(json.dumps({**bert, "traceEvents": events}))
    result = analyze_trace(path, tmp / "out-unhashable")
    assert result["timeline"]["total_time"] > 0


@pytest.mark.parametrize("value", [2**65, 2**63, -(2**64), 1e300, "0x1" + "0" * 20, {"x": 1}])
def test_an_id_past_int64_or_of_no_scalar_type_links_nothing(bert: dict[str, Any], tmp: Path, value: Any) -> None:
    """Found by the fuzzer run with random seeds: a flow ``id``, ``correlation`` or ``External id``
    past int64 (or infinite, or an object) raised OverflowError / TypeError in the reader, an
    internal error; such an id now counts as absent."""
    events = copy.deepcopy(bert["traceEvents"])
    flow = next(e for e in events if isinstance(e, dict) and e.get("cat") == "ac2g")
    kernel = next(e for e in events if isinstance(e, dict) and e.get("cat") == "kernel")
    runtime = next(e for e in events if isinstance(e, dict) and e.get("cat") == "cuda_runtime")
    flow["id"] = value
    kernel["args"] = {**kernel.get("args", {}), "correlation": value, "stream": value}
    runtime["args"] = {**runtime.get("args", {}), "External id": value}
    path = tmp / "big-id.json"
    path.write_text(json.dumps({**bert, "traceEvents": events}))
    result = analyze_trace(path, tmp / "out-big-id")
    assert result["timeline"]["total_time"] > 0


CSV_HEADER = KERNEL_TRACE_TIMES
CELL = st.one_of(
    st.integers(-5, 10**20).map(str),
    st.text(max_size=6),
    st.sampled_from(["", "nan", "1.5", "-1", "1e30", '"', "a,b", "0x10"]),
)


def _good_row(i: int) -> list[str]:
    start = 1_000_000 + 1000 * i
    return [
        "KERNEL_DISPATCH",
        "1",
        "0",
        "0",
        "7",
        str(i),
        "3",
        f"Cijk_Alik_Bljk_{i % 3}",
        str(i + 1),
        str(start),
        str(start + 400),
    ]


@fuzz_settings(80)
@given(data=st.data())
def test_rocprofv3_csv_rows(tmp: Path, data: st.DataObject) -> None:
    header = list(CSV_HEADER)
    if data.draw(st.integers(0, 4)) == 0:  # sometimes a damaged header too
        header[data.draw(st.integers(0, len(header) - 1))] = data.draw(st.text(max_size=8))
    rows = [_good_row(i) for i in range(data.draw(st.integers(0, 6)))]
    for _ in range(data.draw(st.integers(0, 5))):
        if not rows:
            break
        row = rows[data.draw(st.integers(0, len(rows) - 1))]
        if not row:
            continue
        op = data.draw(st.sampled_from(["cell", "short", "long"]))
        if op == "cell":
            row[data.draw(st.integers(0, len(row) - 1))] = data.draw(CELL)
        elif op == "short":
            del row[data.draw(st.integers(0, len(row) - 1)) :]
        else:
            row.append(data.draw(CELL))
    buf = io.StringIO()
    w = csv.writer(buf, quoting=data.draw(st.sampled_from([csv.QUOTE_ALL, csv.QUOTE_MINIMAL])), lineterminator="\n")
    w.writerows([header, *rows])
    path = tmp / "908_kernel_trace.csv"
    path.write_bytes(buf.getvalue().encode())
    _contract(path, tmp / "out-csv")
    if data.draw(st.integers(0, 9)) == 0:  # and, now and then, through the CLI itself
        cli_contract(["analyze", str(path), "--out", str(tmp / "out-cli")], "error: " + str(path))


def _table_or_error(path: Path, split: bool) -> tuple:
    try:
        t = pj.read_pytorch_json(path, split=split)
    except TraceError as exc:
        return ("error", str(exc))
    cols = tuple(
        getattr(t, k).tolist() for k in ("cat", "ph", "name", "pid", "tid", "flow_id", "corr", "ext", "stream")
    )
    times = tuple(repr(x) for x in t.ts.tolist() + t.dur.tolist())  # repr: nan == nan
    tables = (t.cats, t.phs, t.names, t.pids, t.tids, t.streams)
    return ("table", cols, times, repr(tables), [bytes(r) for r in t.raw_args], repr(t.metadata))


@fuzz_settings(40)
@given(data=st.data())
def test_split_read_equals_one_process(bert: dict[str, Any], tmp: Path, data: st.DataObject) -> None:
    """Fuzzed records, read by two processes (pytorch_json._read_split) and by one: the same
    table, or the same error."""
    events = copy.deepcopy(bert["traceEvents"])
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(events) - 1))
        ev = events[i]
        if isinstance(ev, dict):
            ev[data.draw(st.sampled_from(EVENT_KEYS))] = data.draw(VALUES)
        else:
            events[i] = data.draw(VALUES)
    path = tmp / "split.json"
    path.write_text(json.dumps({**bert, "traceEvents": events}, allow_nan=True))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pj, "SPLIT_MIN_BYTES", 0)
        mp.setattr(pj, "CHUNK_BYTES", 64 << 10)
        assert _table_or_error(path, True) == _table_or_error(path, False)
