"""RPD-style SQLite traces (rocm-trace-lite trace.db, rpd trace.rpd v2/v3).

No real sample of either exists here, so the fixtures are built in these tests from the
schemas (FACTS.md "Trace formats"; rocm-trace-lite's trace_db.cpp; rpd's
tableSchema.cmd): the reference rocprofv3 JSON's kernel dispatches become
``KernelExecution`` ops named by the kernels' HIP-style (``formatted``) or demangled
names, and the copies added by test_rocprof_json.add_copies become ``Copy*`` ops,
with the same ns times.  So the same kernels must give the same numbers through JSON,
CSV and SQLite.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest

from traceladder.cli.analyze import analyze_paths
from traceladder.analysis.analyzers.trace import analyze_trace, read_trace
from traceladder.analysis.model.events import TraceError
from traceladder.analysis.reports.rocprof_reports import LITE_NOTE

_here = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("rocprof_tests", _here / "test_rocprof_json.py")
rp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rp)
conformance = rp.conformance

_V2_OP = (
    "CREATE TABLE rocpd_op (id integer PRIMARY KEY AUTOINCREMENT, gpuId integer NOT NULL, queueId integer NOT NULL, "
    "sequenceId integer NOT NULL, completionSignal varchar(18) NOT NULL, start integer NOT NULL, end integer NOT NULL, "
    "description_id integer NOT NULL, opType_id integer NOT NULL)"
)
_V3_OP = (
    "CREATE TABLE rocpd_op (id integer PRIMARY KEY AUTOINCREMENT, gpuId integer NOT NULL, queueId integer NOT NULL, "
    "sequenceId integer NOT NULL, start integer NOT NULL, end integer NOT NULL, "
    "description_id integer NOT NULL, opType_id integer NOT NULL)"
)


def write_db(path: Path, kernels: list[dict], copies: list[dict], flavour: str, gz: bool = False) -> Path:
    """flavour: ``rtl`` (rocm-trace-lite), ``v2`` (rpd schema 2) or ``v3`` (rpd schema 3,
    kernel names only through rocpd_kernelapi.api_ptr_id; op descriptions empty)."""
    tmp = path.with_name(path.name + ".tmp.sqlite")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    c = con.cursor()
    c.execute("CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT UNIQUE)")
    c.execute(_V3_OP if flavour == "v3" else _V2_OP)
    if flavour == "v3":
        c.execute(
            "CREATE TABLE rocpd_api (id integer PRIMARY KEY, pid integer, tid integer, start integer, end integer, "
            "apiName_id integer, args_id integer, category_id integer, domain_id integer)"
        )
        c.execute(
            "CREATE TABLE rocpd_kernelapi (api_ptr_id integer PRIMARY KEY, stream varchar(18), gridX integer, "
            "gridY integer, gridZ integer, workgroupX integer, workgroupY integer, workgroupZ integer, "
            "groupSegmentSize integer, privateSegmentSize integer, kernelName_id integer)"
        )
        c.execute(
            "CREATE TABLE rocpd_copyapi (api_ptr_id integer PRIMARY KEY, stream varchar(18), size integer, "
            "width integer, height integer, kind integer, dst varchar(18), src varchar(18), dstDevice integer, "
            "srcDevice integer, sync bool, pinned bool)"
        )
        c.execute("CREATE TABLE rocpd_ustring (id integer PRIMARY KEY, string text)")
    else:
        c.execute(
            "CREATE TABLE rocpd_api (id INTEGER PRIMARY KEY, pid INTEGER, tid INTEGER, start INTEGER, end INTEGER, "
            "apiName_id INTEGER, args_id INTEGER)"
        )
        c.execute(
            "CREATE TABLE rocpd_kernelapi (api_id INTEGER PRIMARY KEY, stream TEXT, gridX INTEGER, gridY INTEGER, "
            "gridZ INTEGER, workgroupX INTEGER, workgroupY INTEGER, workgroupZ INTEGER, groupSegmentSize INTEGER, "
            "privateSegmentSize INTEGER, kernelName_id INTEGER)"
        )
        c.execute(
            "CREATE TABLE rocpd_copyapi (api_id INTEGER PRIMARY KEY, stream TEXT, size INTEGER, dst TEXT, src TEXT, "
            "kind INTEGER, sync INTEGER)"
        )
    c.execute("CREATE TABLE rocpd_api_ops (id INTEGER PRIMARY KEY, api_id INTEGER, op_id INTEGER)")
    c.execute("CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT)")
    c.execute(
        "CREATE TABLE rocpd_monitor (id INTEGER PRIMARY KEY, deviceType TEXT, deviceId INTEGER, monitorType TEXT, "
        "start INTEGER, end INTEGER, value TEXT)"
    )
    if flavour == "v2":
        c.execute(
            "CREATE TABLE rocpd_kernelcodeobject (id integer PRIMARY KEY, vgpr integer, sgpr integer, fbar integer)"
        )
        c.execute(
            "CREATE TABLE rocpd_barrierop (op_ptr_id integer PRIMARY KEY, signalCount integer, "
            "aquireFence varchar(8), releaseFence varchar(8))"
        )
        c.execute("CREATE TABLE rocpd_op_inputSignals (id integer PRIMARY KEY, from_op_id integer, to_op_id integer)")
    if flavour == "rtl":
        c.execute(
            "CREATE VIEW top AS SELECT s.string AS Name, COUNT(*) AS Calls "
            "FROM rocpd_op o JOIN rocpd_string s ON o.description_id = s.id GROUP BY s.string"
        )
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
            c.execute("INSERT INTO rocpd_string (id, string) VALUES (?, ?)", (strings[s], s))
        return strings[s]

    empty = sid("")
    ops = []
    op_id = 0
    for k in kernels:
        op_id += 1
        desc = empty if flavour == "v3" else sid(k["name"])
        ops.append((op_id, 0, k["queue"], k["dispatch"], "0x0", k["start"], k["end"], desc, sid("KernelExecution")))
        c.execute(
            "INSERT INTO rocpd_api (id, pid, tid, start, end, apiName_id, args_id) VALUES (?,?,?,?,?,?,?)",
            (op_id, 908, k["thread"], k["start"] - 5000, k["start"] - 1000, sid("hipLaunchKernel"), empty),
        )
        key = "api_ptr_id" if flavour == "v3" else "api_id"
        c.execute(
            f"INSERT INTO rocpd_kernelapi ({key}, stream, gridX, gridY, gridZ, workgroupX, workgroupY, workgroupZ, "
            "groupSegmentSize, privateSegmentSize, kernelName_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                op_id,
                str(k["stream"]),
                k["grid"]["x"],
                k["grid"]["y"],
                k["grid"]["z"],
                k["wg"]["x"],
                k["wg"]["y"],
                k["wg"]["z"],
                0,
                0,
                sid(k["name"]),
            ),
        )
        c.execute("INSERT INTO rocpd_api_ops (api_id, op_id) VALUES (?, ?)", (op_id, op_id))
    for cp in copies:
        op_id += 1
        kind = {"MEMORY_COPY_HOST_TO_DEVICE": "CopyHostToDevice", "MEMORY_COPY_DEVICE_TO_HOST": "CopyDeviceToHost"}.get(
            cp["direction"], "CopyDeviceToDevice"
        )
        if flavour == "rtl":
            kind = "CopyDeviceToDevice"
        ops.append((op_id, 0, 0, 0, "0x0", cp["start"], cp["end"], sid(f"{kind}:4096"), sid(kind)))
    # a host marker (gpuId -1) that must be ignored
    op_id += 1
    ops.append(
        (
            op_id,
            -1,
            0,
            0,
            "0x0",
            kernels[0]["start"] - 10**9,
            kernels[-1]["end"] + 10**9,
            sid("step"),
            sid("UserMarker"),
        )
    )
    if flavour == "v3":
        c.executemany(
            "INSERT INTO rocpd_op (id, gpuId, queueId, sequenceId, start, end, description_id, opType_id) "
            "VALUES (?,?,?,?,?,?,?,?)",
            [o[:4] + o[5:] for o in ops],
        )
        c.execute("INSERT INTO rocpd_metadata (tag, value) VALUES ('schema_version', '3')")
    else:
        c.executemany("INSERT INTO rocpd_op VALUES (?,?,?,?,?,?,?,?,?)", ops)
    c.execute("INSERT INTO rocpd_metadata (tag, value) VALUES ('pid', '908')")
    con.commit()
    con.close()
    data = tmp.read_bytes()
    tmp.unlink()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize(
    "flavour,name,names,gz",
    [
        ("rtl", "trace.db.gz", "demangled_kernel_name", True),
        ("v2", "trace.rpd", "formatted_kernel_name", False),
        ("v3", "trace.rpd", "formatted_kernel_name", False),
    ],
)
def test_same_kernels_same_numbers_json_csv_sqlite(tmp_path, doc, json_out, flavour, name, names, gz):
    db = write_db(tmp_path / name, rp.dispatch_rows(doc, names), rp.copy_rows(doc), flavour, gz=gz)
    t = read_trace(db)
    assert t.fmt == "rpd_sqlite"
    assert int(t.is_cat("kernel").sum()) == 43915 and int(t.is_cat("gpu_memcpy").sum()) == len(rp.copy_rows(doc))
    out = tmp_path / "db_out"
    analyze_trace(db, out)
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    k = rp.write_kernel_csv(csv_dir / "908_kernel_trace.csv", rp.dispatch_rows(doc))
    rp.write_copy_csv(csv_dir / "908_memory_copy_trace.csv", rp.copy_rows(doc))
    analyze_trace(k, tmp_path / "csv_out")
    for rep in ("kernel_summary.csv", "kernel_summary_by_category.csv"):
        for other in (json_out, tmp_path / "csv_out"):
            diffs = conformance.compare_csv(out / rep, other / rep)
            assert not diffs, "\n".join(diffs)
    tj, tc, td = rp.timeline_rows(json_out), rp.timeline_rows(tmp_path / "csv_out"), rp.timeline_rows(out)
    assert tj["memory"] > 0
    for row in ("kernel", "memory", "busy_time"):
        assert td[row] == pytest.approx(tj[row], rel=1e-12), row
        assert td[row] == pytest.approx(tc[row], rel=1e-12), row
    assert td["total_time"] == pytest.approx(tc["total_time"], rel=1e-12)  # both: span of the GPU work
    a = json.loads((out / "analysis.json").read_text())
    assert a["device"] == "gpu" and a["top_ops"][0]["name"] == "ncclDevKernel_Generic_1"
    aj = json.loads((json_out / "analysis.json").read_text())
    # memcpy = the copies plus ROCm's legacy copy kernels (TraceLens's PyTorch rule)
    assert a["timeline"]["total_memcpy_time"] > tj["memory"]
    for key in (
        "computation_time",
        "total_comm_time",
        "total_memcpy_time",
        "exposed_comm_time",
        "exposed_memcpy_time",
        "busy_time",
    ):
        assert a["timeline"][key] == pytest.approx(aj["timeline"][key], rel=1e-9), key
    assert a["categories"] == aj["categories"] and a["top_ops"] == aj["top_ops"]
    assert (LITE_NOTE in a["notes"]) == (flavour == "rtl")
    if flavour == "v3":
        assert any("schema v3" in n for n in a["notes"])


def test_lite_rule(tmp_path, doc):
    k = rp.dispatch_rows(doc)[:100]
    # rtl tables under another name: not lite unless its metadata says so
    p = write_db(tmp_path / "run1.db", k, [], "rtl")
    assert not read_trace(p).metadata["heavy"]["lite"]
    con = sqlite3.connect(p)
    con.execute("INSERT INTO rocpd_metadata (tag, value) VALUES ('mode', 'lite')")
    con.commit()
    con.close()
    assert read_trace(p).metadata["heavy"]["lite"]
    # an rpd v2 database named trace.db has rpd marks: not lite
    assert not read_trace(write_db(tmp_path / "trace.db", k, [], "v2")).metadata["heavy"]["lite"]


def test_bad_databases(tmp_path, capsys):
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE rocpd_info_node (id INTEGER, hostname TEXT)")
    con.execute("CREATE TABLE rocpd_kernel_dispatch (id INTEGER, start INTEGER, end INTEGER)")
    con.commit()
    con.close()
    noop = tmp_path / "noops.rpd"
    con = sqlite3.connect(noop)
    con.execute("CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT)")
    con.execute("CREATE TABLE rocpd_op (id INTEGER PRIMARY KEY, gpuId INTEGER, start INTEGER, end INTEGER)")
    con.commit()
    con.close()
    empty = write_db(
        tmp_path / "empty_trace.db",
        [
            {
                "name": "k",
                "queue": 0,
                "dispatch": 1,
                "start": 1,
                "end": 2,
                "thread": 1,
                "stream": 0,
                "grid": {"x": 1, "y": 1, "z": 1},
                "wg": {"x": 1, "y": 1, "z": 1},
            }
        ],
        [],
        "rtl",
    )
    con = sqlite3.connect(empty)
    con.execute("DELETE FROM rocpd_op WHERE gpuId >= 0")
    con.commit()
    con.close()
    garbage = tmp_path / "trace.rpd.gz"
    garbage.write_bytes(gzip.compress(b"SQLite format 3\x00" + b"\x07" * 300))
    notsqlite = tmp_path / "x.db"
    notsqlite.write_bytes(b"hello")
    bad = [other, noop, empty, garbage, notsqlite]
    for p in bad:
        with pytest.raises(TraceError) as ei:
            read_trace(p)
        assert ei.value.path == p and ei.value.reason
    # rocprofv3's rocpd database goes to its own reader (readers/rocpd_db.py), which names what is missing
    with pytest.raises(
        TraceError, match="rocpd database without rocpd_kernel_dispatch, rocpd_info_kernel_symbol or rocpd_string"
    ):
        read_trace(other)
    assert analyze_paths(bad, tmp_path / "out") == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == len(bad) and all(ln.startswith("error: ") for ln in err), err


def test_cli_analyze_accepts_all_formats(tmp_path, doc):
    from traceladder.cli.main import main

    k = rp.dispatch_rows(doc)[:500]
    files = [
        rp.REF_JSON,
        rp.write_kernel_csv(tmp_path / "908_kernel_trace.csv", k),
        write_db(tmp_path / "trace.db.gz", k, [], "rtl", gz=True),
        write_db(tmp_path / "trace.rpd", k, [], "v3"),
    ]
    rc = main(["analyze", *map(str, files), "--out", str(tmp_path / "out")])
    assert rc == 0
    for d in ("908_results", "908_kernel_trace", "trace", "trace-2"):
        a = json.loads((tmp_path / "out" / d / "analysis.json").read_text())
        assert a["device"] == "gpu" and a["top_ops"], d
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    assert main(["analyze", str(bad), "--out", str(tmp_path / "out2")]) == 2
