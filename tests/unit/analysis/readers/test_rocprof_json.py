"""rocprofv3 traces (JSON and CSV) through the analysis engine.

* The reference rocprofv3 JSON (../shared/reference/tracelens-v1.0.0/rocprof) must give
  TraceLens v1.0.0's gpu_timeline.csv, kernel_summary.csv and
  kernel_summary_by_category.csv by the reference README's rule (tests/conformance.py).
* The rocprofv3 CSV fixtures are made here from that JSON's dispatches: one
  ``kernel_trace.csv`` row per dispatch with the kernel's ``formatted_kernel_name`` (what
  rocprofv3's CSV writes) and a ``memory_copy_trace.csv`` with copies we add, so the
  CSV must give the same kernel summaries and kernel/memory/busy timeline rows as the
  JSON (with the same copies added) does.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import orjson
import pytest

from traceladder.cli.analyze import analyze_paths
from traceladder.analysis.analyzers.trace import analyze_trace, read_trace
from traceladder.analysis.model.events import TraceError
from traceladder.analysis.readers.heavy import sniff
from traceladder.analysis.readers.rocm_common import tracelens_kernel_names, truncate_name

from testkit.rocprof_files import KERNEL_TRACE_COLUMNS
from tests import conformance
from tests.conftest import REFERENCE_DIR

ROCPROF = REFERENCE_DIR / "tracelens-v1.0.0" / "rocprof"
REF_JSON = ROCPROF / "908_results.json.gz"
REF_CSVS = ROCPROF / "908_results_perf_report_csvs"
REPORTS = ["gpu_timeline.csv", "kernel_summary.csv", "kernel_summary_by_category.csv"]


# ---------------------------------------------------------------------------------
# fixtures made from the reference JSON (also used by test_rpd_sqlite.py and test_rocpd_db.py)
def load_reference() -> dict:
    assert REF_JSON.is_file(), f"reference rocprofv3 trace not found at {REF_JSON} (or TRACELADDER_REFERENCE_DIR)"
    return orjson.loads(gzip.decompress(REF_JSON.read_bytes()))


def add_copies(doc: dict, every: int = 97) -> dict:
    """The reference has no memory copies: add one per ``every`` dispatches, starting
    inside the kernel (partial overlap) and running 7 us past its end."""
    tool = doc["rocprofiler-sdk-tool"][0]
    copies = []
    for i, d in enumerate(tool["buffer_records"]["kernel_dispatch"][::every]):
        copies.append(
            {
                "size": 96,
                "kind": 10,
                "operation": 2 + i % 3,
                "thread_id": 908,
                "correlation_id": {"internal": 10**7 + i, "external": 0},
                "start_timestamp": d["start_timestamp"] + 100,
                "end_timestamp": d["end_timestamp"] + 7000,
                "dst_agent_id": {"handle": 37946},
                "src_agent_id": {"handle": 37944},
                "bytes": 4096,
                "stream_id": {"handle": 0},
            }
        )
    tool["buffer_records"]["memory_copy"] = copies
    return doc


def dispatch_rows(doc: dict, name_field: str = "formatted_kernel_name") -> list[dict]:
    """Each dispatch with the kernel's name as named by ``name_field``."""
    tool = doc["rocprofiler-sdk-tool"][0]
    syms = {k["kernel_id"]: k for k in tool["kernel_symbols"]}
    out = []
    for d in tool["buffer_records"]["kernel_dispatch"]:
        di = d["dispatch_info"]
        out.append(
            {
                "name": syms[di["kernel_id"]][name_field],
                "kernel_id": di["kernel_id"],
                "agent": di["agent_id"]["handle"],
                "queue": di["queue_id"]["handle"],
                "stream": d["stream_id"]["handle"],
                "thread": d["thread_id"],
                "dispatch": di["dispatch_id"],
                "corr": d["correlation_id"]["internal"],
                "start": d["start_timestamp"],
                "end": d["end_timestamp"],
                "grid": di["grid_size"],
                "wg": di["workgroup_size"],
            }
        )
    return out


