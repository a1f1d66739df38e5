"""``unified_perf_summary.csv``: TraceLens v1.0.0's one table of every op that does GPU work.

Rules (TraceLens ``TreePerfAnalyzer.collect_unified_perf_events`` /
``build_df_unified_perf_table`` / ``summarize_df_unified_perf_table``, python functions
not in the tree, collectives left out):

* walk the host tree from each root ``cpu_op`` (children by start); skip subtrees with
  no linked GPU event; an op with a perf model (GEMM or :mod:`..perf_model`) is taken
  whole; so is the one backward op under an autograd ``evaluate_function`` whose linked
  forward op has a backward model (CONV / SDPA / norm-backward), unless an op below it
  has its own model; an op with a modelled op below it is descended into; otherwise a
  ``cpu_op`` that launches through ``cuda_runtime`` calls is taken (its modelled
  ``cpu_op`` children instead, if any; not when it launches a collective);
* GPU events that no taken op covers get a synthetic op each,
  ``<parent>-><kernel> (Synthetic Op)``, copied from the nearest ``cpu_op`` above (or the
  launching runtime call when there is none), numbered after the last event;
* per op: its CPU duration, the busy time of its GPU events, and for modelled ops the
  perf-model metrics and ``perf_params`` (a model that fails leaves them empty but
  keeps ``has_perf_model``);
* grouped by the ``str`` of name, category, process/thread names and the four args;
  ``kernel_details_summary`` as in ``ops_unique_args.csv`` over the ops' GPU events in
  link order; sorted by kernel time, with percentages of the summed kernel time.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .. import perf_model as pm
from ..model.autograd_links import bwd_links
from ..model.events import GPU_CATS, EventTable
from ..model.table import Table, add_percentages, sort_desc_then_asc
from . import gemm
from . import perf_sheets as ps
from ._shared import stats
from ..model.intervals import grouped_busy
from .gpu_timeline import is_comm_name
from ..model.op_categories import categorize_op
from ..model.vec import first_up
from .ops_summary import Launchers
from .ops_unique_args import kernel_details, brief_kernel_details, group_by_args

__all__ = ["CSV_NAME", "unified_frame", "write_csv", "modelled_rows"]

CSV_NAME = "unified_perf_summary.csv"

_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
_KEYS = ("name", "op category", "process_name", "process_label", "thread_name") + _ARGS
_BWD_CATEGORY = {"CONV": "CONV_bwd", "SDPA": "SDPA_bwd", "Normalization": "NORM_bwd", "MoE_comm": "MoE_comm_bwd"}
_METRIC_COLS = ("GFLOPS", "TFLOPS/s", "Data Moved (MB)", "FLOPS/Byte", "TB/s", "Kernel Time (µs)")


def _has_model(name: str) -> bool:
    return name in gemm.GEMM_OPS or name in pm.MODELS


def _bwd_category(name: str) -> str | None:
    """TraceLens's ``bwd_category`` of the op's model, when its backward model works."""
    m = pm.MODELS.get(name)
    if m is None:
        return None
    if m.sheet == "Normalization":  # the forward norm models raise on backward
        return "NORM_bwd" if name.endswith("_backward") else None
    return _BWD_CATEGORY.get(m.sheet)


class _Tree:
    """The host tree views the walk needs (cpu_op children, GPU work below each event)."""

    def kids(self, e: int) -> list[int]:
        """cpu_op children of e with GPU work below them, by start time."""
        return self._kid[self._kid_lo[e] : self._kid_hi[e]].tolist()

    def __init__(self, t: EventTable):
        self.t = t
        tree = t.call_tree()
        self.hp = tree.host_parent
        self.pairs_rt, self.pairs_gpu = tree.pairs_rt, tree.pairs_gpu
        n = len(t)
        cpu = t.is_cat("cpu_op")
        self.cpu = cpu
        # has_gpu: any linked GPU event in the subtree (TraceLens's event["gpu_events"])
        self.has_gpu = np.zeros(n, dtype=bool)
        cur = np.unique(self.pairs_rt)
        while cur.size:
            self.has_gpu[cur] = True
            nxt = self.hp[cur]
            nxt = np.unique(nxt[nxt >= 0])
            cur = nxt[~self.has_gpu[nxt]]
        # cpu_op children by start time
        # (only children with GPU work below: the walks skip every other subtree)
        ci = np.flatnonzero(cpu & (self.hp >= 0) & self.has_gpu)
        ci = ci[cpu[self.hp[ci]]]
        order = np.lexsort((t.ts[ci], self.hp[ci]))
        self._kid = ci[order]
        kp = self.hp[self._kid]
        every = np.arange(n)
        self._kid_lo = np.searchsorted(kp, every, side="left")
        self._kid_hi = np.searchsorted(kp, every, side="right")
        roots = np.flatnonzero(cpu & (self.hp < 0) & self.has_gpu)
        self.roots = roots[np.argsort(t.ts[roots], kind="stable")].tolist()
        # leaf cpu_op: launches through cuda_runtime calls only (TraceLens _is_leaf_cpu_op)
        rt_code = t.cat_code("cuda_runtime")
        self.leaf = np.zeros(n, dtype=bool)
        rts = np.unique(self.pairs_rt)
        a = self.hp[rts[t.cat[rts] == rt_code]]
        while True:  # climb through cuda_runtime parents
            up = (a >= 0) & (t.cat[np.maximum(a, 0)] == rt_code)
            if not up.any():
                break
            a = np.where(up, self.hp[np.maximum(a, 0)], a)
        a = a[a >= 0]
        self.leaf[a[cpu[a]]] = True
        # an own-model cpu_op with GPU work strictly below
        model = np.zeros(n, dtype=bool)
        codes = [i for i, nm in enumerate(t.names) if _has_model(nm)]
        if codes:
            model = np.isin(t.name, np.asarray(codes, dtype=np.int32)) & cpu
            # a Triton kernel op has a model only where its args carry the element counts
            tcodes = [i for i in codes if t.names[i].startswith(pm.triton.PREFIXES)]
            for i in np.flatnonzero(model & np.isin(t.name, np.asarray(tcodes or [-1], dtype=np.int32))).tolist():
                model[i] = pm.can_model(t.name_of(i), t.args(i))
        self.model = model
        self.model_below = np.zeros(n, dtype=bool)
        cur = np.flatnonzero(model & self.has_gpu)
        cur = self.hp[cur]
        cur = np.unique(cur[cur >= 0])
        while cur.size:
            cur = cur[~self.model_below[cur]]
            self.model_below[cur] = True
            cur = self.hp[cur]
            cur = np.unique(cur[cur >= 0])
        comm_names = np.fromiter((is_comm_name(nm) for nm in t.names), dtype=bool, count=len(t.names))
        self.comm_gpu = comm_names[t.name]
        # launches a collective somewhere below (TraceLens _is_nccl_event)
        self.has_comm = np.zeros(n, dtype=bool)
        cur = np.unique(self.pairs_rt[self.comm_gpu[self.pairs_gpu]]) if self.pairs_gpu.size else np.empty(0, np.int64)
        while cur.size:
            self.has_comm[cur] = True
            nxt = self.hp[cur]
            nxt = np.unique(nxt[nxt >= 0])
            cur = nxt[~self.has_comm[nxt]]


def _wrappers(tr: _Tree, fwd_of: dict[int, int]) -> np.ndarray:
    """Per event: the first of its (up to 5) ancestors that is a linked autograd
    backward event (-1: none), for all events at once."""
    n = len(tr.t)
    is_wrap = np.zeros(n, dtype=bool)
    bw = np.fromiter((b for b, f in fwd_of.items() if f), dtype=np.int64)  # a forward op 0 links nothing
    is_wrap[bw] = True
    return first_up(tr.hp, tr.hp, is_wrap, max_steps=5)


def _sole_bwd(tr: _Tree, wrapper: int, fwd_of: dict[int, int], memo: dict[int, int | None]) -> int | None:
    """The linked forward op when the event under ``wrapper`` (its autograd node) is
    the node's only backward op; decided once per wrapper."""
    if wrapper in memo:
        return memo[wrapper]
    t = tr.t
    f = fwd_of[wrapper]
    res: int | None = None
    if _has_model(t.name_of(f)) and _bwd_category(t.name_of(f)) is not None:
        wname = t.name_of(wrapper)
        main = wname.split(": ", 1)[1] if ": " in wname else None
        hits, stack = 0, list(tr.kids(wrapper))
        while stack:
            c = stack.pop()
            if main is None or t.name_of(c) == main:  # kids() lists only events with GPU work below
                hits += 1
            stack.extend(tr.kids(c))
        res = f if hits == 1 else None
    memo[wrapper] = res
    return res


