"""Engine interface: analysis.json, output naming, bad input, and TraceLens linking rules
checked by hand on a small synthetic kineto trace."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_DIR
from traceladder.cli.analyze import analyze_paths
from traceladder.analysis.analyzers.trace import analyze_trace, output_stem, read_trace
from traceladder.analysis.model.events import TraceError

REF = REFERENCE_DIR / "tracelens-v1.0.0"


def _x(cat, name, ts, dur, pid=100, tid=100, **args):
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = {k.replace("_", " ") if k == "External_id" else k: v for k, v in args.items()}
    return e


def _flow(ph, fid, ts, pid, tid):
    e = {"ph": ph, "id": fid, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"}
    if ph == "f":
        e["bp"] = "e"
    return e


def synthetic_trace() -> dict:
    """CPU ops launch kernels on GPU pid 1 / tid 7 (stream 7).

    t (us)    1000   1010   1020   1030   1040   1050   1060   1070   1080   1090   1100
    gemm      [======]                                        (aten::mm, 10 us)
    gemm2          [======]  (same op, overlaps 5 us -> direct busy 15)
    memset                   [==]                             (aten::zero_, 4 us)
    nccl                            [==============]          (c10d op, 20 us, comm)
    add                                    [====]             (aten::add, 6 us, overlaps nccl)
    memcpy                                           [====]   (aten::copy_, 8 us)
    unlinked                                                         [==]  (no launch)
    """
    ev = [
        {"name": "process_name", "ph": "M", "pid": 100, "tid": 0, "args": {"name": "python"}},
        _x("user_annotation", "ProfilerStep#3", 900, 300, External_id=1),
        _x("user_annotation", "attention", 990, 40, External_id=2),
        _x("cpu_op", "aten::mm", 1000, 20, External_id=3),
        _x("cuda_runtime", "cudaLaunchKernel", 1002, 3, correlation=11, External_id=3),
        _x("cuda_runtime", "cudaLaunchKernel", 1010, 3, correlation=12, External_id=3),
        _x("cpu_op", "aten::zero_", 1025, 5, External_id=4),
        _x("cpu_op", "aten::fill_", 1026, 3, External_id=5),
        _x("cuda_runtime", "cudaMemsetAsync", 1026.5, 1, correlation=13, External_id=5),
        _x("cpu_op", "c10d::allreduce_", 1031, 4, External_id=6),
        _x("cuda_runtime", "cudaLaunchKernel", 1032, 2, correlation=14, External_id=6),
        _x("cpu_op", "aten::add", 1040, 5, External_id=7),
        _x("cuda_runtime", "cudaLaunchKernel", 1041, 2, correlation=15, External_id=7),
        _x("cpu_op", "aten::copy_", 1050, 5, External_id=8),
        _x("cuda_runtime", "cudaMemcpyAsync", 1051, 2, correlation=16, External_id=8),
        # GPU side
        _x("kernel", "Cijk_gemm", 1005, 10, pid=1, tid=7, correlation=11, stream=7, External_id=3),
        _x("kernel", "Cijk_gemm", 1010, 10, pid=1, tid=7, correlation=12, stream=7, External_id=3),
        _x("gpu_memset", "Memset (Device)", 1030, 4, pid=1, tid=7, correlation=13, stream=7, External_id=5),
        _x("kernel", "ncclDevKernel_AllReduce_Sum_f32", 1040, 20, pid=1, tid=7, correlation=14, stream=7),
        _x(
            "kernel",
            "void at::native::vectorized_elementwise_kernel<add>",
            1050,
            6,
            pid=1,
            tid=7,
            correlation=15,
            stream=7,
            External_id=7,
        ),
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 1070, 8, pid=1, tid=7, correlation=16, stream=7),
        _x("kernel", "orphan_kernel", 1095, 4, pid=1, tid=7, correlation=99, stream=7),
    ]
    for corr, ts_cpu, ts_gpu in [
        (11, 1002, 1005),
        (12, 1010, 1010),
        (13, 1026.5, 1030),
        (14, 1032, 1040),
        (15, 1041, 1050),
        (16, 1051, 1070),
    ]:
        ev.append(_flow("s", corr, ts_cpu, 100, 100))
        ev.append(_flow("f", corr, ts_gpu, 1, 7))
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8}, "traceEvents": ev}


def _write(path: Path, doc: dict, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_synthetic_gpu_trace(tmp_path):
    tr = _write(tmp_path / "job-rank[5].pt.trace.json.gz", synthetic_trace(), gz=True)
    res = analyze_trace(tr, tmp_path / "out")
    assert res["device"] == "gpu"
    assert res["rank"] == 3  # distributedInfo beats the file name
    tl = res["timeline"]
    # linked GPU events only: 1005..1078; the orphan kernel (1095) does not count
    assert tl["total_time"] == pytest.approx(0.073)
    assert tl["computation_time"] == pytest.approx((15 + 4 + 6) / 1e3)  # gemm union, memset, add
    assert tl["total_comm_time"] == pytest.approx(0.020)
    assert tl["exposed_comm_time"] == pytest.approx(0.014)  # 20 less the add kernel's 6
    assert tl["total_memcpy_time"] == pytest.approx(0.008)
    assert tl["exposed_memcpy_time"] == pytest.approx(0.008)
    assert tl["busy_time"] == pytest.approx((15 + 4 + 20 + 8) / 1e3)
    assert tl["idle_time"] == pytest.approx(tl["total_time"] - tl["busy_time"])
    top = {o["name"]: o for o in res["top_ops"]}
    # nccl kernels are not charged to ops; the memset goes to the innermost cpu_op
    assert set(top) == {"aten::mm", "aten::fill_", "aten::add", "aten::copy_"}
    assert top["aten::mm"]["time_ms"] == pytest.approx(0.015) and top["aten::mm"]["count"] == 1
    cats = {c["name"]: c["count"] for c in res["categories"]}
    assert cats == {"GEMM": 1, "elementwise": 2, "other": 1}  # add via its kernel name fallback
    assert res["regions"] == {"attention": pytest.approx(0.04)}
    ks = (tmp_path / "out" / "kernel_summary.csv").read_text()
    assert "orphan_kernel" in ks and "ncclDevKernel" in ks


def test_reference_trace_analysis_json(tmp_path):
    tr = REF / "mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    assert tr.exists(), "reference traces not found"
    res = analyze_trace(tr, tmp_path)
    assert res["trace"] == tr.name and res["device"] == "gpu" and res["rank"] is None
    assert res["timeline"]["total_time"] == pytest.approx(8.91188671875)
    assert json.loads((tmp_path / "analysis.json").read_text()) == res
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "BinaryElementwise.csv",
        "GEMM.csv",
        "Reduce_fwd.csv",
        "UnaryElementwise.csv",
        "analysis.json",
        "gpu_timeline.csv",
        "headroom.csv",  # the "what's left" reports (issue 26), beside TraceLens's
        "idle_breakdown.csv",
        "kernel_summary.csv",
        "op_origins.csv",
        "ops_summary.csv",
        "ops_summary_by_category.csv",
        "ops_unique_args.csv",
        "roofline.csv",
        "short_kernel_histogram.csv",
        "short_kernels_summary.csv",
        "step_regions.csv",
        "unified_perf_summary.csv",
    ]
    # "gemm": the GEMM.csv rows (shape, count, kernel time, mean TFLOPS/s), by time
    import csv

    ref = list(csv.DictReader(open(tr.parent / "mi250_minitoy_train_ROCm6_2_kineto_perf_report_csvs" / "GEMM.csv")))
    assert len(res["gemm"]) == len(ref) == 2
    by = {(g["name"], g["M"], g["N"], g["K"]): g for g in res["gemm"]}
    for r in ref:
        g = by[(r["name"], int(r["param: M"]), int(r["param: N"]), int(r["param: K"]))]
        assert g["count"] == int(r["name_count"])
        assert g["time_ms"] == pytest.approx(float(r["Kernel Time (µs)_sum"]) / 1e3, rel=1e-9)
        assert g["tflops_mean"] == pytest.approx(float(r["TFLOPS/s_mean"]), rel=1e-9)
        assert g["dtype"] == r["param: dtype_A_B"].split("'")[1] and g["B"] == 1
    times = [g["time_ms"] for g in res["gemm"]]
    assert times == sorted(times, reverse=True)


@pytest.mark.parametrize(
    "name,stem",
    [
        ("primus-megatron-exp[x]-rank[0].1712.pt.trace.json.gz", "primus-megatron-exp[x]-rank[0].1712"),
        ("a.pt.trace.json", "a"),
        ("b.json.gz", "b"),
        ("c.json", "c"),
        ("kernel_trace.csv", "kernel_trace"),
        ("trace.db", "trace"),
        ("trace.db.gz", "trace"),
        ("trace.rpd", "trace"),
        ("noext", "noext"),
    ],
)
def test_output_stem(name, stem):
    assert output_stem(Path(name)) == stem


def _bad_inputs(d: Path) -> dict[str, Path]:
    d.mkdir()
    good = json.dumps(synthetic_trace()).encode()
    files = {
        "missing": d / "missing.json",
        "empty": d / "empty.json",
        "truncated": d / "truncated.json",
        "corrupt_gzip": d / "corrupt.json.gz",
        "truncated_gzip": d / "cut.json.gz",
        "text": d / "notes.json",
        "no_trace_events": d / "other.json",
        "no_events": d / "noevents.json",
        "sqlite": d / "trace.db",
        "directory": d / "adir.json",
    }
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(good[: len(good) // 2])
    files["corrupt_gzip"].write_bytes(b"\x1f\x8b\x08\x00garbage-garbage-garbage")
    files["truncated_gzip"].write_bytes(gzip.compress(good)[:200])
    files["text"].write_bytes(b"hello, not a trace\n")
    files["no_trace_events"].write_bytes(b'{"foo": 1}')
    files["no_events"].write_bytes(b'{"traceEvents": []}')
    files["sqlite"].write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    files["directory"].mkdir()
    return files


def test_bad_inputs_raise_trace_error(tmp_path):
    for kind, p in _bad_inputs(tmp_path / "bad").items():
        with pytest.raises(TraceError) as ei:
            read_trace(p)
        assert ei.value.path == p, kind
        assert str(p) in str(ei.value) and ei.value.reason, kind


def test_analyze_paths_mixed(tmp_path, capsys):
    bad = _bad_inputs(tmp_path / "bad")
    (tmp_path / "x").mkdir()
    g1 = _write(tmp_path / "x" / "job.json", synthetic_trace())
    g2 = _write(tmp_path / "y.json", synthetic_trace())
    (tmp_path / "z").mkdir()
    g3 = _write(tmp_path / "z" / "job.pt.trace.json.gz", synthetic_trace(), gz=True)  # same stem as g1
    paths = [g1, *bad.values(), g2, g3]
    out = tmp_path / "out"
    rc = analyze_paths(paths, out)
    assert rc == 2
    err = capsys.readouterr().err
    err_lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(err_lines) == len(bad)
    for p in bad.values():
        assert sum(str(p) in ln for ln in err_lines) == 1, p
    assert "Traceback" not in err
    for d in ("job", "y", "job-2"):
        assert (out / d / "analysis.json").is_file(), d
        assert (out / d / "gpu_timeline.csv").is_file(), d
    assert json.loads((out / "job-2" / "analysis.json").read_text())["trace"] == g3.name


def test_analyze_paths_all_good_returns_zero(tmp_path, capsys):
    g = _write(tmp_path / "t.json", synthetic_trace())
    assert analyze_paths([g], tmp_path / "out", jobs=4) == 0
    assert "error" not in capsys.readouterr().err


def test_copy_of_reference_trace_by_cli_rule(tmp_path):
    src = REF / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
    assert src.exists(), "reference traces not found"
    a = tmp_path / "a"
    a.mkdir()
    shutil.copy(src, a / src.name)
    assert analyze_paths([src, a / src.name], tmp_path / "out") == 0
    assert (tmp_path / "out" / "gaunernst_bert-small-uncased__1016001" / "ops_summary.csv").is_file()
    assert (tmp_path / "out" / "gaunernst_bert-small-uncased__1016001-2" / "ops_summary.csv").is_file()


def test_analyze_path_never_imports_pandas(tmp_path):
    """pandas costs ~0.3-1 s of imports per process (the speed gate counts them): a GPU
    trace with host ops, which gets every perf sheet, is analysed without it."""
    import os
    import subprocess
    import sys

    import traceladder

    # the child imports this checkout's traceladder, as the parent did
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(traceladder.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    trace = REF / "mi300" / "resnet_act_checkpoint.json.gz"
    code = (
        "import sys; from traceladder.analysis.analyzers.trace import analyze_trace; "
        f"analyze_trace({str(trace)!r}, {str(tmp_path)!r}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert res.stdout.strip() == "[]", res.stdout
    assert {"CONV_fwd.csv", "ops_unique_args.csv", "unified_perf_summary.csv"} <= {
        p.name for p in tmp_path.glob("*.csv")
    }
