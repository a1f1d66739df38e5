"""One suspect group per ladder run: confirm each suspect, bisect once on the rung with the largest
confirmed change, confirm the others at the first bad candidate, explain, record.

Resumable: every step's result is stored in the rung's `triage.json` as it finishes; a retry reads
it back, reuses each recorded step and runs only what is missing (a step cut off mid-way runs
again, never the whole search). A triage already `done` is left as it is."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from traceladder.core.documents import Culprit, DiffField, JSONObject, TriageDoc, TriageStep, TriageSuspect
from traceladder.stats.decisions import CONFIRMED, NoiseHistory, Share
from traceladder.storage.artifacts import ArtifactSink
from traceladder.triage import record
from traceladder.triage.bisect import (
    BUILD_VARIABLE,
    MAX_CULPRITS,
    BuildChanges,
    Candidate,
    CandidateUnavailable,
    Outcome,
    build_candidates,
    candidate_spec,
    find_culprits,
    image_candidates,
    setting_candidates,
)
from traceladder.triage.confirm import Budget, RunBlock, Spent, confirm
from traceladder.triage.explain import RunProfiled, explain
from traceladder.triage.suspects import RunSetup, spec_changes, stored_suspects


@dataclass
class TriageContext:
    """What a triage needs besides its suspects: where it stores, how it runs a block and a profiled
    run (the backend's), its budget, the build catalog, the image tags in creation order (the
    registry client's, or `triage.candidates`), the lens overlay for the explanation, and the
    approval gate before the bisection (None: no approval asked)."""

    store: ArtifactSink
    prefix: str
    ladder: str
    run_id: str
    run_block: RunBlock
    budget: Budget = field(default_factory=Budget)
    metric: str = "wall"
    builds: Mapping[str, BuildChanges] = field(default_factory=dict)
    image_tags: Sequence[tuple[str, str | None, str | None]] = ()
    image_tags_reason: str | None = None  # why the registry gave no tags (an end's image is gone)
    explicit_candidates: Sequence[str] = ()
    run_profiled: RunProfiled | None = None
    # rung -> what the ladder's cheapest torch lens changes in its spec (explain.lens_overlay)
    lens_overlay: Callable[[str], JSONObject | None] | None = None
    approve: Callable[[], bool] | None = None
    # a suspect -> its rung history's run-to-run variance (its last good run's block-model
    # residual), pooled with each step's own (stats/decisions.py); None: each step's own alone
    history: Callable[[TriageSuspect], NoiseHistory | None] | None = None
    spent: Spent = field(default_factory=Spent)
    # start a finished, refused or failed triage again (the Params form's `force`): its recorded
    # steps are reused, a skipped one runs again
    force: bool = False
    max_culprits: int = MAX_CULPRITS
    dag_run_id: str | None = None  # the triage DAG run working on it (None outside Airflow)

    @property
    def basis(self) -> record.Basis:
        return record.Basis(self.metric, self.budget.alpha, self.budget.devices, self.dag_run_id)


def step_seed(*parts: str) -> int:
    """A step's block-order seed from its run, rung, kind and pair: a rerun draws the same order."""
    return int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:4], "big")


def _log_size(step: TriageStep) -> float:
    return math.log1p((step.delta_pct or 0.0) / 100.0)


