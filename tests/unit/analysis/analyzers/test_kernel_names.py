"""The heavy lens's kernel names against the torch window, on a pair built from one real trace:
the kernels of the MI300 BERT trace written as a rocprofv3 JSON (the format the rocprofv3 reader
and the stand-in use), the torch trace with a known set of kernels taken out of its window."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from traceladder.analysis.analyzers.kernel_names import (
    KernelNames,
    _demangle_nested,
    formatted_key,
    kernel_key,
    kernel_names_table,
)
from traceladder.analysis.api import analyze_trace

BERT = "tracelens-v1.0.0/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
LAYER_NORM = "vectorized_layer_norm_kernel"
GELU = "GeluCUDAKernelImpl"


def _rocprof_json(kernels: list[dict], names: dict[str, dict[str, str]]) -> dict:
    """kernels as rocprofv3 --kernel-trace --output-format json writes them (ns, one symbol per name)."""
    ids = {name: i + 1 for i, name in enumerate(dict.fromkeys(k["name"] for k in kernels))}
    symbols = [{"kernel_id": i, **names.get(n, {"kernel_name": n, "formatted_kernel_name": n})} for n, i in ids.items()]
    dispatch = [
        {
            "kind": 11,
            "operation": 1,
            "thread_id": 1,
            "correlation_id": {"internal": j + 1, "external": 0},
            "start_timestamp": int(k["ts"] * 1000),
            "end_timestamp": int(k["ts"] * 1000) + int(round(k["dur"] * 1000)),
            "dispatch_info": {"agent_id": {"handle": 1}, "queue_id": {"handle": 1}, "kernel_id": ids[k["name"]]},
            "stream_id": {"handle": 0},
        }
        for j, k in enumerate(kernels)
    ]
    start = min(d["start_timestamp"] for d in dispatch)
    return {
        "rocprofiler-sdk-tool": [
            {
                "metadata": {
                    "pid": 1,
                    "init_time": start - 1000,
                    "fini_time": max(d["end_timestamp"] for d in dispatch),
                },
                "agents": [{"id": {"handle": 1}, "type": 2, "name": "gfx942"}],
                "kernel_symbols": symbols,
                "buffer_records": {"kernel_dispatch": dispatch, "memory_copy": [], "hip_api": []},
                "strings": {
                    "buffer_records": [{"kind": "KERNEL_DISPATCH", "operations": ["KERNEL_DISPATCH_COMPLETE"]}]
                },
            }
        ]
    }


def _reader(folder: Path):
    return lambda name: (folder / name).read_bytes() if (folder / name).is_file() else None


@pytest.fixture(scope="module")
def pair(reference_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """(the table, the removed kernel names, the renamed ones, the trace's kernel names)."""
    tmp = tmp_path_factory.mktemp("kernel_names")
    doc = json.loads(gzip.decompress((reference_dir / BERT).read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    names = sorted({k["name"] for k in kernels})
    removed = {
        n for n in names if LAYER_NORM in n or n.startswith("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128")
    }
    # two kernels named as rocprofv3 may name them: one by its mangled symbol, one truncated
    gelu = next(n for n in names if GELU in n)
    index = next(n for n in names if "indexSelectLargeIndex" in n)
    renamed = {
        gelu: {
            "kernel_name": "_ZN2at6native29vectorized_elementwise_kernelILi8EZZZNS0_18GeluCUDAKernelImplEvE_"
            "clEvENKUlvE0_clEvEUlvE_"
            "St5arrayIPcLm2EEEEviT0_T1_"
        },
        index: {"kernel_name": index, "formatted_kernel_name": index, "truncated_kernel_name": "indexSelectLargeIndex"},
    }
    # rule 3 reads a mangled name to its qualified name without template arguments, so the other
    # vectorized_elementwise_kernel instantiations would match the mangled gelu as well: that is the
    # rule's limit, and the test keeps gelu's siblings in the window
    assert len(removed) == 2
    (tmp / "results.json").write_text(json.dumps(_rocprof_json(kernels, renamed)))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("cat") == "kernel" and e["name"] in removed)]
    with gzip.open(tmp / "window.json.gz", "wt") as f:
        json.dump(doc, f)
    analyze_trace(tmp / "results.json", tmp / "process")
    analyze_trace(tmp / "window.json.gz", tmp / "window")
    table = kernel_names_table(
        _reader(tmp / "process"),
        _reader(tmp / "window"),
        1,
        1,
        process_trace="results.json",
        window_trace="window.json.gz",
        rung="bert",
    )
    return table, removed, renamed, names


def test_the_table_finds_exactly_the_kernels_taken_out_of_the_window(pair) -> None:
    table, removed, renamed, names = pair
    assert table.kernels == len(names) == len(table.rows)
    missed = {r.kernel for r in table.rows if r.status == "missed: outside the window"}
    assert missed == removed
    assert table.counts["missed: no launching op"] == 0
    assert {r.kernel for r in table.rows if r.status == "named"} == set(names) - removed - set(renamed)
    assert all(r.kernel not in renamed for r in table.rows)  # the reader names them as rocprofv3 does
    gelu = next(n for n in renamed if GELU in n)
    differently = {r.kernel: r.window_names for r in table.rows if r.status == "named differently"}
    # the mangled gelu: its qualified name matches every vectorized_elementwise_kernel left in the window
    mangled = renamed[gelu]["kernel_name"]
    index = next(n for n in renamed if "indexSelectLargeIndex" in n)
    assert set(differently) == {mangled, "indexSelectLargeIndex"} and gelu in differently[mangled]
    assert differently["indexSelectLargeIndex"] == [index]
    # rows by GPU time; the shares add up and the missed share is the removed kernels' time
    times = [r.process_us_per_step for r in table.rows]
    assert times == sorted(times, reverse=True)
    assert sum(r.share_pct for r in table.rows) == pytest.approx(100.0)
    removed_pct = sum(r.share_pct for r in table.rows if r.kernel in removed)
    assert table.missed_pct == pytest.approx(removed_pct) and table.seen_pct == pytest.approx(100 - removed_pct)
    assert table.missed_pct > table.limit_pct and "misses" in (table.finding() or "")
    # the window's kernel time per step is what its own kernel_summary holds: the process's less the removed
    assert table.window_us_per_step == pytest.approx(table.process_us_per_step * table.seen_pct / 100, rel=1e-3)
    # a typed document: it round-trips through its JSON
    assert KernelNames.from_dict(json.loads(json.dumps(table.to_dict()))) == table


def test_no_launching_op_is_told_from_outside_the_window() -> None:
    process = b"name,Count,Total Kernel Time (ms)\nk_a,2,30.0\nk_b,1,10.0\n"
    window = (
        b"Parent op category,Parent cpu_op,Kernel name,Kernel stream,Kernel duration (\xc2\xb5s)_sum\n"
        b"runtime,hipLaunchKernel,k_a,0,15.0\n"
    )
    t = kernel_names_table(lambda n: process, lambda n: window, 2, 1, process_trace="p", window_trace="w")
    assert [(r.kernel, r.status) for r in t.rows] == [
        ("k_a", "missed: no launching op"),
        ("k_b", "missed: outside the window"),
    ]
    assert t.process_us_per_step == 20.0 and t.missed_pct == 100.0


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("_ZN2at6native18elementwise_kernelILi128ELi4EEEvT_", "at::native::elementwise_kernel"),
        ("_Z8mykernelPf", "mykernel"),
        ("void at::native::(anonymous namespace)::f<int, 2>(int, float)", "at::native::f"),
        ("Cijk_Alik_Bljk_MT16x16", "Cijk_Alik_Bljk_MT16x16"),
    ],
)
def test_kernel_keys(name: str, key: str) -> None:
    assert kernel_key(name) == key
    assert _demangle_nested("attn_fwd") is None
    assert formatted_key("void k<a<b>, 2>(int (*)(int))") == "k<a<b>, 2>"
