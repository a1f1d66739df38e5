"""rocprofv3's rocpd SQLite database (``<pid>_results.db``, ROCm 7's default output).

No real database exists here, so the fixture is built from the schema that ROCm's
rocprofiler-sdk writes (its rocpd data-model SQL, schema_version 3: uuid-suffixed tables and a view
without the suffix for each), filled from the reference rocprofv3 JSON (plus the copies that
test_rocprof_json.add_copies adds): same dispatches, same ns times, the symbols'
``formatted_kernel_name`` as ``display_name``, the copy directions as rocpd strings, and the
process's init/fini. The same kernels must then give the same three rocprof reports as the JSON.
"""

from __future__ import annotations

import gzip
import importlib.util
import sqlite3
from pathlib import Path

import pytest

from traceladder.analysis.analyzers.trace import analyze_trace, read_trace
from traceladder.analysis.model.events import TraceError

_here = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("rocprof_tests", _here / "test_rocprof_json.py")
rp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rp)
conformance = rp.conformance

UUID = "_0195f2a1_7c3e_7d40_9a1b_3c5d7e9f1a2b"
# rocprofiler-sdk's rocpd tables (schema 3), the columns this fixture fills; each gets the uuid suffix
TABLES = {
    "rocpd_metadata": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "tag" TEXT NOT NULL, "value" TEXT NOT NULL',
    "rocpd_string": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "string" TEXT NOT NULL UNIQUE',
    "rocpd_info_node": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "hash" BIGINT NOT NULL UNIQUE, '
    '"machine_id" TEXT NOT NULL UNIQUE, "hostname" TEXT',
    "rocpd_info_process": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER NOT NULL, '
    '"ppid" INTEGER, "pid" INTEGER NOT NULL, '
    '"init" BIGINT, "fini" BIGINT, "start" BIGINT, "end" BIGINT, "command" TEXT',
    "rocpd_info_agent": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER NOT NULL, '
    '"pid" INTEGER NOT NULL, "type" TEXT, "absolute_index" INTEGER, "name" TEXT, "product_name" TEXT',
    "rocpd_info_queue": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER NOT NULL, '
    '"pid" INTEGER NOT NULL, "name" TEXT',
    "rocpd_info_stream": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER NOT NULL, '
    '"pid" INTEGER NOT NULL, "name" TEXT',
    "rocpd_info_code_object": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER NOT NULL, '
    '"pid" INTEGER NOT NULL, "uri" TEXT',
    "rocpd_info_kernel_symbol": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER NOT NULL, '
    '"pid" INTEGER NOT NULL, "code_object_id" INTEGER NOT NULL, "kernel_name" TEXT, "display_name" TEXT',
    "rocpd_kernel_dispatch": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER NOT NULL, '
    '"pid" INTEGER NOT NULL, "tid" INTEGER, '
    '"agent_id" INTEGER NOT NULL, "kernel_id" INTEGER NOT NULL, "dispatch_id" INTEGER NOT NULL, '
    '"queue_id" INTEGER NOT NULL, "stream_id" INTEGER NOT NULL, "start" BIGINT NOT NULL, "end" BIGINT NOT NULL, '
    '"workgroup_size_x" INTEGER NOT NULL, "workgroup_size_y" INTEGER NOT NULL, "workgroup_size_z" INTEGER NOT NULL, '
    '"grid_size_x" INTEGER NOT NULL, "grid_size_y" INTEGER NOT NULL, "grid_size_z" INTEGER NOT NULL, '
    '"region_name_id" INTEGER, "event_id" INTEGER',
    "rocpd_memory_copy": '"id" INTEGER PRIMARY KEY AUTOINCREMENT, "guid" TEXT, "nid" INTEGER NOT NULL, '
    '"pid" INTEGER NOT NULL, "tid" INTEGER, '
    '"start" BIGINT NOT NULL, "end" BIGINT NOT NULL, "name_id" INTEGER NOT NULL, "dst_agent_id" INTEGER, '
    '"src_agent_id" INTEGER, "size" INTEGER NOT NULL, "queue_id" INTEGER, "stream_id" INTEGER, "event_id" INTEGER',
}


