"""Stand-in for rocm-trace-lite's `rtl` CLI (the `rocm_trace_lite` wheel's console script) in the
test image: the contract madengine's
`rocm_trace_lite` tool uses, and its output files where the real tool writes them.

    rtl trace [--mode MODE] -o PATH/trace.db [--] COMMAND...
    rtl --version

It accepts what the upstream table says rocm-trace-lite v0.3.3 (VERSION) accepts: the `rtl_flag`
rows and the `rtl_mode` rows whose detail says "accepted by" this version (so the modes lite,
default and full; not standard or hip), with the aliases the detail lists (`-m`, `--output`).
The table is upstream_table.py's: in the wheel, that module and `upstream_facts.csv` (the table's
rtl rows) beside this file (docker/images.py build_rtl_standin_wheel); from the checkout,
testkit/standin/upstream_table.py and the checkout's table.

Like the real one, it strips every `--` token from COMMAND before running it, so a wrapped
`primus-cli direct --log_file F -- train ...` must still parse without its `--`. The tests build
a wheel of this package (docker/images.py) and install it in the runner image only when asked, as
madengine's pre-script installs the GitHub-release wheel: it is in no Primus image.

Anything else, a missing `-o` or an empty command exit 2 with one line. It runs COMMAND (output passes
through, its exit code is returned) and writes PATH/trace.db (SQLite, RPD style, ns times:
rocpd_string, rocpd_op, rocpd_api, rocpd_api_ops, rocpd_kernelapi, rocpd_copyapi, rocpd_metadata,
rocpd_monitor, views `top` and `busy`), beside trace_summary.txt and trace.json.gz.
"""

import gzip
import json
import os
import sqlite3
import subprocess
import sys
import time

try:  # the wheel
    from rocm_trace_lite import upstream_table
except ImportError:  # the checkout: testkit/standin/upstream_table.py
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", ".."))
    import upstream_table

SCHEMA = """
CREATE TABLE rocpd_string(id integer PRIMARY KEY, string varchar(4096) NOT NULL);
CREATE TABLE rocpd_op(id integer PRIMARY KEY, gpuId integer, queueId integer, sequenceId integer,
  completionSignal varchar(18), start integer, end integer, description_id integer, opType_id integer);
CREATE TABLE rocpd_api(id integer PRIMARY KEY, pid integer, tid integer, start integer, end integer,
  apiName_id integer, args_id integer);
CREATE TABLE rocpd_api_ops(id integer PRIMARY KEY, api_id integer, op_id integer);
CREATE TABLE rocpd_kernelapi(api_id integer PRIMARY KEY, stream varchar(18), gridX integer, gridY integer,
  gridZ integer, workgroupX integer, workgroupY integer, workgroupZ integer, groupSegmentSize integer,
  privateSegmentSize integer, kernelArgAddress varchar(18), aquireFence varchar(8), releaseFence varchar(8),
  codeObject_id integer, kernelName_id integer);
CREATE TABLE rocpd_copyapi(api_id integer PRIMARY KEY, stream varchar(18), size integer, width integer,
  height integer, kind integer, dst varchar(18), src varchar(18), dstDevice integer, srcDevice integer,
  sync bool, pinned bool);
CREATE TABLE rocpd_metadata(id integer PRIMARY KEY, tag varchar(4096), value varchar(4096));
CREATE TABLE rocpd_monitor(id integer PRIMARY KEY, deviceType varchar(16), deviceId integer,
  monitorType varchar(16), start integer, end integer, value varchar(255));
CREATE VIEW top AS SELECT s.string AS name, count(*) AS calls, sum(o.end - o.start) AS total_ns
  FROM rocpd_op o JOIN rocpd_string s ON s.id = o.description_id GROUP BY name ORDER BY total_ns DESC;
CREATE VIEW busy AS SELECT gpuId, sum(end - start) AS busy_ns, max(end) - min(start) AS span_ns
  FROM rocpd_op WHERE gpuId >= 0 GROUP BY gpuId;
"""


