"""Collectives across ranks (``traceladder analyze-ranks``): TraceLens v1.0.0 multi-rank
semantics (NcclAnalyser + the multi-rank report script), skew and stragglers.

GPU traces are synthetic kineto traces written here (record_param_comms -> launch ->
NCCL kernel carrying the comm args, as PyTorch writes them), with one rank late by a
known amount, so every number is known in advance.  CPU traces come from real gloo runs:
2 ranks under torch.profiler (generated here), and the CPU proxy workload's 2-rank run.
"""

from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from traceladder.core.documents import RankCollectives

from traceladder.analysis.analyzers.ranks import MultiRankError, analyze_ranks
from traceladder.analysis.readers.collectives import collective_events
from traceladder.analysis.analyzers.trace import read_trace
from traceladder.cli.main import main as cli_main
from traceladder.core.ports import free_port
from tests.conftest import REPO_ROOT

REPO = REPO_ROOT
PY = sys.executable

# -- synthetic GPU traces --------------------------------------------------------------
KERNEL = {
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "all_to_all": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
    "_allgather_base": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
}
BASE = 1_000_000.0  # us


def _pg_ranks(ranks):
    return "[" + ", ".join(str(r) for r in ranks) + "]"


def gpu_trace(rank: int, world: int, colls: list[dict], device_props: int = 8, dist_info: bool = True) -> dict:
    """colls: dicts with name, pg, ranks, dtype, in_n, out_n, ts (per rank), dur (per rank)."""
    pid, tid, gpid = 100 + rank, 100 + rank, 0
    ev = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "main"}},
    ]
    corr = 1000
    for c in colls:
        if rank not in c["ranks"]:
            continue
        corr += 1
        ts, dur = c["ts"][rank], c["dur"][rank]
        comm = {
            "Collective name": c["name"],
            "Process Group Name": c["pg"],
            "Process Group Ranks": _pg_ranks(c["ranks"]),
            "Group size": len(c["ranks"]),
            "dtype": c["dtype"],
            "In msg nelems": c["in_n"],
            "Out msg nelems": c["out_n"],
            "In split size": "[]",
            "Out split size": "[]",
            "Rank": rank,
        }
        host = ts - 50.0
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "record_param_comms",
                "pid": pid,
                "tid": tid,
                "ts": host,
                "dur": 20.0,
                "args": {"External id": corr, **comm},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": pid,
                "tid": tid,
                "ts": host + 5.0,
                "dur": 5.0,
                "args": {"External id": corr, "correlation": corr},
            }
        )
        ev.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": host + 5.0, "cat": "ac2g", "name": "ac2g"})
        ev.append({"ph": "f", "id": corr, "pid": gpid, "tid": 7, "ts": ts, "cat": "ac2g", "name": "ac2g", "bp": "e"})
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": KERNEL[c["name"]],
                "pid": gpid,
                "tid": 7,
                "ts": ts,
                "dur": dur,
                "args": {"External id": corr, "correlation": corr, "device": 0, "stream": 7, **comm},
            }
        )
        # a compute kernel between collectives (not a collective)
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "Cijk_gemm",
                "pid": gpid,
                "tid": 7,
                "ts": ts + dur + 1.0,
                "dur": 3.0,
                "args": {"External id": corr + 500, "correlation": corr + 500, "stream": 7},
            }
        )
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, "name": "AMD Instinct MI300X"} for i in range(device_props)],
        "traceEvents": ev,
    }
    if dist_info:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return doc


def write_traces(d: Path, world: int, colls: list[dict], name="trace_rank{r}.json", gz=False, **kw) -> list[Path]:
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(world):
        p = d / name.format(r=r)
        data = json.dumps(gpu_trace(r, world, colls, **kw)).encode()
        p.write_bytes(gzip.compress(data) if gz else data)
        paths.append(p)
    return paths


