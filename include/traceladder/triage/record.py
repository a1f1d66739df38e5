"""Record a triage: its label, the command that reruns each step's A/B (`repro_command`: the
`traceladder triage repro` a person can run), `triage.json` (core/documents.py `TriageDoc`) and its
`report.html`, under the keys core/layout.py spells beside the run it triages. Each step is stored
as it finishes, so a retried task resumes where the last one stopped."""

from __future__ import annotations

import datetime
import html
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace

from traceladder.core import layout
from traceladder.core.documents import (
    Explanation,
    JSONObject,
    TriageCandidate,
    TriageDoc,
    TriageEnds,
    TriageSpent,
    TriageStep,
    TriageSuspect,
    pinned_digest,
)
from traceladder.stats.decisions import CONFIRMED, INSUFFICIENT, NOT_REPRODUCED
from traceladder.storage.artifacts import ArtifactSink
from traceladder.triage.suspects import RunSetup

NOT_APPROVED = "not approved"
# the steps that compare a culprit with its last good directly: its own pair, or another rung at it
PAIR_KINDS = ("pair", "at first bad")


def label_for(verdict: str, direction: str) -> str:
    """The notifier's label from the suspect's own confirm: HUD's four, plus `not approved`."""
    if verdict == CONFIRMED:
        return "confirmed regression" if direction == "slower" else "confirmed improvement"
    if verdict == NOT_REPRODUCED:
        return "not reproduced"
    if verdict == INSUFFICIENT:
        return "insufficient data"
    raise ValueError(f"no label for verdict {verdict!r}")


def confirm_step(doc: TriageDoc) -> TriageStep | None:
    """The rung's own confirm (the suspect's A/B), if it ran."""
    return next((t for t in doc.steps if t.kind == "confirm" and t.rung == doc.rung), None)


def step_words(step: TriageStep) -> str:
    """A step's outcome in the triage's words: verdict, B against A with its interval, blocks."""
    size = f" {step.delta_pct:+.1f}%" if step.delta_pct is not None else ""
    interval = f" ({step.interval_pct[0]:+.1f}% to {step.interval_pct[1]:+.1f}%)" if step.interval_pct else ""
    return f"{step.verdict}{size}{interval} in {step.blocks} blocks"


def confirm_summary(doc: TriageDoc) -> str:
    """The rung's own confirm in words: its verdict, size and interval (B against A), blocks."""
    step = confirm_step(doc)
    if step is None:
        return "no confirm recorded"
    return f"the confirm: {step_words(step)}"


def repro_command(doc: TriageDoc, step_index: int) -> str:
    """`traceladder triage repro` of step `step_index` of this triage (shell-quoted): its A/B
    rerun on the ladder's backend into a scratch prefix (cli/triage.py)."""
    if not 0 <= step_index < len(doc.steps):
        raise IndexError(f"step {step_index} is not one of the triage's {len(doc.steps)} steps")
    argv = ["traceladder", "triage", "repro", "--ladder", doc.ladder, "--run", doc.run_id, "--rung", doc.rung]
    return " ".join(shlex.quote(part) for part in [*argv, "--step", str(step_index)])


def reproduce_commands(doc: TriageDoc) -> JSONObject:
    """triage.json's `reproduce`: the rung's confirm ("confirm") and each culprit's own pair
    ("pair <culprit>", or "at first bad <culprit>" on a rung bisected elsewhere), each a
    `repro_command`. A culprit the confirm itself named (two candidates) has no step of its own."""
    out: JSONObject = {}
    for index, step in enumerate(doc.steps):
        if step.kind == "confirm" and step.rung == doc.rung:
            out["confirm"] = repro_command(doc, index)
    for culprit in doc.culprits:
        pairs = [
            index
            for index, step in enumerate(doc.steps)
            if step.kind in PAIR_KINDS and (step.good, step.candidate) == (culprit.last_good, culprit.name)
        ]
        if pairs:
            out[f"{doc.steps[pairs[-1]].kind} {culprit.name}"] = repro_command(doc, pairs[-1])
    return out


def keys(prefix: str, ladder: str, run_id: str, rung: str) -> tuple[str, str]:
    """(triage.json, report.html) of a rung's triage of one run."""
    run = layout.run_prefix(prefix, ladder, run_id)
    return layout.triage_key(run, rung), layout.triage_report_key(run, rung)


@dataclass(frozen=True)
class Basis:
    """What a triage judges by and runs on, for its triage.json: the ladder's metric and
    `triage.alpha`, the devices one run holds (nodes times GPUs per node), and the triage DAG run
    working on it (None outside Airflow)."""

    metric: str
    alpha: float
    devices: int
    dag_run_id: str | None = None