class _Triage:
    """One rung's triage document, saved after every change."""

    def __init__(
        self, ctx: TriageContext, suspect: TriageSuspect, group: list[str], ends: tuple[RunSetup, RunSetup]
    ) -> None:
        self.ctx = ctx
        self.key, self.report_key = record.keys(ctx.prefix, ctx.ladder, ctx.run_id, suspect.rung)
        found = record.load(ctx.store, self.key)
        if found is not None and found.state == "failed":  # a task that failed: resumed as it stood
            found = replace(found, state="running", error=None)
        if found is not None and ctx.force and found.state != "running":
            found = replace(
                found,
                state="running",
                label=None,
                conclusion=None,
                error=None,
                first_bad=None,
                last_good=None,
                culprits=[],
                explanation=None,
            )
        for done in found.steps if found else []:  # a resumed triage's budget counts what it spent
            ctx.spent.runs += done.runs
            ctx.spent.run_s += done.run_s
        if found is None:
            self.doc = record.started(ctx.ladder, ctx.run_id, suspect, group, ends, ctx.basis)
            self.save()
        else:  # a running one gets what it did not record and this DAG run; a finished one is left as it is
            self.doc = record.resumed(found, ends, ctx.basis) if found.state == "running" else found

    def save(self) -> None:
        self.doc = record.save(self.ctx.store, self.key, self.doc)

    def update(self, **changes: object) -> None:
        self.doc = replace(self.doc, **changes)  # type: ignore[arg-type]
        self.save()

    def recorded(self, kind: str, good: str, candidate: str, size_log: float | None = None) -> TriageStep | None:
        """The step recorded for this pair and kind, judged against the same size (a step of a
        sub-range judges the same pair against its own, smaller size: not the same step)."""

        def same_size(step: TriageStep) -> bool:
            if size_log is None or step.size_pct is None:  # a document from before sizes were kept
                return True
            return math.isclose(math.log1p(step.size_pct / 100), size_log, rel_tol=1e-9, abs_tol=1e-12)

        return next(
            (s for s in self.doc.steps if (s.kind, s.good, s.candidate) == (kind, good, candidate) and same_size(s)),
            None,
        )

    def step(
        self,
        kind: str,
        good: tuple[str, JSONObject],
        bad: tuple[str, JSONObject],
        suspect_log: float,
        rule: str = "confirm",
    ) -> TriageStep:
        """A confirm between two named specs by `rule`, reused when recorded (a skipped one runs
        again: its runs may now start), stored as soon as it ends."""
        done = self.recorded(kind, good[0], bad[0], suspect_log)
        if done is not None and done.verdict != "skipped":
            return done
        history = self.ctx.history(self.doc.suspect) if self.ctx.history is not None else None
        try:
            result = confirm(
                good[1],
                bad[1],
                suspect_log,
                self.ctx.run_block,
                self.ctx.budget,
                rung=self.doc.rung,
                names=(good[0], bad[0]),
                kind=kind,
                metric=self.ctx.metric,
                seed=step_seed(self.ctx.run_id, self.doc.rung, kind, good[0], bad[0]),
                step=len(self.doc.steps),
                rule=rule,
                history=history,
                spent=self.ctx.spent,
            )
        except CandidateUnavailable as exc:
            result = TriageStep(
                kind=kind,
                rung=self.doc.rung,
                good=good[0],
                candidate=bad[0],
                verdict="skipped",
                reason=str(exc),
                size_pct=100 * math.expm1(suspect_log),
            )
        self.update(steps=[*(s for s in self.doc.steps if s is not done), result])
        return result


def _candidates(ctx: TriageContext, suspect: TriageSuspect, good: RunSetup, bad: RunSetup) -> list[Candidate]:
    """The ordered candidates of a confirmed change: builds when the build differs, else image tags
    when the image differs, else the changed spec fields one at a time; [] when none of them moved."""
    fields = {d.field: d for d in suspect.diff}
    if ctx.explicit_candidates and ("build" in fields or "image_digest" in fields or "image" in fields):
        if "build" in fields:
            chosen = [b for b in ctx.builds.values() if b.name in ctx.explicit_candidates]
            order = {n: i for i, n in enumerate(ctx.explicit_candidates)}
            return [
                Candidate(b.name, "build", {"build": b.name}, b.created)
                for b in sorted(chosen, key=lambda b: order[b.name])
            ]
        tags = [(t, None, None) for t in ctx.explicit_candidates]
        return image_candidates(tags, str(good.spec.get("image")), str(bad.spec.get("image")))
    if "build" in fields and good.build and bad.build:
        return build_candidates(list(ctx.builds.values()), good.build, bad.build)
    if "image_digest" in fields and good.spec.get("image") == bad.spec.get("image"):
        return _moved_tag(good, bad)
    if ("image_digest" in fields or "image" in fields) and ctx.image_tags:
        return image_candidates(ctx.image_tags, str(good.spec.get("image")), str(bad.spec.get("image")))
    if ("image_digest" in fields or "image" in fields) and ctx.image_tags_reason:
        raise CandidateUnavailable(ctx.image_tags_reason)
    changes = [c for c in spec_changes(good.spec, bad.spec) if c[0] != f"docker_env_vars.{BUILD_VARIABLE}"]
    return setting_candidates(changes) if changes else []


