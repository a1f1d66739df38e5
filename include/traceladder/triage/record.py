"""Record a triage: its label, the command that reruns each step's A/B (`repro_command`: the
`traceladder triage repro` a person can run), `triage.json` (core/documents.py `TriageDoc`) and its
`report.html`, under the keys core/layout.py spells beside the run it triages. Each step is stored
as it finishes, so a retried task resumes where the last one stopped."""

from __future__ import annotations

import datetime
import html
import json
import shlex

from traceladder.core import layout
from traceladder.core.documents import JSONObject, TriageDoc, TriageStep
from traceladder.stats.decisions import CONFIRMED, INSUFFICIENT, NOT_REPRODUCED
from traceladder.storage.artifacts import ArtifactSink

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


def step_words(step: TriageStep) -> str:
    """A step's outcome in the triage's words: verdict, B against A with its interval, blocks."""
    size = f" {step.delta_pct:+.1f}%" if step.delta_pct is not None else ""
    interval = f" ({step.interval_pct[0]:+.1f}% to {step.interval_pct[1]:+.1f}%)" if step.interval_pct else ""
    return f"{step.verdict}{size}{interval} in {step.blocks} blocks"


def confirm_summary(doc: TriageDoc) -> str:
    """The rung's own confirm in words: its verdict, size and interval (B against A), blocks."""
    step = next((t for t in doc.steps if t.kind == "confirm" and t.rung == doc.rung), None)
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


def load(store: ArtifactSink, key: str) -> TriageDoc | None:
    """The stored triage (None: none yet). A document that does not parse is an error naming it:
    it is never overwritten silently."""
    if not store.exists(key):
        return None
    return TriageDoc.from_json(store.get_bytes(key), key)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def save(store: ArtifactSink, key: str, doc: TriageDoc) -> TriageDoc:
    """Store the triage as it stands (after every step), stamped with the time."""
    from dataclasses import replace

    stamped = replace(doc, updated_at=now())
    store.put_bytes(key, stamped.to_json().encode(), "application/json")
    return stamped


def report_html(doc: TriageDoc) -> str:
    """The triage's page: label, suspect, diff, every step with its verdict and interval, the
    bisection's conclusion, the explanation and the commands that rerun each step."""
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
    spent_runs, spent_h = sum(t.runs for t in doc.steps), sum(t.run_s for t in doc.steps) / 3600
    ex = doc.explanation
    explained = (
        "<p>No explanation.</p>"
        if ex is None
        else f"<p>{e(ex.error)}</p>"
        if ex.error
        else f"<p>{e(ex.sentence or '')}</p><ul>"
        + "".join(f"<li>{e(str(m.get('name')))}: {float(str(m.get('delta_us', 0))):+.1f} µs</li>" for m in ex.top_ops)
        + "</ul>"
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
        + f"<p>Spent: {spent_runs} runs, {spent_h:.2f} run-hours (times the run's devices: device-hours).</p>"
        "<h2>What differs</h2><table><tr><th>section</th><th>field</th><th>good</th><th>bad</th>"
        f"<th>bisectable</th></tr>{rows}</table>"
        "<h2>Steps</h2><table><tr><th>kind</th><th>rung</th><th>A</th><th>B</th><th>verdict</th><th>B vs A</th>"
        f"<th>interval</th><th>blocks</th><th>note</th><th>rerun its A/B</th></tr>{steps}</table>"
        f"<h2>Explanation</h2>{explained}<h2>Reproduce</h2><p>Each command reruns a step's A/B on the "
        'ladder\'s backend into a scratch prefix (docs/triage.md, "Reproduce a step").</p>'
        f"<ul>{commands}</ul></body></html>"
    )


def save_report(store: ArtifactSink, key: str, doc: TriageDoc) -> None:
    store.put_bytes(key, report_html(doc).encode(), "text/html")
