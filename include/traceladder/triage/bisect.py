"""The bisection over a confirmed change's ordered candidates (builds by creation time, image tags
by their config's `created`, or settings applied one at a time): each step confirms the midpoint
against the known good candidate; the search stops at the first bad one. A step that ends
`insufficient` stops the search ("between X and Y"); a candidate that cannot run is skipped with
its reason, as `git bisect skip` does. Every step is recorded.

The search itself is pure: `step(good, candidate)` runs the confirm (triage/confirm.py) and
`bisect` only orders the steps, so tests and the bench drive it with their own runners."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from traceladder.core.documents import JSONObject, JSONValue, as_object
from traceladder.core.errors import TraceladderError
from traceladder.core.env_vars import BUILD
from traceladder.stats.sequential import CONFIRMED, INSUFFICIENT, NOT_REPRODUCED


BUILD_VARIABLE = BUILD.name  # the build a spec runs, in its environment (plan/build.py)


class CandidateUnavailable(TraceladderError):
    """A candidate that cannot run (its image is gone, it fails to start): skipped, with its reason."""


@dataclass(frozen=True)
class Candidate:
    """One candidate cause: `name` as its source names it (a build, an image tag, a setting field),
    `kind` ("build" | "image" | "setting"), and what it changes against the good side's spec
    (`changes`: spec fields, or the build/image it runs)."""

    name: str
    kind: str
    changes: JSONObject = field(default_factory=dict)
    created: str | None = None

    def as_dict(self) -> JSONObject:
        return {"name": self.name, "kind": self.kind, "changes": self.changes, "created": self.created}


@dataclass(frozen=True)
class BisectStep:
    good: str
    candidate: str
    verdict: str  # confirmed | not reproduced | insufficient | skipped
    detail: JSONObject  # the confirm's record (interval, blocks), or {"reason": ...} for a skip

    def as_dict(self) -> JSONObject:
        return {"good": self.good, "candidate": self.candidate, "verdict": self.verdict, "detail": self.detail}


@dataclass(frozen=True)
class BisectResult:
    first_bad: str | None  # None: the search could not narrow it to one candidate
    last_good: str
    between: tuple[str, str] | None  # set when first_bad is None: the cause lies after X, up to Y
    steps: tuple[BisectStep, ...]
    skipped: tuple[tuple[str, str], ...]  # (candidate, reason)

    @property
    def conclusion(self) -> str:
        if self.first_bad is not None:
            return f"first bad: {self.first_bad} (last good: {self.last_good})"
        assert self.between is not None
        skipped = f"; skipped: {', '.join(n for n, _ in self.skipped)}" if self.skipped else ""
        return f"between {self.between[0]} and {self.between[1]}{skipped}"

    def as_dict(self) -> JSONObject:
        return {
            "first_bad": self.first_bad,
            "last_good": self.last_good,
            "between": list(self.between) if self.between else None,
            "steps": [s.as_dict() for s in self.steps],
            "skipped": [{"candidate": n, "reason": r} for n, r in self.skipped],
            "conclusion": self.conclusion,
        }


Step = Callable[[Candidate, Candidate], tuple[str, JSONObject]]


def bisect(candidates: Sequence[Candidate], step: Step, done: Sequence[BisectStep] = ()) -> BisectResult:
    """Search `candidates` (oldest first; the first is the known good, the last the known bad) for
    the first bad one. `step(good, candidate)` returns (verdict, its record) or raises
    CandidateUnavailable. `done`: steps already recorded by an earlier attempt (a retried task),
    replayed without running them again."""
    if len(candidates) < 2:
        raise ValueError("a bisection needs a known good and a known bad candidate")
    names = [c.name for c in candidates]
    replay = list(done)
    lo, hi = 0, len(candidates) - 1
    skipped: dict[int, str] = {}
    steps: list[BisectStep] = []
    while True:
        pool = [i for i in range(lo + 1, hi) if i not in skipped]
        if not pool:
            break
        target = (lo + hi) // 2
        mid = min(pool, key=lambda i: (abs(i - target), i))
        if replay and replay[0].good == names[lo] and replay[0].candidate == names[mid]:
            record = replay.pop(0)
        else:
            replay = []  # a replay that no longer matches the search is not reused
            try:
                verdict, detail = step(candidates[lo], candidates[mid])
            except CandidateUnavailable as exc:
                verdict, detail = "skipped", {"reason": str(exc)}
            record = BisectStep(names[lo], names[mid], verdict, detail)
        steps.append(record)
        if record.verdict == "skipped":
            skipped[mid] = str(record.detail.get("reason", ""))
        elif record.verdict == CONFIRMED:
            hi = mid
        elif record.verdict == NOT_REPRODUCED:
            lo = mid
        elif record.verdict == INSUFFICIENT:
            return _result(None, names, lo, hi, steps, skipped)
        else:
            raise ValueError(f"unknown step verdict {record.verdict!r}")
    if any(lo < i < hi for i in skipped):  # only skipped candidates are left: any of them, or hi
        return _result(None, names, lo, hi, steps, skipped)
    return _result(names[hi], names, lo, hi, steps, skipped)


def _result(
    first_bad: str | None, names: list[str], lo: int, hi: int, steps: list[BisectStep], skipped: dict[int, str]
) -> BisectResult:
    return BisectResult(
        first_bad,
        names[lo],
        None if first_bad is not None else (names[lo], names[hi]),
        tuple(steps),
        tuple((names[i], r) for i, r in sorted(skipped.items())),
    )


# ---- the candidates between a good and a bad setup, and the spec each one runs


def apply_build(spec: Mapping[str, JSONValue], builds: Mapping[str, BuildChanges], name: str) -> JSONObject:
    """`spec` with its build (TRACELADDER_BUILD in its environment) replaced by build `name`: the
    old build's overrides and variables taken out, the new one's put in, as the plan applies a build
    (plan/build.py `with_build`)."""
    if name not in builds:
        raise CandidateUnavailable(f"build {name!r} is not in the ladder's build catalog")
    args = dict(as_object(spec.get("model_args") or {}))
    env = {k: str(v) for k, v in as_object(spec.get("docker_env_vars") or {}).items()}
    old = builds.get(env.get(BUILD_VARIABLE, ""))
    if old is not None:
        for key in old.model_args:
            args.pop(key, None)
        for key in old.env:
            env.pop(key, None)
    new = builds[name]
    args.update(new.model_args)
    env.update({**new.env, BUILD_VARIABLE: name})
    out: JSONObject = dict(spec)
    out["model_args"] = args
    out["docker_env_vars"] = dict(env)
    return out


@dataclass(frozen=True)
class BuildChanges:
    """A catalog build as the triage applies it (config.models.Build, without pydantic here)."""

    name: str
    created: str
    model_args: JSONObject
    env: dict[str, str]


def build_candidates(builds: Sequence[BuildChanges], good: str, bad: str) -> list[Candidate]:
    """The catalog's builds from the good run's to the suspect run's, by creation time."""
    by_name = {b.name: b for b in builds}
    for name in (good, bad):
        if name not in by_name:
            raise CandidateUnavailable(f"build {name!r} is not in the ladder's build catalog")
    lo, hi = sorted((by_name[good].created, by_name[bad].created))
    ordered = sorted((b for b in builds if lo <= b.created <= hi), key=lambda b: (b.created, b.name))
    if by_name[good].created > by_name[bad].created:
        ordered.reverse()  # an improvement found by going back: still good first
    return [Candidate(b.name, "build", {"build": b.name}, b.created) for b in ordered]


