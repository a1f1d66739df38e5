"""The alerts the UI tests store (issue 59), built with the product's own classes, and a
triage.json of schema 1 written by hand exactly as the engine wrote one before the document's
typing changed: a two-culprit bisection of rung attn_turbo of the newer run.

`store_alerts` writes them through `AlertStore` into the deployment's alert store (the clusters
file's `alerts:`, the same S3 the api-server reads), and the triage.json beside the run."""

from __future__ import annotations

import json
from typing import Any

from traceladder.core.alerts import PRODUCT_USER, AlertChange, AlertDoc, AlertMember, AlertTriage
from traceladder.core.documents import Culprit

# the suspect rung the alert covers, and where its triage.json lives (layout.triage_key)
RUNG = "attn_turbo"
MAIN = "a-ui-regression-1"  # untriaged, triaged: the bisection named two culprits
RECOVERED = "a-ui-improvement-2"  # fixed and recovered, no triage
CULPRITS = [
    Culprit(name="nightly-3", last_good="nightly-2", delta_pct=21.4, share_pct=56.0, share_interval_pct=[38.5, 73.2]),
    Culprit(name="nightly-6", last_good="nightly-5", delta_pct=14.1, share_pct=37.0, share_interval_pct=[21.0, 52.9]),
]
SENTENCE = "attention forward took 9.8 ms more per step (flash_attn_fwd: +41%, 2.1k more launches)"
REPRO = {
    "good": 'traceladder run-rung --spec-json \'{"build":"nightly-2","rung":"attn_turbo"}\' --run-id w-triage-good',
    "bad": 'traceladder run-rung --spec-json \'{"build":"nightly-3","rung":"attn_turbo"}\' --run-id w-triage-bad',
}
CANDIDATES = [f"nightly-{i}" for i in range(1, 7)]


def _look(blocks: int, delta: float, low: float, high: float, stop: str | None, rule: str = "confirm") -> dict:
    return {
        "blocks": blocks,
        "delta_pct": delta,
        "interval_pct": [low, high],
        "df": 2 * blocks - 2,
        "critical_z": 2.807,
        "stop": stop,
        "rule": rule,
        "variance": "confirm",
    }


def _step(kind: str, good: str, candidate: str, verdict: str, delta: float | None, interval, **more: Any) -> dict:
    looks = [] if delta is None else [_look(4, delta, *interval, stop=verdict)]
    return {
        "kind": kind,
        "rung": RUNG,
        "good": good,
        "candidate": candidate,
        "verdict": verdict,
        "delta_pct": delta,
        "interval_pct": interval,
        "blocks": 4 if looks else 0,
        "looks": looks,
        "runs": 8 if looks else 0,
        "run_s": 412.5 if looks else 0.0,
        **more,
    }


def schema1_triage(ladder: str, run_id: str, good_run_id: str) -> dict[str, Any]:
    """A done triage.json of schema 1 as the engine at HEAD wrote it (no field added since)."""
    return {
        "schema": 1,
        "ladder": ladder,
        "run_id": run_id,
        "rung": RUNG,
        "state": "done",
        "label": "confirmed regression",
        "suspect": {
            "rung": RUNG,
            "run_id": run_id,
            "good_run_id": good_run_id,
            "reason": "change point",
            "direction": "slower",
            "delta_pct": 38.2,
            "diff": [
                {"section": "build", "field": "build", "good": "nightly-1", "bad": "nightly-6", "bisectable": True}
            ],
        },
        "group": [RUNG],
        "bisected_on": RUNG,
        "candidates": [
            {"name": name, "kind": "build", "changes": {"build": name}, "created": f"2026-11-2{i}T01:00:00+00:00"}
            for i, name in enumerate(CANDIDATES, start=3)
        ],
        "steps": [
            _step("confirm", good_run_id, run_id, "confirmed", 38.0, [29.4, 47.1]),
            _step("bisect", "nightly-1", "nightly-4", "confirmed", 22.3, [14.0, 31.2]),
            _step("bisect", "nightly-1", "nightly-2", "not reproduced", 0.4, [-3.1, 4.0]),
            _step("bisect", "nightly-1", "nightly-3", "confirmed", 21.9, [13.5, 30.6]),
            _step("pair", "nightly-2", "nightly-3", "confirmed", 21.4, [14.8, 28.3], size_pct=38.0),
            _step("range", "nightly-3", "nightly-6", "confirmed", 14.6, [8.2, 21.4]),
            _step("bisect", "nightly-3", "nightly-5", "skipped", None, None, reason="image nightly-5 is gone"),
            _step("pair", "nightly-5", "nightly-6", "confirmed", 14.1, [7.9, 20.6], size_pct=14.6),
        ],
        "first_bad": "nightly-3",
        "last_good": "nightly-2",
        "culprits": [c.to_dict() for c in CULPRITS],
        "conclusion": "two culprits: nightly-3 (share 56% [38%, 73%]) and nightly-6 (share 37% [21%, 53%])",
        "non_bisectable": [],
        "explanation": {
            "lens": "torch_rank0",
            "good": "nightly-2",
            "bad": "nightly-3",
            "sentence": SENTENCE,
            "top_ops": [
                {"name": "flash_attn_fwd", "base_us": 21400.0, "new_us": 31200.0, "delta_us": 9800.0, "status": "both"}
            ],
            "top_kernels": [],
            "regions": [],
        },
        "reproduce": REPRO,
        "updated_at": "2026-11-29T14:02:11+00:00",
    }