def _collect(tr: _Tree, fwd_of: dict[int, int]) -> tuple[list[int], dict[int, int]]:
    out: list[int] = []
    sole: dict[int, int] = {}
    memo: dict[int, int | None] = {}
    wrap = _wrappers(tr, fwd_of).tolist() if fwd_of else None
    model, model_below, leaf, has_comm = tr.model, tr.model_below, tr.leaf, tr.has_comm
    stack = list(reversed(tr.roots))  # (roots and kids: only events with GPU work below)
    while stack:
        e = stack.pop()
        if model[e]:
            out.append(e)
            continue
        w = wrap[e] if wrap is not None else -1
        f = _sole_bwd(tr, w, fwd_of, memo) if w >= 0 else None
        kids = tr.kids(e)
        if f is not None and not model_below[e]:
            sole[e] = f
            out.append(e)
            continue
        if model_below[e]:
            stack.extend(reversed(kids))
            continue
        if leaf[e]:
            mk = [c for c in kids if model[c]]
            if mk:
                stack.extend(reversed(mk))
            elif not has_comm[e]:
                out.append(e)
            continue
        stack.extend(reversed(kids))
    return out, sole


def _gpu_events(tr: _Tree, ev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position in ev, GPU event) for every link below each event, in link order."""
    pos = np.full(len(tr.t), -1, dtype=np.int64)
    pos[ev] = np.arange(ev.size)
    cur = tr.pairs_rt.copy()
    pidx = np.arange(cur.size)
    gs, ps_ = [], []
    while cur.size:
        g = pos[cur]
        hit = g >= 0
        gs.append(g[hit])
        ps_.append(pidx[hit])
        nxt = tr.hp[cur]
        keep = nxt >= 0
        cur, pidx = nxt[keep], pidx[keep]
    g = np.concatenate(gs) if gs else np.empty(0, np.int64)
    p = np.concatenate(ps_) if ps_ else np.empty(0, np.int64)
    order = np.lexsort((p, g))
    return g[order], tr.pairs_gpu[p[order]]


def unified_frame(t: EventTable, la: Launchers) -> Table:
    tr = _Tree(t)
    links = bwd_links(t)
    fwd_of = {b: f for f, bs in links.items() for b in bs}
    events, sole = _collect(tr, fwd_of)
    ev = np.asarray(events, dtype=np.int64)
    g, k = _gpu_events(tr, ev)
    gpu_ok = t.is_cat(*GPU_CATS)
    # synthetic ops for GPU events no collected op covers
    covered = np.zeros(len(t), dtype=bool)
    covered[k] = True
    runtime = t.call_tree().gpu_runtime
    synth: list[tuple[int, int]] = []  # (parent event, kernel)
    by_rt: dict[int, list[int]] = {}
    with_cpu: list[tuple[int, int]] = []
    for x in np.flatnonzero(gpu_ok & ~covered & ~tr.comm_gpu).tolist():
        r = int(runtime[x])
        a = r
        while a >= 0 and not tr.cpu[a]:
            a = int(tr.hp[a])
        if a >= 0:
            with_cpu.append((a, x))
        elif r >= 0:
            by_rt.setdefault(r, []).append(x)
    for r, ks in by_rt.items():
        synth.extend((r, x) for x in ks)
    synth.extend(with_cpu)

    # kernels per collected op, in link order; perf metrics of the modelled ones
    bounds = np.searchsorted(g, np.arange(ev.size + 1))
    klists = [k[bounds[j] : bounds[j + 1]] for j in range(ev.size)]
    busy = grouped_busy(g, t.ts[k], t.ts[k] + t.dur[k], ev.size)
    nev = len(events)
    all_idx = np.asarray(events + [p for p, _ in synth], dtype=np.int64)
    n = all_idx.size
    if n == 0:
        return Table([])
    ns = len(synth)
    names = t.names_of(ev)
    klist = list(klists)
    kts = np.empty(n)
    kts[:nev] = busy
    for p_, kern in synth:
        names.append(f"{t.name_of(p_)}->{t.name_of(kern)} (Synthetic Op)")
        klist.append(np.asarray([kern], dtype=np.int64))
    if ns:
        sk = np.asarray([x for _, x in synth], dtype=np.int64)
        kts[nev:] = (t.ts[sk] + t.dur[sk]) - t.ts[sk]  # busy time, as TraceLens computes it
    # TraceLens numbers synthetic ops after its last event, counting the python_function events
    # the reader drops (metadata["skipped_events"])
    n_all = len(t) + int(t.metadata.get("skipped_events", 0))
    ev_uids = events if t.uid is None else t.uid[np.asarray(events, dtype=np.int64)].tolist()
    uids = ev_uids + list(range(n_all, n_all + ns))

    # op category: by name, else by the first kernel a launcher launched directly
    first = np.full(len(t), -1, dtype=np.int64)
    if la.kernel_idx is not None:
        has_k = [j for j, kl in enumerate(la.kernel_idx) if len(kl)]
        first[la.idx[has_k]] = t.name[np.asarray([la.kernel_idx[j][0] for j in has_k], dtype=np.int64)]
    name_key = np.concatenate([t.name[ev].astype(np.int64), len(t.names) + np.arange(ns)])
    pair = name_key * (len(t.names) + 1) + (first[all_idx] + 1)
    _, ufirst, inv = np.unique(pair, return_index=True, return_inverse=True)
    ucat = []
    for j in ufirst.tolist():  # each pair's first row
        fk = int(first[all_idx[j]])
        ucat.append(categorize_op(names[j], t.names[fk] if fk >= 0 else None))
    cats = [ucat[x] for x in inv.tolist()]

    own = np.zeros(n, dtype=bool)
    own[:nev] = tr.model[ev]
    fwd = np.full(n, -1, dtype=np.int64)
    for j, e in enumerate(events):
        f = sole.get(e)
        if f is not None and not own[j]:
            fwd[j] = f
            cats[j] = _BWD_CATEGORY[pm.MODELS[t.name_of(f)].sheet]
    has_pm = (own | (fwd >= 0)).tolist()

    # perf metrics of the modelled ops (own model, or the linked forward op's backward)
    cols = {c: np.full(n, np.nan) for c in ("GFLOPS", "TFLOPS/s", "Data Moved (MB)", "FLOPS/Byte", "TB/s")}
    params: list[dict | None] = [None] * n
    specs: list[str | None] = [None] * n
    any_metrics = False

    def fill(
        rows_ops: np.ndarray, arr: dict, grp_params: list, grp_specs: list, key: np.ndarray, sel: np.ndarray
    ) -> bool:
        """Copy the metrics of ``rows_ops`` into the ops at ``sel`` whose ``key`` event
        is among them."""
        pos = np.full(len(t), -1, dtype=np.int64)
        pos[rows_ops] = np.arange(rows_ops.size)
        js = sel[pos[key[sel]] >= 0]
        if not js.size:
            return False
        r = pos[key[js]]
        for c in cols:
            cols[c][js] = arr[c][r]
        kts[js] = arr["Kernel Time (µs)"][r]
        for j, rr in zip(js.tolist(), r.tolist()):
            params[j] = dict(grp_params[rr]) or None
            specs[j] = grp_specs[rr]
        return True

    evs = np.concatenate([ev, np.full(ns, -1, dtype=np.int64)])
    own_sel = np.flatnonzero(own)
    is_gemm = np.zeros(n, dtype=bool)
    gemm_codes = [c for c, nm in enumerate(t.names) if nm in gemm.GEMM_OPS]
    if gemm_codes and own_sel.size:
        is_gemm[own_sel] = np.isin(t.name[evs[own_sel]], gemm_codes)
    if is_gemm.any():
        grows = gemm._per_event(t)
        if grows:
            garr = {c: np.asarray([r[c] for r in grows], dtype=np.float64) for c in _METRIC_COLS}
            any_metrics |= fill(
                np.asarray([r["UID"] for r in grows], dtype=np.int64),
                garr,
                [r["params"] for r in grows],
                [r["Compute Spec"] for r in grows],
                evs,
                np.flatnonzero(is_gemm),
            )
    model_sel = np.flatnonzero(own & ~is_gemm)
    if model_sel.size:
        mr = ps.model_rows(t)
        gp = [mr.groups[x] for x in mr.grp.tolist()]
        any_metrics |= fill(mr.ops, mr.arrays(), [x[1] for x in gp], [x[4] for x in gp], evs, model_sel)
    fsel = np.flatnonzero(fwd >= 0)
    if fsel.size:
        fr = ps._rows(t, np.unique(fwd[fsel]), True, links)
        gp = [fr.groups[x] for x in fr.grp.tolist()]
        any_metrics |= fill(fr.ops, fr.arrays(), [x[1] for x in gp], [x[4] for x in gp], fwd, fsel)

    values, members = group_by_args(t, all_idx, names, cats)
    dur = t.dur[all_idx]
    has_model = any_metrics
    recs = []
    for v, js in zip(values, members):
        rec: dict[str, Any] = dict(zip(_KEYS, v))
        rec["ex_UID"] = uids[js[0]]
        rec["operation_count"] = len(js)
        d = stats(dur[js])
        rec["total_duration_us"], rec["mean_duration_us"], rec["std_duration_us"] = d["sum"], d["mean"], d["std"]
        if has_model:
            for c in ("GFLOPS", "Data Moved (MB)", "FLOPS/Byte"):
                rec[c] = ps._first_of(cols[c][js])
            rec["Compute Spec"] = _first([specs[j] for j in js])
            tb, tf = stats(cols["TB/s"][js]), stats(cols["TFLOPS/s"][js])
            rec["TB/s_mean"], rec["TB/s_std"], rec["TFLOPS/s_mean"], rec["TFLOPS/s_std"] = (
                tb["mean"],
                tb["std"],
                tf["mean"],
                tf["std"],
            )
        kt = stats(kts[js])
        rec["Kernel Time (µs)_mean"], rec["Kernel Time (µs)_std"], rec["Kernel Time (µs)_sum"] = (
            kt["mean"],
            kt["std"],
            kt["sum"],
        )
        for s_ in ("median", "min", "max"):
            rec[f"duration_us_{s_}"] = d[s_]
        if has_model:
            for s_ in ("median", "min", "max"):
                rec[f"TB/s_{s_}"] = tb[s_]
            for s_ in ("median", "min", "max"):
                rec[f"TFLOPS/s_{s_}"] = tf[s_]
        for s_ in ("median", "min", "max"):
            rec[f"Kernel Time (µs)_{s_}"] = kt[s_]
        ks = kernel_details(t, [klist[j] for j in js])
        rec["kernel_details_summary"] = str(ks) if ks is not None else "[]"
        trk = brief_kernel_details(ks)
        rec["trunc_kernel_details"] = str(trk) if trk else None
        rec["perf_params"] = _first([params[j] for j in js])
        rec["has_perf_model"] = has_pm[js[0]]
        recs.append(rec)
    df = sort_desc_then_asc(Table.from_records(recs), "Kernel Time (µs)_sum", "ex_UID")
    return add_percentages(df, "Kernel Time (µs)_sum")


def _first(vals: list) -> Any:
    for v in vals:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        return v
    return None


def write_csv(t: EventTable, la: Launchers, path: Path) -> Table:
    """Write the table (:data:`CSV_NAME`'s content) to ``path`` when it has rows."""
    df = unified_frame(t, la)
    if not df.empty:
        df.write_csv(Path(path))
    return df


#: the columns of a modelled row the roofline reads (reports/roofline.py)
MODELLED_COLUMNS = (
    "name",
    "op category",
    "operation_count",
    "GFLOPS",
    "Data Moved (MB)",
    "Compute Spec",
    "Kernel Time (µs)_sum",
)


def modelled_rows(df: Table) -> list[dict[str, Any]]:
    """The rows with a perf model (``has_perf_model``), in :data:`MODELLED_COLUMNS`: small
    enough to hand back from the second process."""
    if df.empty or "has_perf_model" not in df.columns:
        return []
    return [{c: r.get(c) for c in MODELLED_COLUMNS} for r in df.records() if r.get("has_perf_model") is True]