def started(
    ladder: str,
    run_id: str,
    suspect: TriageSuspect,
    group: Sequence[str],
    ends: tuple[RunSetup, RunSetup],
    basis: Basis,
) -> TriageDoc:
    """A new triage of `suspect` (`running`, no step yet), with its basis and both ends' image
    digests and builds (`ends`: the last good run's setup and the suspect run's)."""
    doc = TriageDoc(
        ladder=ladder,
        run_id=run_id,
        rung=suspect.rung,
        state="running",
        suspect=suspect,
        group=list(group),
        metric=None,
        alpha=None,
        dag_run_id=None,
        digests=None,
        builds=None,
        spent=None,
    )
    return resumed(doc, ends, basis)


def resumed(doc: TriageDoc, ends: tuple[RunSetup, RunSetup], basis: Basis) -> TriageDoc:
    """A triage as a task works on it: the DAG run now working on it (kept outside Airflow), and
    what it did not record (a schema-1 document) filled in: the metric and level its next steps
    judge by, the devices, both ends' digests and builds."""
    good, bad = ends
    return replace(
        doc,
        metric=doc.metric or basis.metric,
        alpha=doc.alpha if doc.alpha is not None else basis.alpha,
        dag_run_id=basis.dag_run_id or doc.dag_run_id,
        digests=doc.digests or TriageEnds.of(_bare(good.image_digest), _bare(bad.image_digest)),
        builds=doc.builds or TriageEnds.of(good.build, bad.build),
        spent=TriageSpent.of(doc.steps, doc.spent.devices if doc.spent and doc.spent.devices else basis.devices),
    )


def _bare(image_digest: str | None) -> str | None:
    """A run's recorded digest (the daemon's RepoDigests entry, ``name@sha256:...``) as the bare
    ``sha256:...``."""
    return None if image_digest is None else pinned_digest(image_digest) or image_digest


def load(store: ArtifactSink, key: str) -> TriageDoc | None:
    """The stored triage (None: none yet). A document that does not parse is an error naming it:
    it is never overwritten silently."""
    if not store.exists(key):
        return None
    return TriageDoc.from_json(store.get_bytes(key), key)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def save(store: ArtifactSink, key: str, doc: TriageDoc) -> TriageDoc:
    """Store the triage as it stands (after every step), stamped with the time and what its steps
    spent (on the devices its `spent` names)."""
    devices = doc.spent.devices if doc.spent is not None else None
    stamped = replace(doc, updated_at=now(), spent=TriageSpent.of(doc.steps, devices))
    store.put_bytes(key, stamped.to_json().encode(), "application/json")
    return stamped


def _basis_html(doc: TriageDoc) -> str:
    """What the triage judged by, where it ran and what it spent, in one paragraph."""
    e = html.escape
    metric = f"step {'CPU ' if doc.metric == 'cpu' else ''}time ({doc.metric})" if doc.metric else "not recorded"
    level = (
        f"two-sided alpha {doc.alpha:g}, a step's intervals over all its looks covering together at "
        f"{100 * (1 - doc.alpha):g}%"
        if doc.alpha is not None
        else "not recorded"
    )
    spent = doc.spending()
    devices = (
        f", {spent.device_hours:.3f} device-hours ({spent.devices} devices per run)"
        if spent.device_hours is not None
        else " (devices not recorded)"
    )
    parts = [
        f"Metric: {e(metric)}; level: {e(level)}.",
        f"Spent: {spent.runs} runs, {spent.run_hours:.3f} run-hours{devices}.",
    ]
    for name, ends in (("Images", doc.digests), ("Builds", doc.builds)):
        if ends is not None:
            parts.append(f"{name}: good {e(ends.good or 'none')}, bad {e(ends.bad or 'none')}.")
    if doc.dag_run_id:
        parts.append(f"DAG run: {e(doc.dag_run_id)}.")
    if doc.alert:
        parts.append(f"Alert: {e(doc.alert)}.")
    return f"<p>{' '.join(parts)}</p>"


def _candidates_html(doc: TriageDoc) -> str:
    """The bisection's candidates, oldest first, each with what it runs."""
    e = html.escape

    def runs(c: TriageCandidate) -> str:
        if c.kind == "build":
            return f"build {c.build}"
        if c.kind == "image":
            return f"image {c.image}"
        return f"settings {json.dumps(c.settings, sort_keys=True)}"

    rows = "".join(
        f"<tr><td>{e(c.name)}</td><td>{e(c.kind)}</td><td>{e(c.created or '')}</td><td>{e(runs(c))}</td></tr>"
        for c in doc.candidates
    )
    return (
        f"<h2>Candidates</h2><table><tr><th>candidate</th><th>kind</th><th>created</th><th>runs</th></tr>{rows}</table>"
        if rows
        else ""
    )