def alerts(ladder: str, prefix: str, bucket: str, new_run: str, old_run: str, triage_key: str) -> list[AlertDoc]:
    created = "2026-11-29T14:00:00+00:00"
    main = AlertDoc(
        id=MAIN,
        kind="regression",
        status="untriaged",
        title=f"{ladder}/{RUNG} slower +38.2% (build nightly-1 -> nightly-6)",
        causes=[f"window:{bucket}/{prefix}/{ladder}/{RUNG}/{old_run}"],
        change="build build nightly-1 -> nightly-6",
        members=[
            AlertMember(
                ladder=ladder,
                run_id=new_run,
                rung=RUNG,
                good_run_id=old_run,
                reason="change point",
                direction="slower",
                delta_pct=38.2,
                role="triaged",
                bucket=bucket,
                prefix=prefix,
                metric="wall",
                added_at=created,
            )
        ],
        triage=AlertTriage(
            ladder=ladder,
            run_id=new_run,
            rung=RUNG,
            key=triage_key,
            label="confirmed regression",
            metric="wall",
            level_pct=95.0,
            delta_pct=38.0,
            interval_pct=[29.4, 47.1],
            culprits=CULPRITS,
            conclusion="two culprits: nightly-3 and nightly-6",
        ),
        history=[AlertChange(what="created", by=PRODUCT_USER, at=created, value=f"{ladder} run {new_run}")],
        created_at=created,
        updated_at=created,
    )
    older = "2026-11-23T09:00:00+00:00"
    recovered = AlertDoc(
        id=RECOVERED,
        kind="improvement",
        status="fixed",
        title=f"{ladder}/baseline faster -6.0% (no change found)",
        causes=[f"window:{bucket}/{prefix}/{ladder}/baseline/first"],
        members=[
            AlertMember(
                ladder=ladder,
                run_id=old_run,
                rung="baseline",
                good_run_id="first",
                reason="prediction bound",
                direction="faster",
                delta_pct=-6.0,
                role="triaged",
            )
        ],
        history=[AlertChange(what="created", by=PRODUCT_USER, at=older, value=f"{ladder} run {old_run}")],
        recovered_at="2026-11-29T03:10:00+00:00",
        recovered_run=new_run,
        created_at=older,
        updated_at=older,
    )
    return [main, recovered]


def store_alerts(client: Any, bucket: str, ladder: str, prefix: str, new_run: str, old_run: str) -> Any:
    """The two alerts in the deployment's alert store and the triage.json they point at; the store."""
    from traceladder.config import load_clusters
    from traceladder.core import layout
    from traceladder.triage.alerts import store_for

    key = layout.triage_key(layout.run_prefix(prefix, ladder, new_run), RUNG)
    client.put_object(
        Bucket=bucket, Key=key, Body=json.dumps(schema1_triage(ladder, new_run, old_run), indent=1).encode()
    )
    store = store_for(load_clusters().alerts, client)
    for alert in alerts(ladder, prefix, bucket, new_run, old_run, key):
        assert store.create(alert), f"alert {alert.id} already stored"
    return store


def covering(alert_id: str, ladders: list[str], run_id: str = "w5") -> AlertDoc:
    """An untriaged alert with one member on each of `ladders` (rung baseline of `run_id`)."""
    at = "2026-11-30T08:00:00+00:00"
    return AlertDoc(
        id=alert_id,
        kind="regression",
        status="untriaged",
        title=f"{' and '.join(ladders)}: baseline slower",
        causes=[f"change:{alert_id}"],
        members=[
            AlertMember(
                ladder=ladder,
                run_id=run_id,
                rung="baseline",
                good_run_id="w4",
                reason="prediction bound",
                direction="slower",
                delta_pct=9.0,
                role="triaged" if i == 0 else "linked",
            )
            for i, ladder in enumerate(ladders)
        ],
        history=[AlertChange(what="created", by=PRODUCT_USER, at=at, value=f"{ladders[0]} run {run_id}")],
        created_at=at,
        updated_at=at,
    )