Group = dict[str, tuple[_Triage, RunSetup, RunSetup]]


def _open(ctx: TriageContext, suspects: Sequence[tuple[TriageSuspect, RunSetup, RunSetup]]) -> Group:
    """Each suspect's triage document, read back when stored (a retry), else started."""
    group = [s.rung for s, _, _ in suspects]
    return {s.rung: (_Triage(ctx, s, group, (good, bad)), good, bad) for s, good, bad in suspects}


def _confirm_each(rungs: Group) -> list[tuple[str, TriageStep]]:
    """1. confirm each suspect (A its last good run's spec, B its own; a recorded confirm is
    reused); a suspect that is not confirmed is finished with its label. The confirmed ones."""
    confirmed: list[tuple[str, TriageStep]] = []
    for rung, (t, good, bad) in rungs.items():
        s = t.doc.suspect
        size = math.log1p(s.delta_pct / 100.0)
        step = t.step("confirm", (s.good_run_id, good.pinned_spec), (s.run_id, bad.pinned_spec), size)
        if step.verdict == CONFIRMED:
            confirmed.append((rung, step))
        else:
            label = record.label_for(step.verdict, s.direction) if step.verdict != "skipped" else "insufficient data"
            _finish(t, label, step.reason or f"the confirm ended {step.verdict}")
    return confirmed


def confirm_suspects(
    ctx: TriageContext, suspects: Sequence[tuple[TriageSuspect, RunSetup, RunSetup]]
) -> list[TriageDoc]:
    """Step 1 alone, before the approval (the triage DAG's `confirm` task): every suspect's confirm
    recorded; a confirmed rung stays `running` for the bisection, the others are finished. A later
    `triage_run` reuses the recorded confirms."""
    rungs = _open(ctx, suspects)
    if any(t.doc.state == "running" for t, _, _ in rungs.values()):
        _confirm_each(rungs)
    return [t.doc for t, _, _ in rungs.values()]