def write_rocpd(path: Path, doc: dict, views: bool = True) -> Path:
    tool = doc["rocprofiler-sdk-tool"][0]
    md, br = tool["metadata"], tool["buffer_records"]
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    for name, cols in TABLES.items():
        con.execute(f'CREATE TABLE "{name}{UUID}" ({cols})')
        if views:
            con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM "{name}{UUID}"')
    t = {name: f'"{name}{UUID}"' for name in TABLES}
    con.executemany(
        f"INSERT INTO {t['rocpd_metadata']} (tag, value) VALUES (?, ?)", [("schema_version", "3"), ("uuid", UUID[1:])]
    )
    con.execute(f"INSERT INTO {t['rocpd_info_node']} (id, hash, machine_id, hostname) VALUES (1, 42, 'm', 'host')")
    con.execute(
        f"INSERT INTO {t['rocpd_info_process']} (id, nid, pid, init, fini, command) VALUES (1, 1, ?, ?, ?, 'python3')",
        (md["pid"], md["init_time"], md["fini_time"]),
    )
    agents = sorted({d["dispatch_info"]["agent_id"]["handle"] for d in br["kernel_dispatch"]})
    agent_id = {h: i + 1 for i, h in enumerate(agents)}
    con.executemany(
        f"INSERT INTO {t['rocpd_info_agent']} (id, nid, pid, type, absolute_index, name) "
        "VALUES (?, 1, 1, 'GPU', ?, 'gfx942')",
        [(i, i - 1) for i in agent_id.values()],
    )
    queues = sorted({d["dispatch_info"]["queue_id"]["handle"] for d in br["kernel_dispatch"]})
    streams = sorted(
        {d["stream_id"]["handle"] for d in br["kernel_dispatch"]}
        | {c["stream_id"]["handle"] for c in br.get("memory_copy", []) if "stream_id" in c}
    )
    con.executemany(f"INSERT INTO {t['rocpd_info_queue']} (id, nid, pid) VALUES (?, 1, 1)", [(q + 1,) for q in queues])
    con.executemany(
        f"INSERT INTO {t['rocpd_info_stream']} (id, nid, pid) VALUES (?, 1, 1)", [(s + 1,) for s in streams]
    )
    con.execute(f"INSERT INTO {t['rocpd_info_code_object']} (id, nid, pid, uri) VALUES (1, 1, 1, 'file:///x.co')")
    con.executemany(
        f"INSERT INTO {t['rocpd_info_kernel_symbol']} (id, nid, pid, code_object_id, kernel_name, display_name) "
        "VALUES (?, 1, 1, 1, ?, ?)",
        [(k["kernel_id"] + 1, k["kernel_name"], k["formatted_kernel_name"]) for k in tool["kernel_symbols"]],
    )
    con.executemany(
        f"INSERT INTO {t['rocpd_kernel_dispatch']} (nid, pid, tid, agent_id, kernel_id, dispatch_id, queue_id, "
        'stream_id, start, "end", '
        "workgroup_size_x, workgroup_size_y, workgroup_size_z, grid_size_x, grid_size_y, grid_size_z) "
        "VALUES (1, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                d["thread_id"],
                agent_id[d["dispatch_info"]["agent_id"]["handle"]],
                d["dispatch_info"]["kernel_id"] + 1,
                d["dispatch_info"]["dispatch_id"],
                d["dispatch_info"]["queue_id"]["handle"] + 1,
                d["stream_id"]["handle"] + 1,
                d["start_timestamp"],
                d["end_timestamp"],
                *d["dispatch_info"]["workgroup_size"].values(),
                *d["dispatch_info"]["grid_size"].values(),
            )
            for d in br["kernel_dispatch"]
        ],
    )
    strings: dict[str, int] = {}
    for c in rp.copy_rows(doc):
        sid = strings.setdefault(c["direction"], len(strings) + 1)
        con.execute(f"INSERT OR IGNORE INTO {t['rocpd_string']} (id, string) VALUES (?, ?)", (sid, c["direction"]))
        con.execute(
            f'INSERT INTO {t["rocpd_memory_copy"]} (nid, pid, start, "end", name_id, dst_agent_id, size, stream_id) '
            "VALUES (1, 1, ?, ?, ?, 1, 4096, 1)",
            (c["start"], c["end"], sid),
        )
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("views", [True, False], ids=["views", "suffixed-tables-only"])
def test_rocpd_database_gives_the_json_reports(tmp_path, doc, json_out, views):
    db = write_rocpd(tmp_path / "908_results.db", doc, views=views)
    t = read_trace(db)
    assert t.fmt == "rocpd_sqlite"
    n_copies = len(rp.copy_rows(doc))
    assert int(t.is_cat("kernel").sum()) == 43915 and int(t.is_cat("gpu_memcpy").sum()) == n_copies > 0
    out = tmp_path / "out"
    analyze_trace(db, out)
    for rep in rp.REPORTS:  # gpu_timeline (total from init..fini too), kernel_summary, by category
        diffs = conformance.compare_csv(out / rep, json_out / rep)
        assert not diffs, "\n".join(diffs)
    assert rp.timeline_rows(out)["memory"] > 0


def test_gzipped_rocpd_database_and_a_newer_schema(tmp_path, doc):
    db = write_rocpd(tmp_path / "908_results.db", doc)
    gz = tmp_path / "host.908_results.db.gz"
    gz.write_bytes(gzip.compress(db.read_bytes()))
    assert read_trace(gz).fmt == "rocpd_sqlite"
    # a schema whose dispatches carry start_id/end_id instead of start/end is refused in one line
    con = sqlite3.connect(tmp_path / "v4.db")
    con.execute("CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY, string TEXT)")
    con.execute("CREATE TABLE rocpd_info_kernel_symbol (id INTEGER PRIMARY KEY, kernel_name TEXT, display_name TEXT)")
    con.execute(
        "CREATE TABLE rocpd_kernel_dispatch (id INTEGER PRIMARY KEY, track_id INTEGER, kernel_id INTEGER, "
        "start_id INTEGER, end_id INTEGER)"
    )
    con.execute("CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT)")
    con.execute("INSERT INTO rocpd_metadata (tag, value) VALUES ('schema_version', '4.0.0')")
    con.commit()
    con.close()
    with pytest.raises(TraceError, match="rocpd schema_version 4.0.0: kernel dispatches carry no start/end columns"):
        read_trace(tmp_path / "v4.db")
