"""The chunked PyTorch JSON reader, GEMM.csv rules and collective extraction."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REFERENCE_DIR
from traceladder.cli.analyze import analyze_paths
from traceladder.analysis.analyzers import trace as engine
from traceladder.analysis.model.events import MISSING, TraceError
from traceladder.analysis.readers import pytorch_json as pj
from traceladder.analysis.reports import coll_analysis as ca

REF = REFERENCE_DIR / "tracelens-v1.0.0"
RESNET = REF / "mi300" / "resnet_act_checkpoint.json.gz"


def _columns(t):
    return {
        k: getattr(t, k)
        for k in ("cat", "ph", "name", "pid", "tid", "ts", "dur", "flow_id", "corr", "ext", "stream", "has_args")
    }


def test_chunked_read_equals_one_piece(monkeypatch):
    assert RESNET.exists(), "reference traces not found"
    whole = pj.read_pytorch_json(RESNET)
    monkeypatch.setattr(pj, "CHUNK_BYTES", 64 << 10)  # ~260 chunks
    parts = pj.read_pytorch_json(RESNET)
    # every event, metadata included, less the python_function ones (dropped at read)
    assert len(parts) == len(whole) == 56451 - 34405
    assert parts.metadata["skipped_events"] == 34405
    for k, a in _columns(whole).items():
        b = getattr(parts, k)
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
            np.testing.assert_array_equal(a[~np.isnan(a)], b[~np.isnan(b)])
        else:
            assert a.tolist() == b.tolist(), k
    assert parts.names == whole.names and parts.cats == whole.cats and parts.streams == whole.streams
    assert parts.metadata == whole.metadata
    i = int(np.flatnonzero(parts.is_cat("cpu_op") & parts.has_args)[100])
    assert parts.args(i) == whole.args(i) and "External id" in parts.args(i)
    proc = parts.metadata["by_pid_tid"][542][0]
    assert proc["process_name"] == "python3" and proc["process_labels"] == "CPU"


def _write(tmp_path: Path, events: list, name="t.json", raw: str | None = None, **top) -> Path:
    p = tmp_path / name
    text = raw if raw is not None else json.dumps({"schemaVersion": 1, "traceEvents": events, **top}, indent=1)
    p.write_text(text)
    return p


def test_split_inside_strings_and_nested_objects(tmp_path, monkeypatch):
    """A chunk bound candidate inside a string or a nested list of objects is refused
    (the chunk does not decode) and the next one is tried."""
    monkeypatch.setattr(pj, "CHUNK_BYTES", 16)
    evs = []
    for i in range(40):
        evs.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "x}, {y" if i % 3 == 0 else f"op{i}",
                "pid": 1,
                "tid": 2,
                "ts": float(i),
                "dur": 0.5,
                "args": {"External id": i, "nested": [{"a": 1}, {"b": [{"c": 2}]}], "s": '}, {"z": 1}]'},
            }
        )
    p = _write(tmp_path, evs, distributedInfo={"rank": 3})
    t = pj.read_pytorch_json(p)
    assert len(t) == 40
    assert t.ts.tolist() == [float(i) for i in range(40)]
    t.complete_links()  # cpu_ops' link args are decoded on demand
    assert t.ext.tolist() == list(range(40))
    assert t.args(3)["nested"] == [{"a": 1}, {"b": [{"c": 2}]}]
    assert t.names_of(np.arange(3)) == ["x}, {y", "op1", "op2"]
    assert t.metadata["distributedInfo"] == {"rank": 3}


def test_reader_odd_layouts(tmp_path):
    ev = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 1.0,
        "dur": 2.0,
        "args": {"correlation": "12", "stream": 7, "External id": None},
    }
    # traceEvents last, compact, non-int link fields (slow args path)
    p = _write(tmp_path, [], raw='{"a":[{"traceEvents":1}],"traceEvents":[' + json.dumps(ev) + "]}")
    t = pj.read_pytorch_json(p)
    assert len(t) == 1 and t.corr.tolist() == [12] and t.ext.tolist() == [MISSING]
    assert t.streams[t.stream[0]] == 7
    # gzip, empty array
    g = tmp_path / "e.json.gz"
    g.write_bytes(gzip.compress(b'{"traceEvents": [ ]}'))
    with pytest.raises(TraceError, match="no events"):
        pj.read_pytorch_json(g)
    # truncated file: the message names it
    full = json.dumps({"traceEvents": [ev] * 50})
    tr = _write(tmp_path, [], name="tr.json", raw=full[: len(full) // 2])
    with pytest.raises(TraceError, match="truncated"):
        pj.read_pytorch_json(tr)
    # a truncated gzip stream
    tg = tmp_path / "tg.json.gz"
    tg.write_bytes(gzip.compress(full.encode())[:-20])
    with pytest.raises(TraceError, match="gzip"):
        pj.read_pytorch_json(tg)


def _gemm_trace(tmp_path: Path) -> Path:
    """Two bmm calls (one Tensile kernel each, A transposed) and an mm with no kernel."""
    evs = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 10, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "thread_name", "pid": 10, "tid": 11, "args": {"name": "main"}},
    ]
    ext = 0
    for i, ts in enumerate((100.0, 300.0)):
        ext += 1
        evs += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::bmm",
                "pid": 10,
                "tid": 11,
                "ts": ts,
                "dur": 50.0,
                "args": {
                    "External id": ext,
                    "Input Dims": [[4, 64, 32], [4, 32, 16]],
                    "Input type": ["float", "float"],
                    "Input Strides": [[2048, 32, 1], [512, 16, 1]],
                    "Concrete Inputs": ["", ""],
                },
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "hipLaunchKernel",
                "pid": 10,
                "tid": 11,
                "ts": ts + 10,
                "dur": 5.0,
                "args": {"External id": ext, "correlation": 500 + i},
            },
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 500 + i, "pid": 10, "tid": 11, "ts": ts + 10},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 500 + i, "pid": 0, "tid": 7, "ts": ts + 20, "bp": "e"},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "Cijk_Alik_Bljk_SB_MT64x16x8",
                "pid": 0,
                "tid": 7,
                "ts": ts + 20,
                "dur": 8.0 + i * 8.0,
                "args": {"External id": ext, "correlation": 500 + i, "stream": 7},
            },
        ]
    evs.append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 10,
            "tid": 11,
            "ts": 500.0,
            "dur": 5.0,
            "args": {
                "External id": 99,
                "Input Dims": [[8, 8], [8, 8]],
                "Input type": ["c10::BFloat16", "c10::BFloat16"],
                "Input Strides": [[8, 1], [8, 1]],
                "Concrete Inputs": ["", ""],
            },
        }
    )
    return _write(tmp_path, evs)


def test_gemm_csv_rules(tmp_path):
    res = engine.analyze_trace(_gemm_trace(tmp_path), tmp_path / "out")
    rows = list(csv.DictReader(open(tmp_path / "out" / "GEMM.csv")))
    head = list(rows[0])
    # bmm came first: B leads the params; transpose follows from the kernel name
    assert head[:10] == [
        "name",
        "param: B",
        "param: M",
        "param: N",
        "param: K",
        "param: bias",
        "param: stride_A",
        "param: stride_B",
        "param: dtype_A_B",
        "param: transpose",
    ]
    bmm = next(r for r in rows if r["name"] == "aten::bmm")
    assert (bmm["param: B"], bmm["param: M"], bmm["param: N"], bmm["param: K"]) == ("4", "64", "16", "32")
    assert bmm["param: transpose"] == "(True, False)" and bmm["param: stride_A"] == "(2048, 32, 1)"
    assert bmm["name_count"] == "2" and bmm["Compute Spec"] == "matrix_fp32"
    flops = 4 * 2 * 64 * 16 * 32
    assert float(bmm["GFLOPS_first"]) == pytest.approx(flops / 1e9)
    nbytes = 4 * (64 * 32 + 32 * 16 + 64 * 16) * 4
    assert float(bmm["Data Moved (MB)_first"]) == pytest.approx(nbytes / 2**20)
    assert float(bmm["Kernel Time (µs)_sum"]) == pytest.approx(24.0)
    rates = [flops / 1e12 / (d / 1e6) for d in (8.0, 16.0)]
    assert float(bmm["TFLOPS/s_mean"]) == pytest.approx(np.mean(rates))
    assert float(bmm["TFLOPS/s_std"]) == pytest.approx(np.std(rates, ddof=1))
    assert bmm["process_name_first"] == "python3" and bmm["process_label_first"] == "CPU"
    assert bmm["thread_name_first"] == "main"
    # the mm launched nothing: a row with zero kernel time and no rate; no transpose, left
    # empty as the real TraceLens leaves it (fixture tests/fixtures/tracelens/gemm_transpose_partial)
    mm = next(r for r in rows if r["name"] == "aten::mm")
    assert mm["Kernel Time (µs)_sum"] == "0.0" and mm["TFLOPS/s_mean"] == "" and mm["param: transpose"] == ""
    assert mm["param: B"] == "1" and mm["param: bias"] == "False" and mm["Compute Spec"] == "matrix_bf16"
    assert [r["name"] for r in rows] == ["aten::bmm", "aten::mm"]  # by kernel time
    g = res["gemm"]
    assert g[0] == {
        "name": "aten::bmm",
        "M": 64,
        "N": 16,
        "K": 32,
        "B": 4,
        "dtype": "float",
        "count": 2,
        "time_ms": pytest.approx(0.024),
        "tflops_mean": pytest.approx(np.mean(rates)),
        "tbps_mean": pytest.approx(0.005376),
        "compute_spec": "matrix_fp32",
    }
    assert g[1]["tflops_mean"] is None and g[1]["time_ms"] == 0.0


def test_collective_events_columns():
    assert RESNET.exists(), "reference traces not found"
    t = engine.read_trace(RESNET)
    ev = ca.collective_events(t, rank=5)
    assert list(ev.columns) == ca.EVENT_COLUMNS
    assert len(ev) == 17 and set(ev["rank"]) == {5}
    full = ev.dropna(subset=["Collective name"])
    assert len(full) == 12 and set(full["Collective name"]) == {"allreduce", "broadcast"}
    assert (ev["dur"] > 0).all() and ev["ts"].is_monotonic_increasing
    ar = full[full["In msg nelems"] == 8816192]
    assert (ar["In msg size (MB)"] == 8816192 * 2 / 2**20).all()
    assert set(ev["name"].str.contains("nccl", case=False)) == {True}
    summ = ca.coll_analysis_frame(ev)
    assert list(summ.columns) == ca.SUMMARY_COLUMNS
    assert int(summ["operation_count"].sum()) == 12  # the 5 kernels without args are left out
    assert summ["dur_sum"].is_monotonic_decreasing


def test_analyze_paths_jobs_progress(tmp_path, capsys):
    srcs = [
        REF / "mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        REF / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz",
        tmp_path / "missing.json",
    ]
    rc = analyze_paths(srcs, tmp_path / "out", jobs=2)
    err = capsys.readouterr().err
    assert rc == 2
    assert "error:" in err and "missing.json" in err
    assert err.count("] ") >= 2  # one progress line per finished trace
    for s in srcs[:2]:
        d = tmp_path / "out" / engine.output_stem(s)
        assert (d / "GEMM.csv").exists() and (d / "analysis.json").exists()


def _seen_init(seen: list):
    base = pj._Slicer

    def init(self, buf):
        base.__init__(self, buf)
        seen.append(self)

    return init


def test_tagged_decode_equals_plain(tmp_path, monkeypatch):
    """Chunks decode by category type while every event has a known category; a chunk with
    an unknown category or none (metadata, instant events) takes the plain decode; both
    give the same table."""
    monkeypatch.setattr(pj, "CHUNK_BYTES", 256)
    evs: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}}]
    cats = ["cpu_op", "python_function", "cuda_runtime", "kernel", "ac2g", "my_new_cat", "user_annotation"]
    for i in range(300):
        ev = {"ph": "X", "cat": cats[i % len(cats)], "name": f"op{i % 11}", "pid": 1, "tid": 2 + i % 3}
        ev.update(ts=float(i), dur=0.5, args={"correlation": i, "External id": i, "stream": 7})
        if i % 50 == 25:  # an instant event with no category, mid-trace
            ev = {"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": 1, "tid": 2, "ts": float(i), "s": "g"}
        evs.append(ev)
    p = _write(tmp_path, evs)
    slicers: list = []
    monkeypatch.setattr(pj, "_Slicer", type("Seen", (pj._Slicer,), {"__init__": _seen_init(slicers)}))
    tagged = pj.read_pytorch_json(p)
    assert slicers[0].hits > 0 and slicers[0].misses > 0  # both decodes were used
    monkeypatch.setattr(pj, "TAGGED_DECODE", False)
    plain = pj.read_pytorch_json(p)
    n_skipped = sum(e.get("cat") == "python_function" for e in evs)
    assert len(tagged) == len(plain) == len(evs) - n_skipped
    assert tagged.metadata["skipped_events"] == plain.metadata["skipped_events"] == n_skipped
    for k, a in _columns(plain).items():
        b = getattr(tagged, k)
        np.testing.assert_array_equal(a, b, err_msg=k)
    for k in ("names", "phs", "pids", "tids", "streams"):
        assert getattr(tagged, k) == getattr(plain, k), k
    assert [tagged.cats[c] for c in tagged.cat.tolist()] == [plain.cats[c] for c in plain.cat.tolist()]
    assert [bytes(r) for r in tagged.raw_args] == [bytes(r) for r in plain.raw_args]
    assert tagged.metadata == plain.metadata


def test_split_read_equals_one_process(monkeypatch):
    """Two processes (the second half's events decoded in a forked child, recoded into the
    first's value tables) give the table one process gives, byte for byte."""
    assert RESNET.exists(), "reference traces not found"
    one = pj.read_pytorch_json(RESNET)
    monkeypatch.setattr(pj, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(pj, "CHUNK_BYTES", 1 << 20)  # several chunks in each half
    halves: list[int] = []
    real_absorb = pj._Columns.absorb
    monkeypatch.setattr(
        pj._Columns, "absorb", lambda self, part, raw: halves.append(part["n"]) or real_absorb(self, part, raw)
    )
    two = pj.read_pytorch_json(RESNET, split=True)
    assert len(halves) == 1 and 0 < halves[0] < len(one)  # the child really read a part
    for k, a in _columns(one).items():
        np.testing.assert_array_equal(a, getattr(two, k), err_msg=k)
    np.testing.assert_array_equal(one.deferred_links, two.deferred_links)
    for k in ("cats", "names", "phs", "pids", "tids", "streams", "metadata"):
        assert getattr(one, k) == getattr(two, k), k
    assert [bytes(r) for r in one.raw_args] == [bytes(r) for r in two.raw_args]


def test_split_read_falls_back_on_an_odd_layout(tmp_path, monkeypatch):
    """A half that does not decode (here: the split point inside a string) sends the read
    back to one process, which reads the trace as it always has."""
    monkeypatch.setattr(pj, "SPLIT_MIN_BYTES", 0)
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": "a" * 40 + "}, {" + "b" * 40, "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}
    ]
    p = _write(tmp_path, evs)
    split_results: list = []
    real_split = pj._read_split
    monkeypatch.setattr(pj, "_read_split", lambda *a: split_results.append(real_split(*a)) or split_results[-1])
    t = pj.read_pytorch_json(p, split=True)
    assert split_results == [None]  # the split gave up ...
    assert t.names == ["a" * 40 + "}, {" + "b" * 40]  # ... and one process read it
    bad = _write(tmp_path, [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": 1}] * 50, name="bad.json")
    bad.write_bytes(bad.read_bytes()[:-40])
    with pytest.raises(TraceError, match="truncated JSON"):
        pj.read_pytorch_json(bad, split=True)


def test_stream_codes_in_order_of_first_appearance(tmp_path, monkeypatch):
    """Streams are coded as they first appear in the file, whatever the chunk bounds."""
    evs = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 9 if i < 130 else 3, "ts": float(i), "dur": 1.0}
        | {"args": {"correlation": i, "stream": 9 if i < 130 else 3}}
        for i in range(200)
    ]
    p = _write(tmp_path, evs)
    whole = pj.read_pytorch_json(p)
    monkeypatch.setattr(pj, "CHUNK_BYTES", 4 << 10)
    for split in (False, True):
        monkeypatch.setattr(pj, "SPLIT_MIN_BYTES", 0)
        t = pj.read_pytorch_json(p, split=split)
        assert t.streams == whole.streams == [9, 3]
        assert t.stream.tolist() == whole.stream.tolist()


def test_skipped_events_are_checked_as_before(tmp_path, monkeypatch):
    """A python_function event is dropped, but a broken one fails the read as in the plain
    decode (the tagged decode type-checks the same fields)."""
    evs = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}]
    evs.append({"ph": "X", "cat": "python_function", "name": "f", "pid": 1, "tid": 1, "ts": "oops", "dur": 1.0})
    p = _write(tmp_path, evs)
    errors = []
    for tagged in (True, False):
        monkeypatch.setattr(pj, "TAGGED_DECODE", tagged)
        with pytest.raises(TraceError, match="unexpected trace structure") as exc:
            pj.read_pytorch_json(p)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