def late_collectives(
    world: int, late: int, delay: float, n_ar: int = 3, n_a2a: int = 2, subgroups: bool = False
) -> list[dict]:
    """Collectives where rank ``late`` starts ``delay`` us after the others; the early
    ranks' kernels wait for it, so every rank ends together (end skew 0) and the late
    rank's kernel is the shortest (comm_latency = its duration)."""
    kinds, a, b = [], n_ar, n_a2a
    while a or b:  # alternate: allreduce, all_to_all, allreduce, ...
        if a:
            kinds.append(True)
            a -= 1
        if b:
            kinds.append(False)
            b -= 1
    colls = []
    t = BASE
    all_r = list(range(world))
    for is_ar in kinds:
        D = 100.0 if is_ar else 200.0
        if is_ar:
            groups = [("0", all_r)]
            spec = dict(name="allreduce", dtype="Float", in_n=1048576, out_n=1048576)
        else:
            half = world // 2
            groups = [("1", all_r[:half]), ("2", all_r[half:])] if subgroups else [("0", all_r)]
            spec = dict(name="all_to_all", dtype="BFloat16", in_n=2097152, out_n=2097152)
        for pg, members in groups:
            ts = {r: t + (delay if r == late else 0.0) for r in members}
            dur = {r: D + (0.0 if r == late else delay) for r in members}
            if late not in members:  # nobody late in this group: everyone starts together
                ts = {r: t for r in members}
                dur = {r: D for r in members}
            colls.append({**spec, "pg": pg, "ranks": members, "ts": ts, "dur": dur})
        t += 10_000.0
    return colls


def read_csv(p: Path) -> list[dict]:
    with open(p, newline="") as f:
        return list(csv.DictReader(f))


# -- GPU: exact numbers ---------------------------------------------------------------------
@pytest.mark.parametrize("world,late", [(2, 1), (8, 5)])
def test_gpu_late_rank_exact(tmp_path, world, late):
    delay = 250.0
    colls = late_collectives(world, late, delay, n_ar=3, n_a2a=2)
    gz = world == 8
    paths = write_traces(tmp_path / "in", world, colls, name="trace_rank{r}.json" + (".gz" if gz else ""), gz=gz)
    out = tmp_path / "out"
    res = analyze_ranks(list(reversed(paths)), out)  # input order does not matter
    stored = (out / "collectives.json").read_text()  # its class reads every key, and writes the same bytes
    typed = RankCollectives.from_json(stored)
    assert typed.to_json() == stored and typed.extra == {} and typed.to_dict() == res
    assert all(c.extra == {} for c in typed.collectives.values()) and typed.collectives

    assert res["world_size"] == world and res["device"] == "gpu"
    assert res["gpus_per_node"] == 8 and res["gpus_per_node_source"] == "deviceProperties"
    assert res["matched"] == {"collectives": 5, "events": 5 * world, "all_matched": True}
    assert sorted(res["files"]) == sorted(
        [
            "nccl_summary_long.csv",
            "nccl_summary_implicit_sync.csv",
            "straggler_summary.csv",
            "nccl_long.csv",
            "nccl_implicit_sync.csv",
            "stragglers_per_step.csv",
        ]
    )

    sync = read_csv(out / "nccl_implicit_sync.csv")
    assert len(sync) == 5
    ar_bw = (1048576 * 4 / 1024**2 / 1024) / (100.0 / 1e6)  # 4 MiB in 100 us
    a2a_bw = (2097152 * 2 / 1024**2 / 1024) / (200.0 / 1e6)  # 4 MiB in 200 us
    early = max(r for r in range(world) if r != late)
    for row in sync:
        ar = row["Collective name"] == "allreduce"
        assert row["Process Group Name"] == "0"
        assert float(row["comm_latency"]) == (100.0 if ar else 200.0)
        assert float(row["skew in start time"]) == delay
        assert float(row["skew in end time"]) == 0.0
        assert int(row["earliest arrival rank"]) == early  # ties go to the higher rank
        assert float(row["avg_wait_time"]) == pytest.approx(delay * (world - 1) / world)
        assert float(row["Full msg size (MB)"]) == 4.0
        assert float(row["algo bw (GB/s)"]) == pytest.approx(ar_bw if ar else a2a_bw, rel=1e-12)
        factor = 2 * (world - 1) / world if ar else (world - 1) / world
        assert float(row["bus bw (GB/s)"]) == pytest.approx((ar_bw if ar else a2a_bw) * factor, rel=1e-12)
        for r in range(world):
            assert float(row[f"rank_{r}_wait_time"]) == (0.0 if r == late else delay)
        assert row["node_span"] == "intra_node"

    summ = read_csv(out / "nccl_summary_implicit_sync.csv")
    assert [r["Collective name"] for r in summ] == ["all_to_all", "allreduce"]  # by total latency
    by = {r["Collective name"]: r for r in summ}
    assert int(by["allreduce"]["count"]) == 3 and int(by["all_to_all"]["count"]) == 2
    assert float(by["allreduce"]["Total comm latency (ms)"]) == pytest.approx(0.3)
    assert float(by["all_to_all"]["Total comm latency (ms)"]) == pytest.approx(0.4)
    assert float(by["allreduce"]["skew in start time_max"]) == delay
    assert list(summ[0])[:6] == [
        "Collective name",
        "dtype",
        "In msg nelems",
        "Process Group Name",
        "Group size",
        "Full msg size (MB)",
    ]
    assert list(summ[0])[-2:] == ["count", "Total comm latency (ms)"]

    strag = read_csv(out / "straggler_summary.csv")
    assert int(strag[0]["rank"]) == late  # least total wait first
    assert float(strag[0]["total_wait_time_us"]) == 0.0
    assert int(strag[0]["times_arrived_last"]) == 5 and float(strag[0]["pct_arrived_last"]) == 100.0
    others = {int(r["rank"]): r for r in strag[1:]}
    assert set(others) == set(range(world)) - {late}
    for r, row in others.items():
        assert float(row["total_wait_time_us"]) == 5 * delay
        assert int(row["times_arrived_first"]) == (5 if r == early else 0)
        assert int(row["node_id"]) == r // 8
    # kernel durations: the early ranks' kernels include the wait
    assert float(others[early]["total_nccl_dur_us"]) == 3 * 100.0 + 2 * 200.0 + 5 * delay
    assert float(strag[0]["total_nccl_dur_us"]) == 3 * 100.0 + 2 * 200.0

    long_rows = read_csv(out / "nccl_long.csv")
    assert len(long_rows) == 5 * world
    assert list(long_rows[0])[:3] == ["collective_id", "index_in_group", "rank"]
    assert {r["collective_id"] for r in long_rows} == {f"0_{i}" for i in range(5)}
    sl = read_csv(out / "nccl_summary_long.csv")
    assert len(sl) == 2 * world and all(r["node_span"] == "intra_node" for r in sl)
    assert sum(int(r["operation_count"]) for r in sl) == 5 * world

    cj = json.loads((out / "collectives.json").read_text())
    assert cj == res
    ar = cj["collectives"]["allreduce"]
    assert ar["device"] == "gpu" and ar["count"] == 3 and ar["implicit_sync"]
    assert ar["latency_us"]["total"] == 300.0 and ar["latency_us"]["min"] == 100.0
    assert ar["start_skew_us"]["max"] == delay and ar["end_skew_us"]["max"] == 0.0
    assert ar["algo_bw_gbs"]["mean"] == pytest.approx(ar_bw) and ar["bus_bw_gbs"]["mean"] == pytest.approx(
        ar_bw * 2 * (world - 1) / world
    )
    assert ar["wait_us"] == {str(r): (0.0 if r == late else 3 * delay) for r in range(world)}
    assert ar["straggler"]["rank"] == late and ar["straggler"]["times_arrived_last"] == 3
    assert ar["straggler"]["others_waited_us"] == {str(r): 3 * delay for r in range(world) if r != late}
    assert ar["straggler"]["others_waited_max_us"] == 3 * delay
    a2a = cj["collectives"]["all_to_all"]
    assert a2a["count"] == 2 and a2a["latency_us"]["mean"] == 200.0 and a2a["straggler"]["rank"] == late
    assert cj["straggler"]["rank"] == late and cj["straggler"]["num_collectives"] == 5


