"""``triage.json`` (issue 51), typed end to end (issue 59): a suspect rung confirmed, bisected and
explained, as ``TriageDoc`` and its parts. core/documents.py lists the stage documents and
re-exports these; the codec is core/codec.py.

Schema 2 types what schema 1 kept as open JSON (the candidates, each step's looks, the
explanation's top ops, kernels and regions) and adds what the triage judged with and spent: the
metric, the level, the runs and device-hours, the DAG run, both ends' image digests and builds,
and the alert the triage belongs to. A schema-1 file reads with those fields None (not recorded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from traceladder.core import layout
from traceladder.core.codec import Document, DocumentError, JSONObject, JSONValue, _f, _kind_ok, _Part
from traceladder.core.summary_parts import DeltaRow

TRIAGE_STATES = ("running", "done", "not approved", "failed")
TRIAGE_LABELS = ("confirmed regression", "confirmed improvement", "not reproduced", "insufficient data", "not approved")
STEP_VERDICTS = ("confirmed", "not reproduced", "insufficient", "skipped")
# the stats/decisions.py names a look records (tests/unit/triage/test_triage_doc.py checks they agree)
LOOK_STOPS = ("confirmed", "not reproduced", "insufficient")
DECISION_RULES = ("confirm", "size")
VARIANCE_SOURCES = ("confirm", "pooled with history")
TRIAGE_METRICS = ("wall", "cpu")  # config/models.py Ladder.metric
CANDIDATE_KINDS = ("build", "image", "setting")
MOVER_STATUSES = ("both", "appeared", "vanished")  # analysis/analyzers/diff.py `_side_by_side`


def _check_interval(where: str, interval: list[float] | None) -> None:
    if interval is not None and (len(interval) != 2 or not all(_kind_ok("number", x) for x in interval)):
        raise DocumentError(f"{where}: interval_pct: expected [low, high] numbers")


def pinned_digest(image: str) -> str | None:
    """The digest an image reference is pinned by (``name@sha256:...``), else None."""
    return image.rsplit("@", 1)[1] if "@" in image else None


@dataclass(frozen=True, kw_only=True)
class DiffField(_Part):
    """One field that differs between the last good run and the suspect run: `section` says where
    it was read (image: the image digest; spec: the resolved rung spec from spec.json/plan.json;
    provenance: metrics.json's provenance; build: the build catalog's entry)."""

    FILE: ClassVar[str] = "diff field"

    section: str = _f("str", one_of=("image", "spec", "provenance", "build"))
    field: str = _f("str")
    good: JSONValue = _f("any?")
    bad: JSONValue = _f("any?")
    bisectable: bool = _f("bool", default=True)  # a driver or a host is reported, not bisected


@dataclass(frozen=True, kw_only=True)
class TriageSuspect(_Part):
    """Why the rung is a suspect (stats/history.py `suspect`) and what differs from its last good run."""

    FILE: ClassVar[str] = "suspect"

    rung: str = _f("str")
    run_id: str = _f("str")
    good_run_id: str = _f("str")
    reason: str = _f("str", one_of=("change point", "prediction bound", "manual"))
    direction: str = _f("str", one_of=("slower", "faster"))
    delta_pct: float = _f("number")
    diff: list[DiffField] = _f("list", default=[], part=DiffField)


@dataclass(frozen=True, kw_only=True)
class TriageLook(_Part):
    """One look of a step after `blocks` A/B blocks (stats/decisions.py ``ConfirmLook``): B minus
    A in % (None: not finite), its interval (None: not estimable yet, before CONFIRM_MIN_BLOCKS)
    at this look's two-sided critical value `critical_z` (the Hwang-Shih-DeCani share of the
    triage's alpha spent by this look) as the t quantile with the same tail on `df` degrees of
    freedom (the block model's residual, or pooled with the rung's history: `variance`), the stop
    the step's `rule` made here (None: go on), and the size rule's log likelihood ratio (its
    bounds are +-log 99). Looks from before the size rule have neither `rule` nor `variance`."""

    FILE: ClassVar[str] = "look"

    blocks: int = _f("int")
    delta_pct: float | None = _f("number?")
    interval_pct: list[float] | None = _f("list?")
    df: int = _f("int")
    critical_z: float = _f("number")
    stop: str | None = _f("str?", one_of=LOOK_STOPS)
    rule: str = _f("str", default="confirm", one_of=DECISION_RULES)
    variance: str = _f("str", default="confirm", one_of=VARIANCE_SOURCES)
    llr: float | None = _f("number?", default=None, omit_none=True)

    @classmethod
    def from_dict(cls, data: object, source: str | None = None) -> TriageLook:
        doc = super().from_dict(data, source)
        _check_interval(source or cls.FILE, doc.interval_pct)
        return doc


@dataclass(frozen=True, kw_only=True)
class TriageStep(_Part):
    """One confirm between two setups (the suspect's own, a bisection step, or another rung at the
    first bad candidate), or a skipped candidate: its verdict and interval (B minus A, in %)."""

    FILE: ClassVar[str] = "step"

    # confirm: the suspect's own; bisect: a candidate against its range's good end (by size);
    # pair: a culprit's two neighbours compared directly; range: a range's two ends, to decide
    # whether it holds another culprit; at first bad: another rung at the culprit
    kind: str = _f("str", one_of=("confirm", "bisect", "pair", "range", "at first bad"))
    rung: str = _f("str")
    good: str = _f("str")  # the A side: a run id or a candidate's name
    candidate: str = _f("str")  # the B side
    verdict: str = _f("str", one_of=STEP_VERDICTS)
    delta_pct: float | None = _f("number?", default=None)
    interval_pct: list[float] | None = _f("list?", default=None)  # the last look's
    blocks: int = _f("int", default=0)
    looks: list[TriageLook] = _f("list", default=[], part=TriageLook)
    reason: str | None = _f("str?", default=None, omit_none=True)  # a skip's, or why insufficient
    runs: int = _f("int", default=0)  # runs started, failed ones and retries included
    run_s: float = _f("number", default=0.0)  # their seconds, summed (device-seconds / devices)
    more_blocks: int | None = _f("int?", default=None, omit_none=True)  # insufficient: about how many more
    size_pct: float | None = _f("number?", default=None, omit_none=True)  # the size s the step judged against

    @classmethod
    def from_dict(cls, data: object, source: str | None = None) -> TriageStep:
        doc = super().from_dict(data, source)
        _check_interval(source or cls.FILE, doc.interval_pct)
        return doc


@dataclass(frozen=True, kw_only=True)
class TriageCandidate(_Part):
    """One candidate cause the bisection ordered (triage/bisect.py ``Candidate``), oldest first: its
    name, kind and creation time, and what it runs: a build of the ladder's catalog (`build`), an
    image (`image`, pinned ``name@sha256:...`` where its digest is known, with that `digest`), or
    the good run's spec with `settings` (spec fields, nested ones dotted, the first k changes)."""

    FILE: ClassVar[str] = "candidate"

    name: str = _f("str")
    kind: str = _f("str", one_of=CANDIDATE_KINDS)
    created: str | None = _f("str?", default=None)
    build: str | None = _f("str?", default=None, omit_none=True)
    image: str | None = _f("str?", default=None, omit_none=True)
    digest: str | None = _f("str?", default=None, omit_none=True)
    settings: JSONObject | None = _f("object?", default=None, omit_none=True)

    @classmethod
    def fields_of(cls, kind: object, changes: Mapping[str, JSONValue]) -> JSONObject:
        """The fields a candidate's `changes` give (what triage/bisect.py `candidate_spec` applies,
        and what schema 1 stored): `{"build": name}`, `{"image": ref}` or the settings."""
        if kind == "build":
            return {"build": changes.get("build")}
        if kind == "image":
            image = changes.get("image")
            return {"image": image, "digest": pinned_digest(image) if isinstance(image, str) else None}
        return {"settings": dict(changes)}

    @classmethod
    def from_dict(cls, data: object, source: str | None = None) -> TriageCandidate:
        doc = super().from_dict(data, source)
        needs = {"build": doc.build, "image": doc.image, "setting": doc.settings}
        if needs[doc.kind] is None:
            key = "settings" if doc.kind == "setting" else doc.kind
            raise DocumentError(f"{source or cls.FILE}: {key}: missing for a {doc.kind} candidate")
        return doc


