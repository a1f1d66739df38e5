"""A ladder run's summary, from its rung results and trace analyses: the ladder table, lens
overheads, the profiled rung's breakdown and findings. Pure: no I/O, so it is easy to test."""

from __future__ import annotations

from collections.abc import Mapping

from traceladder.core.documents import (
    JSONObject,
    JSONValue,
    BatchArgs,
    as_number,
    spec_purpose,
    RankCollectives,
    RungResult,
    TraceAnalysis,
    Summary,
)
from traceladder.core.summary_parts import (
    LadderHistory,
    SummaryRung,
    summary_part,
    summary_rungs,
    whats_left_entries,
    CollectivesSummary,
    ProfileWindow,
    SlurmNodes,
    summary_lenses,
)
from traceladder.stats.model import Estimate, estimate, ratio
from traceladder.summary.render.fmt import fmt_gb
from traceladder.summary.trace_gate import gate_rows
from traceladder.summary.whats_left import whats_left_section
from traceladder.stats.verdicts import (
    BATCH_SWITCHES,
    CPU_STEP,
    lens_overheads,
    measured,
    plan_metric,
    plan_specs,
    sequential_verdicts,
    verdict_findings,
)

SUMMARY_SCHEMA = 2  # 2: vs_parent from the block model replaces ms_removed / tokens_gained


def _est(e: Estimate | None) -> JSONObject | None:
    return dict(e.as_dict()) if e else None


def _ok(runs: list[RungResult], field: str) -> list[float]:
    return [n for r in runs if r.ok and (n := r.figure(field)) is not None]