def test_gpu_subgroups_and_node_columns(tmp_path):
    """all_to_all in two 4-rank process groups ('1': ranks 0-3, '2': ranks 4-7): matched by
    group and order; --gpus-per-node 4 splits the world group across nodes."""
    world, late, delay = 8, 6, 40.0
    colls = late_collectives(world, late, delay, n_ar=2, n_a2a=2, subgroups=True)
    paths = write_traces(tmp_path / "in", world, colls, name="x-rank[{r}].pt.trace.json", dist_info=False)
    out = tmp_path / "out"
    res = analyze_ranks(paths, out, gpus_per_node=4)
    assert res["gpus_per_node"] == 4 and res["gpus_per_node_source"] == "given"
    assert res["process_groups"] == ["0", "1", "2"]
    # 2 allreduce (PG 0) + 2 all_to_all in each of PG 1 and PG 2
    assert res["matched"]["collectives"] == 6 and res["matched"]["events"] == 2 * 8 + 2 * 8
    sync = {r["collective_id"]: r for r in read_csv(out / "nccl_implicit_sync.csv")}
    assert set(sync) == {"0_0", "0_1", "1_0", "1_1", "2_0", "2_1"}
    assert sync["0_0"]["node_span"] == "inter_node" and sync["1_0"]["node_span"] == "intra_node"
    assert float(sync["1_0"]["skew in start time"]) == 0.0  # nobody late in ranks 0-3
    assert float(sync["2_1"]["skew in start time"]) == delay
    assert int(sync["2_1"]["earliest arrival rank"]) == 7
    assert sync["1_0"]["rank_4_ts"] == ""  # not a member
    assert float(sync["2_0"]["bus bw (GB/s)"]) == pytest.approx(float(sync["2_0"]["algo bw (GB/s)"]) * 3 / 4)
    long_rows = read_csv(out / "nccl_long.csv")
    assert {(r["rank"], r["node_id"]) for r in long_rows} == {(str(r), str(r // 4)) for r in range(8)}
    assert res["collectives"]["all_to_all"]["process_groups"] == ["1", "2"]


# -- errors ------------------------------------------------------------------------------
def _cli(args: list[str], capsys) -> tuple[int, str]:
    rc = cli_main(["analyze-ranks", *args])
    err = capsys.readouterr().err.strip()
    return rc, err


def test_errors_one_line(tmp_path, capsys):
    colls = late_collectives(4, 2, 10.0, n_ar=2, n_a2a=1)
    paths = write_traces(tmp_path / "in", 4, colls)
    out = str(tmp_path / "out")

    rc, err = _cli([str(p) for p in paths[:1] + paths[2:]] + ["--out", out], capsys)  # rank 1 missing
    assert rc == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: rank 1") and "missing" in err and "world size 4" in err

    rc, err = _cli([str(p) for p in paths] + [str(paths[3]), "--out", out], capsys)  # rank 3 twice
    assert rc == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: rank 3 ({paths[3]})") and "duplicated" in err

    # rank 2 skips its second collective: its sequence differs
    bad = [dict(c, ranks=[r for r in c["ranks"]]) for c in colls]
    doc = gpu_trace(2, 4, [c for i, c in enumerate(bad) if i != 1])
    doc_path = tmp_path / "in" / "trace_rank2.json"
    doc_path.write_text(json.dumps(doc))
    rc, err = _cli([str(p) for p in paths] + ["--out", out], capsys)
    assert rc == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: rank 2 ({doc_path})") and "sequence differs from rank 0" in err
    assert "#1: 'allreduce', rank 0 has 'all_to_all'" in err

    # same count, different size on rank 2
    doc = gpu_trace(
        2, 4, [dict(c, in_n=c["in_n"] * 2, out_n=c["out_n"] * 2) if i == 0 else c for i, c in enumerate(colls)]
    )
    doc_path.write_text(json.dumps(doc))
    with pytest.raises(MultiRankError) as ei:
        analyze_ranks(paths, Path(out))
    assert ei.value.rank == 2 and "In msg nelems 2097152, rank 0 has 1048576" in str(ei.value)

    doc_path.write_bytes(b'{"traceEvents": [')  # unreadable
    rc, err = _cli([str(p) for p in paths] + ["--out", out], capsys)
    assert rc == 2 and err == f"error: rank 2 ({doc_path}): truncated JSON (file ends early)"

    nameless = tmp_path / "in" / "trace.json"
    nameless.write_text(json.dumps(gpu_trace(0, 1, colls, dist_info=False)))
    rc, err = _cli([str(nameless), "--out", out], capsys)
    assert rc == 2 and err.startswith(f"error: rank unknown ({nameless})") and "no distributedInfo.rank" in err

    rc, err = _cli([str(paths[0]), "--out", out, "--gpus-per-node", "0"], capsys)
    assert rc == 2 and "--gpus-per-node must be a positive integer" in err


def test_rank_from_file_name_forms(tmp_path):
    colls = late_collectives(4, 3, 5.0, n_ar=1, n_a2a=0)
    d = tmp_path / "in"
    d.mkdir()
    names = ["a-rank[0].json", "a-rank-1.json", "a_rank_2.json.gz", "rank3.json"]
    for r, n in enumerate(names):
        data = json.dumps(gpu_trace(r, 4, colls, dist_info=False)).encode()
        (d / n).write_bytes(gzip.compress(data) if n.endswith(".gz") else data)
    res = analyze_ranks([d / n for n in names], tmp_path / "out")
    assert [Path(x["file"]).name for x in res["ranks"]] == names
    assert res["collectives"]["allreduce"]["straggler"]["rank"] == 3


# -- CPU: real gloo traces --------------------------------------------------------------------
GLOO = r"""
import os, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import profile, ProfilerActivity

def worker(rank, world, out, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.ones(4096)
    y = torch.arange(256, dtype=torch.float32)
    dist.all_reduce(x)  # connect before profiling
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        for i in range(3):
            dist.barrier()               # line up, then
            if rank == 1:
                time.sleep(0.05)         # rank 1 arrives late at the allreduce
            dist.all_reduce(x)
            o = torch.empty_like(y)
            dist.all_to_all_single(o, y)
            # uneven splits: rank 0 sends 64 to itself and 192 to rank 1; rank 1 sends 128 and 128
            o2 = torch.empty(192 if rank == 0 else 320)
            dist.all_to_all_single(
                o2, y, [64, 128] if rank == 0 else [192, 128], [64, 192] if rank == 0 else [128, 128]
            )
            parts = [torch.empty(32, dtype=torch.float64) for _ in range(world)]
            dist.all_gather(parts, torch.ones(32, dtype=torch.float64))
    p.export_chrome_trace(f"{out}/gloo-rank{rank}.json")
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(worker, args=(2, sys.argv[1], int(sys.argv[2])), nprocs=2)
"""


@pytest.fixture(scope="module")
def gloo_traces(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("gloo")
    script = d / "gen.py"
    script.write_text(GLOO)
    subprocess.run([PY, str(script), str(d), str(free_port())], check=True, timeout=120, capture_output=True)
    return [d / "gloo-rank0.json", d / "gloo-rank1.json"]


def test_cpu_gloo_every_collective_matched(gloo_traces, tmp_path):
    t = read_trace(gloo_traces[0])
    ev = collective_events(t)
    assert [e["Collective name"] for e in ev if e["name"] != "gloo:barrier"].count("allreduce") == 3
    assert all(e["device"] == "cpu" and e["op"] is not None for e in ev)  # every range has its c10d op
    byname = {e["Collective name"]: e for e in ev}
    assert byname["allreduce"]["In msg nelems"] == 4096 and byname["allreduce"]["dtype"] == "Float"
    assert byname["all_to_all"]["In msg nelems"] == 256 and byname["all_to_all"]["In split size"] == "[]"
    a2av = byname["all_to_allv"]
    assert (a2av["In split size"], a2av["Out split size"]) == ("[64, 192]", "[64, 128]")
    assert (a2av["In msg nelems"], a2av["Out msg nelems"]) == (256, 192)
    assert byname["allgather"]["dtype"] == "Double" and byname["allgather"]["Out msg nelems"] == 64
    assert byname["allreduce"]["Process Group Name"] == "0" and byname["allreduce"]["Group size"] == 2
    # the range's duration is the collective's: it is on a gloo worker thread, not the caller's
    assert byname["allreduce"]["dur"] == t.dur[byname["allreduce"]["event"]]
    assert t.name_of(byname["allreduce"]["event"]) == "gloo:all_reduce"

    out = tmp_path / "out"
    rc = cli_main(["analyze-ranks", *map(str, gloo_traces), "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "collectives.json").read_text())
    assert res["device"] == "cpu" and res["gpus_per_node"] is None  # deviceProperties is [] on CPU
    assert res["matched"] == {"collectives": 15, "events": 30, "all_matched": True}
    assert {k: v["count"] for k, v in res["collectives"].items()} == {
        "barrier": 3,
        "allreduce": 3,
        "all_to_all": 3,
        "all_to_allv": 3,
        "allgather": 3,
    }
    assert res["collectives"]["barrier"]["implicit_sync"] is False
    ar = res["collectives"]["allreduce"]
    # rank 1 slept 50 ms first; 15 ms leaves rank 0 35 ms to leave the barrier late on a loaded
    # machine (with a 20 ms sleep, a CI run measured a 13 ms skew)
    assert ar["device"] == "cpu" and ar["straggler"]["rank"] == 1
    assert ar["wait_us"]["1"] == 0.0 and ar["wait_us"]["0"] > 3 * 15_000
    assert ar["straggler"]["others_waited_us"]["0"] == ar["wait_us"]["0"]
    assert ar["start_skew_us"]["min"] > 15_000
    # TraceLens: the implicit-sync table has allreduce/all_to_all/allgather, not all_to_allv
    sync = read_csv(out / "nccl_implicit_sync.csv")
    assert sorted({r["Collective name"] for r in sync}) == ["all_to_all", "allgather", "allreduce"]
    assert len(sync) == 9
    for r in sync:
        lat = min(float(r["rank_0_dur"]), float(r["rank_1_dur"]))
        assert float(r["comm_latency"]) == lat
        size = float(r["Full msg size (MB)"])
        assert float(r["algo bw (GB/s)"]) == pytest.approx(size / 1024 / (lat / 1e6))
        f = 1.0 if r["Collective name"] == "allreduce" else 0.5
        assert float(r["bus bw (GB/s)"]) == pytest.approx(float(r["algo bw (GB/s)"]) * f)
    a2av = read_csv(out / "nccl_all2allv.csv")
    assert len(a2av) == 3 and (out / "nccl_summary_all2allv.csv").exists()
    strag = read_csv(out / "straggler_summary.csv")
    assert [int(r["num_collectives"]) for r in strag] == [9, 9]


def test_cpu_proxy_two_ranks(tmp_path):
    """The CPU proxy workload (EP=2, both ranks profiled): every collective matched."""
    ws = tmp_path / "ws"
    env = {**__import__("os").environ, "PRIMUS_WORKSPACE": str(ws)}
    cmd = [
        PY,
        "-m",
        "traceladder.workload",
        "--expert_model_parallel_size",
        "2",
        "--profile",
        "True",
        "--use_pytorch_profiler",
        "True",
        "--profile_ranks",
        "[0,1]",
        "--profile_step_start",
        "3",
        "--profile_step_end",
        "5",
        "--train_iters",
        "5",
        "--num_layers",
        "2",
        "--num_experts",
        "8",
        "--seq_length",
        "64",
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    traces = sorted(ws.rglob("*rank*.pt.trace.json*"))
    assert len(traces) == 2, traces
    out = tmp_path / "out"
    res = analyze_ranks(traces, out)
    assert res["device"] == "cpu" and [r["rank"] for r in res["ranks"]] == [0, 1]
    n = res["matched"]["collectives"]
    assert n > 0 and res["matched"]["events"] == 2 * n and res["matched"]["all_matched"]
    assert res["ranks"][0]["collectives"] == res["ranks"][1]["collectives"] == n
    assert sum(v["count"] for v in res["collectives"].values()) == n
    for v in res["collectives"].values():
        assert v["device"] == "cpu" and v["straggler"]["rank"] in (0, 1)
        assert v["latency_us"]["min"] > 0
    long_rows = read_csv(out / "nccl_long.csv")
    assert len(long_rows) == 2 * n and all(r["dtype"] and r["In msg nelems"] for r in long_rows)
    for f in (
        "nccl_summary_long.csv",
        "nccl_summary_implicit_sync.csv",
        "straggler_summary.csv",
        "nccl_implicit_sync.csv",
    ):
        assert (out / f).stat().st_size > 0


def test_no_collectives_writes_headers(tmp_path):
    paths = write_traces(tmp_path / "in", 2, [])
    res = analyze_ranks(paths, tmp_path / "out")
    assert res["matched"] == {"collectives": 0, "events": 0, "all_matched": True}
    assert res["collectives"] == {} and res["straggler"] is None
    assert any("no collectives" in n for n in res["notes"])
    header = (tmp_path / "out" / "nccl_long.csv").read_text().splitlines()
    assert header == [
        ",".join(
            [
                "collective_id",
                "index_in_group",
                "rank",
                "Process Group Name",
                "Process Group Ranks",
                "Collective name",
                "Group size",
                "dtype",
                "In msg nelems",
                "In msg size (MB)",
                "Out msg nelems",
                "Out msg size (MB)",
                "In split size",
                "Out split size",
                "stream",
                "ts",
                "dur",
            ]
        )
    ]
    assert (tmp_path / "out" / "straggler_summary.csv").read_text().startswith("rank,total_wait_time_us,")


def test_parallel_read_gives_the_same_reports(tmp_path):
    """Ranks read by worker processes (jobs > 1) give the same reports as one by one."""
    colls = late_collectives(8, 5, 250.0, n_ar=3, n_a2a=2)
    paths = write_traces(tmp_path / "in", 8, colls, name="trace_rank{r}.json")
    serial = analyze_ranks(paths, tmp_path / "serial", jobs=1)
    parallel = analyze_ranks(paths, tmp_path / "parallel", jobs=3)
    assert parallel == serial and serial["matched"]["all_matched"]
    for f in serial["files"]:
        assert (tmp_path / "parallel" / f).read_bytes() == (tmp_path / "serial" / f).read_bytes(), f