def die(msg):
    print(f"rtl: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


VERSION = "0.3.3"


def accepted(kind):
    """The table's rows of `kind` that this version accepts."""
    return [r for r in upstream_table.rows(kind) if f"v{VERSION}" in upstream_table.accepted_by(r)]


def spellings():
    """Each accepted option spelling -> its row's name (the sub-command `trace` too)."""
    return {s: r["name"] for r in accepted("rtl_flag") for s in (r["name"], *upstream_table.aliases(r))}


def main():
    argv = sys.argv[1:]
    known = spellings()
    modes = {r["name"] for r in accepted("rtl_mode")}
    if argv[:1] and known.get(argv[0]) == "--version":
        print(f"rocm-trace-lite {VERSION}")
        return 0
    if argv[:1] != ["trace"] or known.get("trace") != "trace":
        die(f"expected sub-command 'trace', got {argv[:1]}")
    i, mode, out = 1, "lite", None
    while i < len(argv) and argv[i].startswith("-"):
        token, inline = argv[i], None
        if token.startswith("--") and "=" in token:
            token, inline = token.split("=", 1)
        name = known.get(token)
        if name == "--":
            i += 1
            break
        if name not in ("--mode", "-o"):
            die(f"unrecognized option {argv[i]!r}")
        if inline is None and i + 1 >= len(argv):
            die(f"argument {token}: expected one argument")
        value = inline if inline is not None else argv[i + 1]
        i += 1 if inline is not None else 2
        if name == "--mode":
            if value not in modes:
                die(f"argument {token}: invalid choice: {value!r} (choose from {', '.join(sorted(modes))})")
            mode = value
        else:
            out = value
    command = [a for a in argv[i:] if a != "--"]  # rtl drops every `--` token
    if out is None:
        die("-o PATH/trace.db is required")
    if not out.endswith(".db"):
        die(f"-o {out}: expected a .db path")
    if not command:
        die("no command to trace")
    out_dir = os.path.dirname(os.path.abspath(out))
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time_ns()
    proc = subprocess.Popen(command, env={**os.environ, "LD_PRELOAD_STANDIN": "librtl.so"})
    code = proc.wait()
    t1 = time.time_ns()
    if os.path.exists(out):
        os.unlink(out)
    db = sqlite3.connect(out)
    db.executescript(SCHEMA)
    strings = [
        "",
        "KernelExecution",
        "UserMarker",
        "CopyDeviceToDevice",
        "hipLaunchKernel",
        "Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI32x32x8x1",
        "void at::native::elementwise_kernel<128, 4>",
        "hipMemcpyAsync",
    ]
    db.executemany("INSERT INTO rocpd_string(id, string) VALUES (?, ?)", list(enumerate(strings, start=1)))
    span = max(t1 - t0, 1_000_000)
    n = 30
    for k in range(n):
        start = t0 + span * k // (n + 1)
        end = start + span // (3 * n)
        name_id = 6 if k % 2 == 0 else 7
        db.execute(
            "INSERT INTO rocpd_api VALUES (?,?,?,?,?,?,?)",
            (k + 1, proc.pid, proc.pid, start - 4000, start - 1000, 5, 1),
        )
        db.execute("INSERT INTO rocpd_op VALUES (?,?,?,?,?,?,?,?,?)", (k + 1, 0, 0, k, "0x0", start, end, name_id, 2))
        db.execute("INSERT INTO rocpd_api_ops(api_id, op_id) VALUES (?, ?)", (k + 1, k + 1))
        db.execute(
            "INSERT INTO rocpd_kernelapi VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (k + 1, "0x1", 262144, 1, 1, 256, 1, 1, 0, 0, "0x0", "", "", 0, name_id),
        )
    db.execute("INSERT INTO rocpd_op VALUES (?,?,?,?,?,?,?,?,?)", (n + 1, -1, -1, 0, "", t0, t1, 1, 3))
    db.execute("INSERT INTO rocpd_api VALUES (?,?,?,?,?,?,?)", (n + 1, proc.pid, proc.pid, t0 + 10, t0 + 900, 8, 1))
    db.execute("INSERT INTO rocpd_op VALUES (?,?,?,?,?,?,?,?,?)", (n + 2, 0, 0, n, "0x0", t0 + 1000, t0 + 60000, 8, 4))
    db.execute("INSERT INTO rocpd_api_ops(api_id, op_id) VALUES (?, ?)", (n + 1, n + 2))
    db.execute(
        "INSERT INTO rocpd_copyapi VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (n + 1, "0x1", 1 << 20, 0, 0, 1, "0x2", "0x3", 0, 0, 0, 0),
    )
    db.executemany(
        "INSERT INTO rocpd_metadata(tag, value) VALUES (?, ?)",
        [
            ("schema_version", "2"),
            ("tool", "rocm-trace-lite"),
            ("version", VERSION),
            ("mode", mode),
            ("note", "lite mode skips packets that carry a completion signal; RCCL kernels are likely missing"),
        ],
    )
    db.execute("INSERT INTO rocpd_monitor VALUES (1, 'gpu', 0, 'sclk', ?, ?, '2100')", (t0, t1))
    db.commit()
    db.close()
    with open(os.path.join(out_dir, "trace_summary.txt"), "w") as f:
        f.write(f"rocm-trace-lite (stand-in) mode={mode} ops={n + 2} span_ns={t1 - t0}\n")
    with gzip.open(os.path.join(out_dir, "trace.json.gz"), "wt") as f:
        json.dump({"traceEvents": []}, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