def build_summary(
    plan: Mapping[str, JSONValue],
    results: Mapping[str, RungResult],
    analyses: Mapping[str, TraceAnalysis],
    collectives: Mapping[str, RankCollectives] | None = None,
) -> JSONObject:
    """`analyses` maps a trace key to its analysis.json; `collectives` a rung id to the
    multi-rank collectives.json of its all-ranks traces."""
    specs = plan_specs(plan)
    order: list[str] = []
    for spec in specs:
        if str(spec["rung"]) not in order:
            order.append(str(spec["rung"]))
    unprofiled = measured(plan, results)  # the block design's runs only: lens and profile runs stay out
    info = {str(s["rung"]): s for s in specs}
    # an adaptive plan: at its stopping look; `calls`: the ladder-wide rule (stats/sequential.py)
    vs_parent, model, repeats, calls = sequential_verdicts(plan, results)

    step = {name: estimate(_ok(unprofiled.get(name, []), "step_ms")) for name in order}
    cpu_step = {name: estimate(_ok(unprofiled.get(name, []), CPU_STEP)) for name in order}
    tokens = {name: estimate(_ok(unprofiled.get(name, []), "tokens_per_sec_per_gpu")) for name in order}
    root = next((name for name in order if info[name]["parent"] is None), order[0] if order else None)

    rows: list[JSONValue] = []
    for name in order:
        runs = unprofiled.get(name, [])
        if not runs:
            continue  # a rung planned with lenses only
        spec = info[name]
        parent = spec["parent"]
        batch = spec["switch"] in BATCH_SWITCHES
        own, base = tokens[name], (tokens.get(root) if root else None)
        row: JSONObject = {
            "rung": name,
            "parent": parent,
            "switch": spec["switch"],
            "value": spec["value"],
            "runs": len(runs),
            "ok": sum(r.ok for r in runs),
            "statuses": [*sorted({r.status for r in runs})],
            "step_ms": _est(step[name]),
            "step_ms_per_repeat": [r.step_ms for r in runs],
            "step_cpu_ms": _est(cpu_step[name]),
            "tokens_per_sec_per_gpu": _est(tokens[name]),
            "peak_mem_gb": max(_ok(runs, "peak_mem_gb"), default=None),
            "kind": "batch" if batch else "optimisation",
            **({"batch_setting": setting} if batch and (setting := batch_setting(spec)) else {}),
            # Batch rungs do more work per step: they are judged on tokens/s/GPU
            # (docs/statistics.md "Statistical model").
            **({"vs_parent": vs_parent[name]} if parent is not None else {}),
            "speedup_vs_root": dict(ratio(own, base).as_dict()) if own and base else None,
        }
        rows.append(row)

    lenses: list[JSONValue] = []
    lens_rung = _lens_rung(specs)
    if lens_rung:
        overheads = lens_overheads(plan, results, lens_rung)  # paired within lens blocks
        for lens in sorted({str(s["lens"]) for s in specs if s["rung"] == lens_rung and s["lens"] != "none"}):
            runs = [
                results[str(s["rung_id"])]
                for s in specs
                if s["rung"] == lens_rung
                and s["lens"] == lens
                and spec_purpose(s) == "lens"
                and str(s["rung_id"]) in results
            ]
            lens_step = estimate(_ok(runs, "step_ms"))
            lenses.append(
                {
                    "lens": lens,
                    "rung": lens_rung,
                    "runs": len(runs),
                    "ok": sum(r.ok for r in runs),
                    "step_ms": _est(lens_step),
                    "overhead_ratio": overheads.get(lens),
                    "traces": sum(len(r.traces) for r in runs),
                }
            )

    failed: list[JSONValue] = [r.rung_id for r in results.values() if not r.ok]
    profile = _profile(results, analyses)
    summary: JSONObject = {
        "schema": SUMMARY_SCHEMA,
        "ladder": plan["ladder"],
        "run_id": plan["run_id"],
        "root": root,
        "rungs": rows,
        "metric": plan_metric(plan),
        "model": model,
        "calls": calls,
        # Adaptive repeats only: blocks run of planned, why it stopped, each look (stats/sequential.py).
        **({"repeats": repeats} if repeats else {}),
        "lenses": lenses,
        "lens_rung": lens_rung,
        "profile": profile,
        "collectives": _collectives(collectives or {}),
        # "What's left": the lens rung's and the final rung's ranked targets (summary/whats_left.py)
        "headroom": whats_left_section(plan, results, analyses, lens_rung),
        "failed_rungs": failed,
        "failures": [
            {"rung_id": r.rung_id, "status": r.status, "error": r.error} for r in results.values() if not r.ok
        ],
        "provenance": _provenance(results),
        # backend: slurm only: the node list each run ran on, and whether they differ (a confounder)
        **({"nodes": nodes} if (nodes := _nodes(results)) else {}),
    }
    summary["findings"] = [*findings(summary)]
    # the ladder file's caveats; each trace judged fit or unfit (summary/trace_gate.py); after
    # the findings, in Summary's field order, so summary.json keeps the bytes of the dict built
    if (caveats := plan.get("caveats")) and isinstance(caveats, list):
        summary["caveats"] = [*caveats]
    summary["trace_gate"] = gate_rows(specs, results, analyses)
    return summary


def batch_setting(spec: Mapping[str, JSONValue]) -> str | None:
    """What a batch rung's global batch means where it ran: the micro-batches per rank. The CPU
    proxy (the local backend) runs one rank per expert-parallel rank, 2 on proxy-local, so its
    global batch 4 is the 2 micro-batches per rank that the seed's 16 is on 8 GPUs."""
    args = BatchArgs.from_dict(spec.get("model_args") or {}, f"{spec.get('rung_id')}: model_args")
    env = spec.get("docker_env_vars")
    gbs = args.global_batch_size
    if gbs is None:
        return None
    micro = args.micro_batch_size or 1
    said = env.get("GPUS_PER_NODE") if isinstance(env, dict) else None
    gpus_said = str(said or "8")  # an environment variable: a string
    gpus = int(gpus_said) if gpus_said.isdigit() else 8
    if spec.get("backend") == "local":
        ranks = int(args.expert_model_parallel_size or 1)
        per = gbs / (micro * ranks)
        return (
            f"global_batch={gbs:g} on the CPU proxy's {ranks} ranks: {per:g} micro-batch(es) of {micro:g} per rank, "
            f"as a global batch of {per * micro * gpus:g} is on {gpus} GPUs"
        )
    parallel = (args.tensor_model_parallel_size or 1) * (args.pipeline_model_parallel_size or 1)
    ranks = int(gpus * (as_number(spec.get("nnodes")) or 1) / parallel)
    per = gbs / (micro * ranks)
    return f"global_batch={gbs:g} over {ranks} data-parallel ranks: {per:g} micro-batch(es) of {micro:g} per rank"