def copy_rows(doc: dict) -> list[dict]:
    ops = [
        "MEMORY_COPY_NONE",
        "MEMORY_COPY_HOST_TO_HOST",
        "MEMORY_COPY_HOST_TO_DEVICE",
        "MEMORY_COPY_DEVICE_TO_HOST",
        "MEMORY_COPY_DEVICE_TO_DEVICE",
    ]
    tool = doc["rocprofiler-sdk-tool"][0]
    return [
        {
            "direction": ops[c["operation"]],
            "start": c["start_timestamp"],
            "end": c["end_timestamp"],
            "corr": c["correlation_id"]["internal"],
        }
        for c in tool["buffer_records"].get("memory_copy", [])
    ]


def write_kernel_csv(path: Path, rows: list[dict], gz: bool = False) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(KERNEL_TRACE_COLUMNS)
    for r in rows:
        w.writerow(
            [
                "KERNEL_DISPATCH",
                r["agent"],
                r["queue"],
                r["stream"],
                r["thread"],
                r["dispatch"],
                r["kernel_id"],
                r["name"],
                r["corr"],
                r["start"],
                r["end"],
                0,
                0,
                r["wg"]["x"],
                r["wg"]["y"],
                r["wg"]["z"],
                r["grid"]["x"],
                r["grid"]["y"],
                r["grid"]["z"],
            ]
        )
    data = buf.getvalue().encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_copy_csv(path: Path, rows: list[dict]) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(
        [
            "Kind",
            "Direction",
            "Stream_Id",
            "Source_Agent_Id",
            "Destination_Agent_Id",
            "Correlation_Id",
            "Start_Timestamp",
            "End_Timestamp",
        ]
    )
    for r in rows:
        w.writerow(["MEMORY_COPY", r["direction"], 0, 1, 2, r["corr"], r["start"], r["end"]])
    path.write_bytes(buf.getvalue().encode())
    return path