@dataclass(frozen=True, kw_only=True)
class Culprit(_Part):
    """A candidate named as a cause: its pair (last good, first bad) compared directly on the
    bisected rung, and the share of the confirmed change that pair carries, with its interval."""

    FILE: ClassVar[str] = "culprit"

    name: str = _f("str")
    last_good: str = _f("str")
    delta_pct: float = _f("number")
    share_pct: float = _f("number")
    share_interval_pct: list[float] = _f("list")

    def share_text(self) -> str:
        """`share 63% [34%, 91%]`, as the notice and the demo print it."""
        low, high = self.share_interval_pct
        return f"share {self.share_pct:.0f}% [{low:.0f}%, {high:.0f}%]"


@dataclass(frozen=True, kw_only=True)
class Mover(_Part):
    """A top op or kernel of the explanation (a compare sheet's row, analysis/analyzers/diff.py
    `_movers`): µs per profiled step at the good end (`base_us`) and the first bad (`new_us`), new
    minus base, and whether it ran on both sides, appeared or vanished."""

    FILE: ClassVar[str] = "mover"

    name: str = _f("str")
    base_us: float = _f("number")
    new_us: float = _f("number")
    delta_us: float = _f("number")
    status: str = _f("str", one_of=MOVER_STATUSES)


@dataclass(frozen=True, kw_only=True)
class Explanation(_Part):
    """The attribution between one profiled run of the good and of the first bad candidate: its
    sentence (summary/attribution.py `entry`), the top ops and kernels by |delta| (kernels on GPU
    traces only) and the regions' deltas (CPU traces only), largest first."""

    FILE: ClassVar[str] = "explanation"

    lens: str = _f("str")
    good: str = _f("str")
    bad: str = _f("str")
    sentence: str | None = _f("str?", default=None)
    top_ops: list[Mover] = _f("list", default=[], part=Mover)
    top_kernels: list[Mover] = _f("list", default=[], part=Mover)
    regions: list[DeltaRow] = _f("list", default=[], part=DeltaRow)
    error: str | None = _f("str?", default=None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class TriageSpent(_Part):
    """What a rung's triage spent over its steps (their `runs` and `run_s`; the triage's budget
    counts its whole group's): runs started, failed ones and retries included, their hours, the
    devices each run holds (the ladder's nodes times GPUs per node; 1 on the CPU proxy, whose
    device-hours are CPU-hours) and run hours times devices. None: devices not known."""

    FILE: ClassVar[str] = "spent"

    runs: int = _f("int")
    run_hours: float = _f("number")
    devices: int | None = _f("int?")
    device_hours: float | None = _f("number?")

    @classmethod
    def of(cls, steps: Sequence[TriageStep], devices: int | None) -> TriageSpent:
        hours = sum(s.run_s for s in steps) / 3600
        return cls(
            runs=sum(s.runs for s in steps),
            run_hours=hours,
            devices=devices,
            device_hours=None if devices is None else hours * devices,
        )


@dataclass(frozen=True, kw_only=True)
class TriageEnds(_Part):
    """One value at the triage's two ends: the last good run's and the suspect run's (None: that
    run recorded none)."""

    FILE: ClassVar[str] = "ends"

    good: str | None = _f("str?")
    bad: str | None = _f("str?")

    @classmethod
    def of(cls, good: str | None, bad: str | None) -> TriageEnds | None:
        """The two values, or None when neither run recorded one."""
        return None if good is None and bad is None else cls(good=good, bad=bad)


@dataclass(frozen=True, kw_only=True)
class TriageDoc(Document):
    """A suspect rung's triage (``triage.json``, layout.triage_key): its suspect, every step, the
    bisection's conclusion, the explanation, the label and the state. One suspect group per ladder
    run: `group` names its rungs and `bisected_on` the rung the one bisection ran on.

    `metric` is what every step judged (the ladder's: `wall` step time, `cpu` step CPU time).
    `alpha` is the two-sided level of every step's looks (the ladder's `triage.alpha`): a step's
    looks spend it by Hwang-Shih-DeCani's function, so its intervals at all its looks together
    cover the true B minus A with probability 1 - alpha (each look's own interval is wider than a
    single 1 - alpha one), and a confirm wrongly confirms a change in the suspect's direction with
    probability at most alpha / 2. The size rule's bisection decisions have their own error rates
    (stats/decisions.py SIZE_ERROR); their intervals and the culprits' share intervals use the same
    critical values. `dag_run_id`: the triage DAG run that last worked on it (None outside
    Airflow); `digests` and `builds`: the last good and the suspect run's image digests (bare
    ``sha256:...``) and builds (None where neither run recorded one: the local backend has no
    digests). Schema 1 recorded
    none of these: they read as None, and `spending()` counts its steps."""

    FILE: ClassVar[str] = layout.TRIAGE_OBJECT
    SCHEMA: ClassVar[int] = 2  # 2: typed candidates, looks and explanation; metric, level, spent, DAG run, ends
    READS: ClassVar[tuple[int, ...]] = (1,)
    JSON_INDENT: ClassVar[int | None] = 1

    ladder: str = _f("str")
    run_id: str = _f("str")
    rung: str = _f("str")
    state: str = _f("str", one_of=TRIAGE_STATES)
    label: str | None = _f("str?", default=None, one_of=TRIAGE_LABELS)
    alert: str | None = _f("str?", default=None, omit_none=True)  # the id of the alert it belongs to
    metric: str | None = _f("str?", one_of=TRIAGE_METRICS)
    alpha: float | None = _f("number?")
    dag_run_id: str | None = _f("str?")
    suspect: TriageSuspect = _f("object", part=TriageSuspect)
    digests: TriageEnds | None = _f("object?", part=TriageEnds)
    builds: TriageEnds | None = _f("object?", part=TriageEnds)
    group: list[str] = _f("list", default=[])
    bisected_on: str | None = _f("str?", default=None)
    candidates: list[TriageCandidate] = _f("list", default=[], part=TriageCandidate)
    steps: list[TriageStep] = _f("list", default=[], part=TriageStep)
    spent: TriageSpent | None = _f("object?", part=TriageSpent)
    first_bad: str | None = _f("str?", default=None)  # the largest culprit's (or this rung's own)
    last_good: str | None = _f("str?", default=None)
    culprits: list[Culprit] = _f("list", default=[], part=Culprit)  # largest share first
    conclusion: str | None = _f("str?", default=None)
    non_bisectable: list[DiffField] = _f("list", default=[], part=DiffField)
    explanation: Explanation | None = _f("object?", default=None, part=Explanation)
    # "confirm" / "pair <culprit>" -> `traceladder triage repro` of that step (record.reproduce_commands);
    # a triage.json from before it: "good"/"bad" -> a `traceladder run-rung` command
    reproduce: JSONObject = _f("object", default={})
    error: str | None = _f("str?", default=None, omit_none=True)
    updated_at: str = _f("str", default="")

    @classmethod
    def upgrade(cls, data: JSONObject, version: int, source: str) -> JSONObject:
        # 1: none of schema 2's added fields (not recorded), and each candidate as
        # {name, kind, changes, created} with `changes` what candidate_spec applies
        unknown: JSONObject = {k: None for k in ("metric", "alpha", "dag_run_id", "digests", "builds", "spent")}
        out = unknown | data
        candidates = data.get("candidates")
        if isinstance(candidates, list):
            out["candidates"] = [_candidate_v1(c) for c in candidates]
        return out

    def spending(self) -> TriageSpent:
        """What it spent: as recorded, else (schema 1) its steps counted, devices unknown."""
        return self.spent or TriageSpent.of(self.steps, None)


def _candidate_v1(item: JSONValue) -> JSONValue:
    """A schema-1 candidate in schema 2's shape (one that is not an object with a `changes` object
    is left for the part's checks to refuse)."""
    changes = item.get("changes") if isinstance(item, dict) else None
    if not isinstance(item, dict) or not isinstance(changes, dict):
        return item
    rest = {k: v for k, v in item.items() if k != "changes"}
    return rest | TriageCandidate.fields_of(item.get("kind"), changes)