def triage_run(ctx: TriageContext, suspects: Sequence[tuple[TriageSuspect, RunSetup, RunSetup]]) -> list[TriageDoc]:
    """Triage one ladder run's suspect group (largest suspect first); returns each rung's document."""
    rungs = _open(ctx, suspects)
    if all(t.doc.state != "running" for t, _, _ in rungs.values()):
        return [t.doc for t, _, _ in rungs.values()]
    confirmed = _confirm_each(rungs)
    if not confirmed:
        return [t.doc for t, _, _ in rungs.values()]
    main_rung, main_step = max(confirmed, key=lambda c: abs(c[1].delta_pct or 0.0))
    main, good, bad = rungs[main_rung]
    if ctx.approve is not None and main.doc.state == "running" and not ctx.approve():
        for rung, _ in confirmed:
            t = rungs[rung][0]
            _finish(t, record.NOT_APPROVED, f"the bisection was not approved; {record.confirm_summary(t.doc)}")
        return [t.doc for t, _, _ in rungs.values()]
    # 2. bisect once, on the largest confirmed change
    non_bisectable = [d for d in main.doc.suspect.diff if not d.bisectable]
    try:
        candidates = _candidates(ctx, main.doc.suspect, good, bad)
    except CandidateUnavailable as exc:
        candidates, why = [], str(exc)
    else:
        why = "no image, build or setting changed between the two runs"
    culprits, conclusion = _localize(ctx, main, good, candidates, main_step, why, non_bisectable)
    by_name = {c.name: c for c in candidates}
    first_bad = by_name[culprits[0].name] if culprits else None
    last_good = by_name[culprits[0].last_good] if culprits else None
    main.update(
        bisected_on=main_rung,
        candidates=[c.as_part() for c in candidates],
        non_bisectable=non_bisectable,
        first_bad=first_bad.name if first_bad else None,
        last_good=last_good.name if last_good else None,
        culprits=culprits,
        conclusion=conclusion,
    )
    # 3. the other confirmed rungs at each culprit: each gets its own first bad (or none)
    for rung, step in confirmed:
        if rung != main_rung:
            _at_culprits(ctx, rungs[rung], main_rung, main.doc, candidates, _log_size(step), conclusion)
    # 4. explain the main rung: one profiled run of each end (image digests pinned)
    good_spec = candidate_spec(good.pinned_spec, last_good, ctx.builds) if last_good else good.pinned_spec
    bad_spec = candidate_spec(good.pinned_spec, first_bad, ctx.builds) if first_bad else bad.pinned_spec
    overlay = ctx.lens_overlay(main_rung) if ctx.lens_overlay is not None else None
    if main.doc.explanation is None and ctx.run_profiled is not None and overlay is not None:
        names = (
            last_good.name if last_good else main.doc.suspect.good_run_id,
            first_bad.name if first_bad else ctx.run_id,
        )
        main.update(
            explanation=explain(good_spec, bad_spec, overlay, ctx.run_profiled, names, main.doc.suspect.direction)
        )
    _finish(main, record.label_for(CONFIRMED, main.doc.suspect.direction), conclusion)
    return [t.doc for t, _, _ in rungs.values()]


def _moved_tag(good: RunSetup, bad: RunSetup) -> list[Candidate]:
    """A tag that moved (same tag, a new digest): its two digests are the candidates, each pinned."""
    tag = str(good.spec.get("image"))
    ends = []
    for setup in (good, bad):
        pinned = str(setup.pinned_spec.get("image"))
        digest = pinned.rsplit("@", 1)[-1] if "@" in pinned else (setup.image_digest or "unknown digest")
        ends.append(Candidate(f"{tag} at {digest}", "image", {"image": pinned}))
    return ends


def _localize(
    ctx: TriageContext,
    main: _Triage,
    good: RunSetup,
    candidates: list[Candidate],
    main_step: TriageStep,
    why: str,
    non_bisectable: list[DiffField],
) -> tuple[list[Culprit], str]:
    """The culprits over `candidates` (largest share first), and the conclusion in words."""
    machine = "; ".join(f"{d.field}: {d.good!r} -> {d.bad!r}" for d in non_bisectable)
    cannot = f"; causes that cannot be bisected: {machine}" if machine else ""
    if len(candidates) < 2:
        return [], f"not bisected: {why}{cannot}"
    size = _log_size(main_step)
    base = good.pinned_spec
    if len(candidates) == 2:  # the confirm itself compared them: it carries the whole change
        out = _outcome(main_step)
        whole = Share.of(size, out.interval, size) if out.interval is not None and size else Share(1.0, 1.0, 1.0)
        only = _culprit(candidates[1].name, candidates[0].name, main_step.delta_pct or 0.0, whole)
        moved = " (the tag moved to a new digest)" if " at sha256:" in candidates[1].name else ""
        return [only], f"first bad: {only.name} (last good: {only.last_good}){moved}{cannot}"

    def compare(g: Candidate, c: Candidate, step_size: float, kind: str) -> Outcome:
        return _outcome(
            main.step(
                kind,
                (g.name, candidate_spec(base, g, ctx.builds)),
                (c.name, candidate_spec(base, c, ctx.builds)),
                step_size,
                "size",
            )
        )

    result = find_culprits(candidates, compare, size, ctx.max_culprits)
    culprits = [_culprit(c.name, c.last_good, 100 * math.expm1(c.diff), c.share) for c in result.culprits]
    return culprits, result.conclusion + cannot