def _lens_rung(specs: list[JSONObject]) -> str | None:
    return next((str(s["rung"]) for s in specs if s["lens"] != "none" and spec_purpose(s) == "lens"), None)


def _provenance(results: Mapping[str, RungResult]) -> JSONObject:
    seen = [r.provenance for r in results.values() if r.provenance]
    return seen[0] if seen else {}


def _nodes(results: Mapping[str, RungResult]) -> JSONObject | None:
    """Which Slurm node list each rung's runs ran on (metrics.json's provenance.slurm.nodes).
    More than one node list in the ladder run makes the node a possible confounder: a rung's
    difference from its parent may be the nodes', not the switch's."""
    rungs_by_nodes: dict[str, set[str]] = {}
    for result in results.values():
        slurm = (result.provenance or {}).get("slurm")
        nodes = slurm.get("nodes") if isinstance(slurm, dict) else None
        if nodes:
            rungs_by_nodes.setdefault(str(nodes), set()).add(result.rung or result.rung_id)
    if not rungs_by_nodes:
        return None
    return {
        "rungs_by_nodes": {nodes: [*sorted(rungs)] for nodes, rungs in sorted(rungs_by_nodes.items())},
        "confounder": len(rungs_by_nodes) > 1,
    }


def _profile(results: Mapping[str, RungResult], analyses: Mapping[str, TraceAnalysis]) -> JSONObject | None:
    """The rank-0 analysis of the first profiled run (the write-up's "rank-0 window")."""
    for lens in ("torch_rank0", "torch_all_ranks"):
        for result in sorted(results.values(), key=lambda r: r.repeat):
            if result.lens != lens:
                continue
            for key in result.traces:
                analysis = analyses.get(str(key))
                if analysis and analysis.rank in (0, None):
                    return {
                        "lens": lens,
                        "rung_id": result.rung_id,
                        "trace": key,
                        "device": analysis.device,
                        "timeline": analysis.timeline,
                        "timeline_percent": analysis.timeline_percent,
                        "top_ops": [*analysis.top_ops],
                        "categories": analysis.categories,
                        "regions": analysis.regions,
                        "notes": None if analysis.notes is None else [*analysis.notes],
                    }
    return None


def _collectives(by_rung: Mapping[str, RankCollectives]) -> JSONObject | None:
    """The first all-ranks run's collectives: latency, bandwidth, skew and the straggler."""
    if not by_rung:
        return None
    rung_id = sorted(by_rung)[0]
    doc = by_rung[rung_id]
    rows: list[JSONObject] = []
    waited: list[float] = []
    for name, c in sorted(doc.collectives.items()):
        waited.append((as_number(c.straggler.get("others_waited_total_us")) or 0.0) / 1000.0)
        rows.append(
            {
                "name": name,
                "count": c.count,
                "device": c.device,
                "latency_mean_us": c.latency_us["mean"],
                "bus_bw_gbs_mean": c.bus_bw_gbs.get("mean"),
                "algo_bw_gbs_mean": c.algo_bw_gbs.get("mean"),
                "start_skew_mean_us": c.start_skew_us["mean"],
                "start_skew_max_us": c.start_skew_us["max"],
                "straggler_rank": c.straggler.get("rank"),
                "others_waited_ms": waited[-1],
            }
        )
    worst = rows[waited.index(max(waited))] if rows else None  # the first of equals, as max() picks
    return {
        "rung_id": rung_id,
        "device": doc.device,
        "world_size": doc.world_size,
        "matched": doc.matched,
        "by_collective": [*rows],
        "worst_straggler": worst,
    }


#: a peak-memory move against the parent worth a sentence, in % of the parent's peak (the proxy's
#: peaks spread by about 1% over a rung's runs)
MEMORY_MOVE_PCT = 5.0