def _explanation_html(ex: Explanation | None) -> str:
    e = html.escape
    if ex is None:
        return "<p>No explanation.</p>"
    if ex.error:
        return f"<p>{e(ex.error)}</p>"
    movers = [*ex.top_kernels, *ex.top_ops] if ex.top_kernels else ex.top_ops
    items = "".join(f"<li>{e(m.name)} ({e(m.status)}): {m.delta_us:+.1f} µs</li>" for m in movers)
    regions = "".join(f"<li>region {e(r.name)}: {r.delta_us:+.1f} µs</li>" for r in ex.regions)
    return (
        f"<p>{e(ex.sentence or '')}</p><p>{e(ex.good)} to {e(ex.bad)}, per profiled step:</p><ul>{items}{regions}</ul>"
    )


def report_html(doc: TriageDoc) -> str:
    """The triage's page: label, suspect, what it judged by and spent, diff, candidates, every
    step with its verdict, interval and the command that reruns it, the bisection's conclusion,
    the explanation and the commands."""
    e = html.escape

    def interval(step_pct: list[float] | None) -> str:
        return f"{step_pct[0]:+.1f}% to {step_pct[1]:+.1f}%" if step_pct else "none"

    s = doc.suspect
    rows = "".join(
        f"<tr><td>{e(d.section)}</td><td>{e(d.field)}</td><td>{e(json.dumps(d.good))}</td>"
        f"<td>{e(json.dumps(d.bad))}</td><td>{'yes' if d.bisectable else 'no'}</td></tr>"
        for d in s.diff
    )
    steps = "".join(
        f"<tr><td>{e(t.kind)}</td><td>{e(t.rung)}</td><td>{e(t.good)}</td><td>{e(t.candidate)}</td>"
        f"<td>{e(t.verdict)}</td><td>"
        + (f"{t.delta_pct:+.1f}%" if t.delta_pct is not None else "")
        + f"</td><td>{e(interval(t.interval_pct))}</td><td>{t.blocks}</td><td>{e(t.reason or '')}</td>"
        f"<td><code>{e(repro_command(doc, i))}</code></td></tr>"
        for i, t in enumerate(doc.steps)
    )
    culprits = "".join(
        f"<tr><td>{e(c.name)}</td><td>{e(c.last_good)}</td><td>{c.delta_pct:+.1f}%</td><td>{c.share_pct:.0f}%</td>"
        f"<td>{c.share_interval_pct[0]:.0f}% to {c.share_interval_pct[1]:.0f}%</td></tr>"
        for c in doc.culprits
    )
    commands = "".join(f"<li>{e(k)}: <code>{e(str(v))}</code></li>" for k, v in doc.reproduce.items())
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>triage {e(doc.ladder)} {e(doc.rung)} {e(doc.run_id)}</title></head><body>"
        f"<h1>{e(doc.label or doc.state)}: {e(doc.rung)}</h1>"
        f"<p>Ladder {e(doc.ladder)}, run {e(doc.run_id)} against {e(s.good_run_id)}: {e(s.direction)} "
        f"{s.delta_pct:+.1f}% ({e(s.reason)}). State: {e(doc.state)}.</p>"
        f"<p>{e(doc.conclusion or '')}</p>"
        + (
            "<h2>Culprits</h2><p>Largest share of the confirmed change first; each pair compared directly "
            '(docs/statistics-adaptive.md, "Bisecting by size").</p><table><tr><th>first bad</th>'
            f"<th>last good</th><th>B vs A</th><th>share</th><th>share interval</th></tr>{culprits}</table>"
            if culprits
            else ""
        )
        + _basis_html(doc)
        + "<h2>What differs</h2><table><tr><th>section</th><th>field</th><th>good</th><th>bad</th>"
        f"<th>bisectable</th></tr>{rows}</table>"
        + _candidates_html(doc)
        + "<h2>Steps</h2><table><tr><th>kind</th><th>rung</th><th>A</th><th>B</th><th>verdict</th><th>B vs A</th>"
        f"<th>interval</th><th>blocks</th><th>note</th><th>rerun its A/B</th></tr>{steps}</table>"
        f"<h2>Explanation</h2>{_explanation_html(doc.explanation)}<h2>Reproduce</h2><p>Each command reruns a "
        "step's A/B on the ladder's backend into a scratch prefix (docs/triage.md, \"Reproduce a step\").</p>"
        f"<ul>{commands}</ul></body></html>"
    )


def save_report(store: ArtifactSink, key: str, doc: TriageDoc) -> None:
    store.put_bytes(key, report_html(doc).encode(), "text/html")
