"""Week over week: compare a run with the newest earlier run of the same ladder.

A rung regressed when its step time got worse and the two 95% intervals separate — the same rule
the ladder table uses for rung-to-rung changes. Single runs carry no interval, so they are shown
but never flagged. Any change of provenance (image id and digest, ROCm, GPU and driver, Primus commit, config
hash, tool versions) is flagged
too, so a reader sees why numbers moved."""

from __future__ import annotations

from typing import Any

from traceladder.summary.stats import Estimate, separated

# image_id/image_digest come from the Docker daemon (a re-pushed tag changes them), the rest from
# the tools in the container (runner/provenance.py)
PROVENANCE_FIELDS = ("image", "image_digest", "image_id", "rocm_version", "gpu", "primus_commit", "config_hash", "tools",
                     "traceladder_version", "model_tag")


def as_estimate(d: dict[str, Any] | None) -> Estimate | None:
    return Estimate(d["mean"], d.get("ci95"), d.get("n", 1)) if d else None


def is_regression(previous: Estimate, current: Estimate) -> bool:
    if previous.half_width is None or current.half_width is None:
        return False
    return current.mean > previous.mean and separated(previous, current)


def compare_runs(current: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    before = {r["rung"]: r for r in previous.get("rungs", [])}
    rungs = []
    for row in current["rungs"]:
        old = before.get(row["rung"])
        cur, prev = as_estimate(row["step_ms"]), as_estimate(old["step_ms"] if old else None)
        if cur is None or prev is None:
            continue
        delta = cur.mean - prev.mean
        if prev.half_width is None or cur.half_width is None:
            verdict = f"{delta:+.1f} ms (single run, no interval)"
        elif separated(prev, cur):
            verdict = f"{delta:+.1f} ms ({'slower: regression' if delta > 0 else 'faster'})"
        else:
            verdict = "within noise"
        rungs.append({"rung": row["rung"], "previous": prev.as_dict(), "current": cur.as_dict(),
                      "delta_ms": delta, "regression": is_regression(prev, cur), "verdict": verdict})
    old_prov, new_prov = previous.get("provenance") or {}, current.get("provenance") or {}
    changes = [
        f"{field}: {old_prov.get(field)!r} -> {new_prov.get(field)!r}"
        for field in PROVENANCE_FIELDS
        if old_prov.get(field) != new_prov.get(field)
    ]
    return {
        "previous_run_id": previous["run_id"],
        "rungs": rungs,
        "regressions": [r["rung"] for r in rungs if r["regression"]],
        "provenance_changes": changes,
    }