def image_candidates(tags: Sequence[tuple[str, str | None, str | None]], good: str, bad: str) -> list[Candidate]:
    """Image tags as (image reference, digest, created), already in creation order (the registry
    client's list, or the ladder's `triage.candidates`), cut to those from the good image to the bad.
    A tag with a digest runs pinned (`name@sha256:...`)."""
    refs = [t[0] for t in tags]
    for ref in (good, bad):
        if ref not in refs:
            raise CandidateUnavailable(f"image {ref!r} is not among the candidates {refs}")
    i, j = refs.index(good), refs.index(bad)
    chosen = tags[i : j + 1] if i <= j else list(reversed(tags[j : i + 1]))
    return [
        Candidate(ref, "image", {"image": f"{_image_name(ref)}@{digest}" if digest else ref}, created)
        for ref, digest, created in chosen
    ]


def _image_name(ref: str) -> str:
    """The reference without its tag or digest: a ':' after the last '/' starts a tag (one before
    it is a registry's port, as in ``127.0.0.1:5000/repo``)."""
    name = ref.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def setting_candidates(changes: Sequence[tuple[str, JSONValue, JSONValue]]) -> list[Candidate]:
    """Each changed spec field applied one at a time, in field order: candidate k carries the first k
    changes (candidate 0 is the good spec, the last the bad one's settings)."""
    out = [Candidate("good settings", "setting", {})]
    applied: JSONObject = {}
    for key, _good, bad in changes:
        applied = {**applied, key: bad}
        out.append(Candidate(f"+{key}={bad!r}", "setting", dict(applied)))
    return out


def candidate_spec(
    good_spec: Mapping[str, JSONValue], candidate: Candidate, builds: Mapping[str, BuildChanges]
) -> JSONObject:
    """The spec a candidate runs: the good run's resolved spec with the candidate's change."""
    if candidate.kind == "build":
        return apply_build(good_spec, builds, str(candidate.changes["build"]))
    out: JSONObject = dict(good_spec)
    if candidate.kind == "image":
        out["image"] = candidate.changes["image"]
        return out
    for key, value in candidate.changes.items():
        head, dot, tail = key.partition(".")
        if dot:
            nested = dict(as_object(out.get(head) or {}))
            if value is None:
                nested.pop(tail, None)
            else:
                nested[tail] = value
            out[head] = nested
        else:
            out[key] = value
    return out