def timeline_rows(out: Path) -> dict[str, float]:
    with open(out / "gpu_timeline.csv", newline="") as fh:
        return {r["type"]: float(r["time ms"]) for r in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def ref_doc() -> dict:
    return load_reference()


@pytest.fixture(scope="module")
def json_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rocprof_json")
    analyze_trace(REF_JSON, out)
    return out


@pytest.fixture(scope="module")
def with_copies(tmp_path_factory, ref_doc) -> tuple[Path, Path]:
    """(JSON with copies, its analysis dir) -- the doc is copied, not changed in place."""
    doc = add_copies(orjson.loads(orjson.dumps(ref_doc)))
    d = tmp_path_factory.mktemp("rocprof_copies")
    p = d / "host.908_results.json.gz"
    p.write_bytes(gzip.compress(orjson.dumps(doc)))
    analyze_trace(p, d / "out")
    return p, d / "out"


# ---------------------------------------------------------------------------------
# conformance with TraceLens v1.0.0
@pytest.mark.parametrize("report", REPORTS)
def test_reference_json_conforms(json_out, report):
    diffs = conformance.compare_csv(json_out / report, REF_CSVS / report)
    assert not diffs, "\n".join(diffs)


def test_reference_numbers_and_unit_quirk(json_out):
    tl = timeline_rows(json_out)
    assert tl["total_time"] == pytest.approx(19207.53247000122, rel=1e-12)  # (fini - init) ns -> ms
    assert tl["kernel"] == pytest.approx(4233.1123342971805, rel=1e-9)
    with open(json_out / "kernel_summary.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    nccl = next(r for r in rows if r["name"] == "ncclDevKernel_Generic_1")
    assert int(nccl["Count"]) == 1310 and nccl["Category"] == "COMM"
    # quirk: "(µs)" columns hold ns, "(ms)" holds us
    assert nccl["Min Kernel Time (µs)"] == "70280"
    assert float(nccl["Total Kernel Time (ms)"]) == pytest.approx(4158756.678)


def test_analysis_json_for_rocprof(json_out):
    a = json.loads((json_out / "analysis.json").read_text())
    assert a["schema"] == 2 and a["device"] == "gpu" and a["trace"] == REF_JSON.name
    assert set(a["timeline"]) == {
        "computation_time",
        "exposed_comm_time",
        "exposed_memcpy_time",
        "busy_time",
        "idle_time",
        "total_time",
        "total_comm_time",
        "total_memcpy_time",
    }
    assert a["timeline"]["total_time"] == pytest.approx(19207.53247000122)
    assert a["timeline"]["busy_time"] == pytest.approx(4233.1123342971805, rel=1e-9)
    assert a["timeline"]["total_comm_time"] == pytest.approx(4158.756678, rel=1e-9)  # the nccl kernels, real ms
    assert a["timeline_percent"]["total_time"] == 100.0
    top = a["top_ops"][0]
    assert top == {
        "name": "ncclDevKernel_Generic_1",
        "time_ms": pytest.approx(4158.756678),
        "percent": pytest.approx(93.62896945325032),
        "count": 1310,
    }
    assert len(a["top_ops"]) == 10
    assert {c["name"] for c in a["categories"]} == {
        "COMM",
        "Elementwise",
        "GEMM",
        "Other",
        "Reduction",
        "Memory",
        "Normalization",
        "Attention",
    }
    assert sum(c["count"] for c in a["categories"]) == 43915
    assert any("µs hold ns" in n for n in a["notes"])
    assert not any("collectives" in n for n in a["notes"])


def test_comparison_catches_a_wrong_rocprof_report(json_out, tmp_path):
    bad = tmp_path / "kernel_summary.csv"
    text = (
        (json_out / "kernel_summary.csv")
        .read_text()
        .replace("ncclDevKernel_Generic_1,1310,", "ncclDevKernel_Generic_1,1311,")
    )
    bad.write_text(text)
    assert conformance.compare_csv(bad, REF_CSVS / "kernel_summary.csv")


# ---------------------------------------------------------------------------------
# kernel names
def test_truncate_name_rules():
    assert (
        truncate_name(
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
            "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>) [clone .kd]"
        )
        == "vectorized_elementwise_kernel"
    )
    assert truncate_name("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)") == "ncclDevKernel_Generic_1"
    assert truncate_name("__amd_rocclr_copyBuffer.kd") == "__amd_rocclr_copyBuffer.kd"
    assert truncate_name("Foo<int, float>::foo(a[], int (int))") == "foo"


def test_tracelens_names_from_formatted_names(ref_doc):
    syms = [k for k in ref_doc["rocprofiler-sdk-tool"][0]["kernel_symbols"] if k["kernel_id"]]
    want = [k["truncated_kernel_name"] for k in syms]
    assert tracelens_kernel_names([k["formatted_kernel_name"] for k in syms]) == want
    assert tracelens_kernel_names([k["demangled_kernel_name"] for k in syms]) == want
    # already truncated names stay as they are
    assert tracelens_kernel_names(want) == want


# ---------------------------------------------------------------------------------
# CSV
def test_csv_gives_the_json_numbers(tmp_path, ref_doc, with_copies):
    doc = add_copies(orjson.loads(orjson.dumps(ref_doc)))
    d = tmp_path / "host"
    d.mkdir()
    k = write_kernel_csv(d / "908_kernel_trace.csv", dispatch_rows(doc))
    write_copy_csv(d / "908_memory_copy_trace.csv", copy_rows(doc))
    out = tmp_path / "out"
    analyze_trace(k, out)
    _, jout = with_copies
    for rep in ("kernel_summary.csv", "kernel_summary_by_category.csv"):
        diffs = conformance.compare_csv(out / rep, jout / rep)
        assert not diffs, "\n".join(diffs)
    tj, tc = timeline_rows(jout), timeline_rows(out)
    assert tj["memory"] > 0
    for row in ("kernel", "memory", "busy_time"):
        assert tc[row] == pytest.approx(tj[row], rel=1e-12), row
    # no init/fini in a CSV: total is the span of the GPU work
    assert tc["total_time"] < tj["total_time"]
    a = json.loads((out / "analysis.json").read_text())
    assert a["device"] == "gpu" and a["top_ops"][0]["name"] == "ncclDevKernel_Generic_1"
    assert any("908_memory_copy_trace.csv" in n for n in a["notes"])


def test_csv_lone_gz_and_folder(tmp_path, ref_doc):
    rows = dispatch_rows(ref_doc)[:2000]
    lone = write_kernel_csv(tmp_path / "kernel_trace.csv.gz", rows, gz=True)
    t = read_trace(lone)
    assert t.fmt == "rocprofv3_csv" and int(t.is_cat("kernel").sum()) == 2000
    assert not t.is_cat("gpu_memcpy").any()
    folder = tmp_path / "rocprof_output"
    (folder / "myhost").mkdir(parents=True)
    write_kernel_csv(folder / "myhost" / "908_kernel_trace.csv", rows)
    write_copy_csv(
        folder / "myhost" / "908_memory_copy_trace.csv",
        [
            {
                "direction": "MEMORY_COPY_HOST_TO_DEVICE",
                "start": rows[0]["start"],
                "end": rows[0]["start"] + 5000,
                "corr": 1,
            }
        ],
    )
    t2 = read_trace(folder)
    assert int(t2.is_cat("kernel").sum()) == 2000 and int(t2.is_cat("gpu_memcpy").sum()) == 1
    assert analyze_paths([folder, lone], tmp_path / "out") == 0
    assert (tmp_path / "out" / "rocprof_output" / "kernel_summary_by_category.csv").is_file()
    assert (tmp_path / "out" / "kernel_trace" / "gpu_timeline.csv").is_file()


def test_format_from_content_not_name(tmp_path, ref_doc):
    p = tmp_path / "renamed.bin"
    write_kernel_csv(p, dispatch_rows(ref_doc)[:10])
    assert sniff(p, p.read_bytes()) == "rocprofv3_csv"
    assert read_trace(p).fmt == "rocprofv3_csv"
    j = tmp_path / "results.txt"
    j.write_bytes(gzip.decompress(REF_JSON.read_bytes()))
    assert read_trace(j).fmt == "rocprofv3_json"


def test_bad_csv_inputs(tmp_path, ref_doc, capsys):
    good = write_kernel_csv(tmp_path / "g_kernel_trace.csv", dispatch_rows(ref_doc)[:50]).read_bytes()
    bad = {
        "header": (tmp_path / "a_kernel_trace.csv", b"Name,When\nx,1\n"),
        "timestamp": (tmp_path / "b_kernel_trace.csv", good.replace(b'"63857982592000"', b'"soon"', 1)),
        "truncated": (tmp_path / "c_kernel_trace.csv", good[: good.index(b"\n", 200) + 40]),
        "header_only": (tmp_path / "d_kernel_trace.csv", good.split(b"\n", 1)[0] + b"\n"),
        "memcpy_alone": (
            tmp_path / "e_memory_copy_trace.csv",
            b'"Kind","Direction","Start_Timestamp","End_Timestamp"\n"MEMORY_COPY","H2D","1","2"\n',
        ),
        "empty_dir": (tmp_path / "nothing_here", None),
    }
    for kind, (p, data) in bad.items():
        if data is None:
            p.mkdir()
        else:
            p.write_bytes(data)
        with pytest.raises(TraceError) as ei:
            read_trace(p)
        assert ei.value.path == p and ei.value.reason, kind
    assert b'"soon"' in bad["timestamp"][1]
    rc = analyze_paths([p for p, _ in bad.values()], tmp_path / "out")
    assert rc == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == len(bad) and all(ln.startswith("error: ") for ln in err), err