def _outcome(step: TriageStep) -> Outcome:
    """A recorded step as the search reads it: B minus A and its interval on the log scale."""
    diff = math.log1p(step.delta_pct / 100) if step.delta_pct is not None else None
    interval = None
    if step.interval_pct is not None:
        lo, hi = (math.log1p(x / 100) for x in step.interval_pct)
        interval = (lo, hi)
    return Outcome(step.verdict, diff, interval, step.reason or "")


def _culprit(name: str, last_good: str, delta_pct: float, share: Share) -> Culprit:
    return Culprit(
        name=name,
        last_good=last_good,
        delta_pct=delta_pct,
        share_pct=100 * share.share,
        share_interval_pct=[100 * share.low, 100 * share.high],
    )


def _at_culprits(
    ctx: TriageContext,
    rung: tuple[_Triage, RunSetup, RunSetup],
    main_rung: str,
    main: TriageDoc,
    candidates: list[Candidate],
    size: float,
    conclusion: str,
) -> None:
    """Another confirmed rung at each of the main rung's culprits: its first bad is the largest
    culprit where its own step confirms the change; none when no step does (its cause lies
    elsewhere, and it says so)."""
    t, g, b = rung
    by_name = {c.name: c for c in candidates}
    own: list[str] = []
    notes = []
    for culprit in main.culprits:
        last_good, first_bad = by_name[culprit.last_good], by_name[culprit.name]
        at = t.step(
            "at first bad",
            (last_good.name, candidate_spec(g.pinned_spec, last_good, ctx.builds)),
            (first_bad.name, candidate_spec(g.pinned_spec, first_bad, ctx.builds)),
            size,
        )
        notes.append(f"at {first_bad.name}: {at.verdict}")
        if at.verdict == CONFIRMED:
            own.append(culprit.name)
    if not main.culprits:
        note = f"{main_rung}'s bisection: {conclusion}"
    elif own:
        note = f"at {main_rung}'s culprits ({'; '.join(notes)})"
    else:
        note = f"its change is not at {main_rung}'s culprits ({'; '.join(notes)}); its own cause is not localized"
    first = next((c for c in main.culprits if c.name in own), None)
    t.update(
        bisected_on=main_rung,
        first_bad=first.name if first else None,
        last_good=first.last_good if first else None,
        culprits=[c for c in main.culprits if c.name in own],
    )
    _finish(t, record.label_for(CONFIRMED, t.doc.suspect.direction), note)


def _finish(t: _Triage, label: str, conclusion: str | None) -> None:
    """The rung's triage done (or not approved) with its label and conclusion, and the commands
    that rerun its confirm and its culprits' pairs (record.reproduce_commands)."""
    if t.doc.state != "running":
        return
    t.doc = replace(
        t.doc,
        state="not approved" if label == record.NOT_APPROVED else "done",
        label=label,
        conclusion=t.doc.conclusion or conclusion,
    )
    t.update(reproduce=record.reproduce_commands(t.doc))
    record.save_report(t.ctx.store, t.report_key, t.doc)


# ---- a ladder run's triage from what it stored


def triage_ladder_run(ctx: TriageContext) -> list[TriageDoc]:
    """Triage a published ladder run: its summary's `history.suspects`, their stored runs, the group."""
    suspects = stored_suspects(ctx.store, ctx.prefix, ctx.ladder, ctx.run_id)
    return triage_run(ctx, suspects) if suspects else []