def memory_findings(rungs: list[SummaryRung]) -> list[str]:
    """One sentence on the rungs whose peak memory moved against their parent's, largest first, as
    the write-up states recompute off's 117.3 -> 128.1 GB. Each side is the largest of its runs."""
    peaks = {r.rung: r.peak_mem_gb for r in rungs}
    moves = []
    for r in rungs:
        if r.parent is None:
            continue
        own, base = peaks[r.rung], peaks.get(r.parent)
        if own is None or not base:
            continue
        pct = 100.0 * (own / base - 1.0)
        if abs(pct) >= MEMORY_MOVE_PCT:
            text = f"{r.rung} {pct:+.1f}% against {r.parent} ({fmt_gb(base)} → {fmt_gb(own)} GB)"
            moves.append((abs(pct), text))
    if not moves:
        return []
    listed = "; ".join(text for _, text in sorted(moves, reverse=True))
    return [f"Peak memory moved (the largest of each rung's runs): {listed}."]


def findings(summary: Mapping[str, JSONValue]) -> list[str]:
    """Sentences a reader would write from the table: biggest wins, lens costs, leftovers, failures."""
    out: list[str] = verdict_findings(summary)
    rungs = summary_rungs(summary["rungs"])
    out += memory_findings(rungs)
    # the root against itself says nothing (a one-rung ladder's only rung)
    final = [
        (r, r.speedup_vs_root)
        for r in rungs
        if r.speedup_vs_root and r.kind == "optimisation" and r.rung != summary["root"]
    ]
    if final:
        last, speedup = final[-1]
        out.append(f"{last.rung} runs at {speedup.mean:.2f}x the tokens/s/GPU of {summary['root']}.")
    doc = Summary.from_dict(summary)  # the summary as built: its parts read as their classes
    for lens in summary_lenses(doc.lenses):
        o = lens.overhead_ratio
        if o:
            ci95 = o.ci95 or []
            ci = f" (95% CI {ci95[0]:.2f}-{ci95[1]:.2f}x, paired within lens blocks)" if ci95 else ""
            out.append(f"Lens {lens.lens} costs {o.mean:.2f}x the unprofiled step of {lens.rung}{ci}.")
    profile = summary_part(ProfileWindow, doc.profile, "summary.json: profile")
    if profile and profile.timeline_percent:
        tp = profile.timeline_percent
        device = "CPU" if profile.device == "cpu" else "GPU"
        out.append(
            f"In the {profile.lens} window ({device} timeline): computation {tp.get('computation_time', 0):.1f}%, "
            f"exposed communication {tp.get('exposed_comm_time', 0):.1f}%, idle {tp.get('idle_time', 0):.1f}%."
        )
        if profile.top_ops:
            top = profile.top_ops[0]
            out.append(f"Largest single op: {top['name']} ({top['time_ms']:.1f} ms, {top['percent']:.1f}% of op time).")
    for entry in whats_left_entries(doc.headroom):
        if entry.targets:
            out.append(f"What's left on {entry.rung}: {entry.targets[0]['sentence']}")
    coll = summary_part(CollectivesSummary, doc.collectives, "summary.json: collectives")
    if coll and coll.worst_straggler:
        w = coll.worst_straggler
        out.append(
            f"Collectives ({coll.rung_id}, {coll.world_size} ranks, {str(coll.device or 'gpu').upper()}): "
            f"rank {w['straggler_rank']} is the straggler in {w['name']}; "
            f"the others waited {w['others_waited_ms']:.1f} ms for it."
        )
    if summary.get("history"):
        from traceladder.stats.history import history_findings

        out += history_findings(LadderHistory.from_dict(summary["history"], "summary.json: history"))
    nodes = summary_part(SlurmNodes, doc.extra.get("nodes"), "summary.json: nodes")
    if nodes and nodes.confounder:
        where = "; ".join(f"{n}: {', '.join(rungs)}" for n, rungs in nodes.rungs_by_nodes.items())
        out.append(f"Runs ran on different Slurm nodes ({where}): the node is a possible confounder.")
    failed = doc.failed_rungs
    if failed:
        out.append(f"{len(failed)} run(s) did not finish ok: {', '.join(failed)}.")
    return out
