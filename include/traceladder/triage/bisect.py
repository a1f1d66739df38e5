"""The search for the culprits of a confirmed change of log size s over its ordered candidates
(builds by creation time, image tags by their config's `created`, or settings applied one at a
time; the first is the known good, the last the known bad).

- **Decisions by size.** A range (lo, hi) that carries a change of size r is bisected for the
  candidate where its level crosses r/2: each step compares a candidate with the range's own good
  end `lo` and asks which end it looks like (stats/decisions.py, rule `size`: a likelihood ratio
  of 0 against r). With one culprit the crossing is the culprit; with two, it is the larger one
  whenever that carries more than half of r.
- **A culprit is named only after its pair is compared directly** (last good against first bad,
  the same rule: it must look like the change the steps measured between its ends, not like 0),
  and reported with the share of s the pair carries: the pair's B minus A over s, with its
  interval at the look's critical value over s.
- **More than one culprit** (TorchBench's queue of ranges): the search goes on in the ranges left
  on either side of a named pair when the pair carries less than MIN_SHARE of its range's change
  (the upper end of that share is below it), or when what the steps measured puts another range's
  ends more than EXTRA_FRACTION * s apart. Such a range's ends are compared first (rule `size`: 0 against s/3);
  a range that clears it is queued with its measured size. Largest range first, at most
  `max_culprits` culprits; they are reported largest share first.
- **Sample more, not stop.** A step adds blocks up to its budget (triage/confirm.py); only an
  exhausted budget leaves a range "between X and Y". A candidate that cannot run is skipped with
  its reason, as `git bisect skip` does.

The search itself is pure: `compare(good, candidate, size, kind)` runs a step and returns its
`Outcome`; tests and the bench drive it with their own."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from traceladder.core.documents import JSONObject, JSONValue, TriageCandidate, as_object
from traceladder.core.errors import TraceladderError
from traceladder.core.env_vars import BUILD
from traceladder.stats.decisions import CONFIRMED, INSUFFICIENT, NOT_REPRODUCED, Share


BUILD_VARIABLE = BUILD.name  # the build a spec runs, in its environment (plan/build.py)
MIN_SHARE = 0.9  # a named pair whose share is surely below this leaves room for another culprit
EXTRA_FRACTION = 1 / 3  # another range is searched when its ends look this share of s apart
MAX_CULPRITS = 3
SKIPPED = "skipped"


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

    @classmethod
    def of_part(cls, part: TriageCandidate) -> Candidate:
        """The candidate triage.json recorded (`as_part`), to run again."""
        if part.kind == "build":
            changes: JSONObject = {"build": part.build}
        elif part.kind == "image":
            changes = {"image": part.image}
        else:
            changes = dict(part.settings or {})
        return cls(part.name, part.kind, changes, part.created)

    def as_part(self) -> TriageCandidate:
        """The candidate as triage.json records it (its changes as typed fields)."""
        named: JSONObject = {"name": self.name, "kind": self.kind, "created": self.created}
        return TriageCandidate.from_dict(named | TriageCandidate.fields_of(self.kind, self.changes))


@dataclass(frozen=True)
class Outcome:
    """A step's result: its verdict (confirmed | not reproduced | insufficient | skipped), B minus A
    on the log scale with its interval (None when it had none), and a skip's or a stop's reason."""

    verdict: str
    diff: float | None = None
    interval: tuple[float, float] | None = None
    reason: str = ""


@dataclass(frozen=True)
class BisectStep:
    kind: str  # bisect | pair | range
    good: str
    candidate: str
    outcome: Outcome


@dataclass(frozen=True)
class FoundCulprit:
    name: str
    last_good: str
    diff: float
    share: Share


@dataclass(frozen=True)
class BisectResult:
    culprits: tuple[FoundCulprit, ...]  # largest share first
    unresolved: tuple[tuple[str, str, str], ...]  # (after X, up to Y, why): ranges left open
    steps: tuple[BisectStep, ...]
    skipped: tuple[tuple[str, str], ...]  # (candidate, reason)

    @property
    def first_bad(self) -> str | None:
        return self.culprits[0].name if self.culprits else None

    @property
    def last_good(self) -> str | None:
        return self.culprits[0].last_good if self.culprits else None

    @property
    def conclusion(self) -> str:
        parts = [
            f"culprit: {c.name} (last good: {c.last_good}) share {100 * c.share.share:.0f}% "
            f"[{100 * c.share.low:.0f}%, {100 * c.share.high:.0f}%]"
            for c in self.culprits
        ]
        parts += [f"between {a} and {b} ({why})" for a, b, why in self.unresolved]
        if self.skipped:
            parts.append(f"skipped: {', '.join(n for n, _ in self.skipped)}")
        return "; ".join(parts) or "no culprit found"


Compare = Callable[[Candidate, Candidate, float, str], Outcome]


@dataclass
class _Search:
    candidates: Sequence[Candidate]
    compare: Compare
    total: float
    steps: list[BisectStep] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    measured: dict[tuple[int, int], Outcome] = field(default_factory=dict)

    def run(self, good: int, candidate: int, size: float, kind: str) -> Outcome:
        out = self.compare(self.candidates[good], self.candidates[candidate], size, kind)
        self.steps.append(BisectStep(kind, self.candidates[good].name, self.candidates[candidate].name, out))
        if out.verdict == SKIPPED:
            self.skipped[candidate] = out.reason
        elif out.diff is not None and out.interval is not None:
            self.measured[(good, candidate)] = out
        return out

    def crossing(self, lo: int, hi: int, size: float) -> tuple[int, int, str | None]:
        """Bisect (lo, hi) for where its level crosses size/2: the pair (a, b), and why it stayed open."""
        a, b = lo, hi
        while True:
            pool = [i for i in range(a + 1, b) if i not in self.skipped]
            if not pool:
                break
            target = (a + b) // 2
            mid = min(pool, key=lambda i: (abs(i - target), i))
            out = self.run(lo, mid, size, "bisect")
            if out.verdict == CONFIRMED:
                b = mid
            elif out.verdict == NOT_REPRODUCED:
                a = mid
            elif out.verdict == INSUFFICIENT:
                return a, b, out.reason or "a step's budget ran out"
        if any(a < i < b for i in self.skipped):  # only skipped candidates are left: any of them, or b
            return a, b, "only skipped candidates are left between them"
        return a, b, None

    def pair(self, a: int, b: int, size: float) -> Outcome:
        """The pair compared directly: a step that already compared them, or a new one."""
        done = self.measured.get((a, b))
        if done is not None and done.verdict == CONFIRMED:
            return done
        return self.run(a, b, size, "pair")

    def diff(self, a: int, b: int) -> float | None:
        """What the steps measured between a and b, directly or through a common good end."""
        if (a, b) in self.measured:
            return self.measured[(a, b)].diff
        for (g, c), out in self.measured.items():
            if c == b and (g, a) in self.measured and out.diff is not None:
                return out.diff - (self.measured[(g, a)].diff or 0.0)
        return None


def _pair_size(search: _Search, lo: int, a: int, b: int, size: float) -> float:
    """The size the pair (a, b) is judged against: what the steps measured between its ends
    (d(lo, b) - d(lo, a)), when that points the suspect's way; else the range's. With two culprits
    the pair carries only part of the range's change, and against the whole it would sit near the
    line; either way the size is fixed before the pair's own runs."""
    at_b = search.diff(lo, b)
    at_a = search.diff(lo, a) if a > lo else 0.0
    if at_b is None or at_a is None or (at_b - at_a) * size <= 0:
        return size
    return at_b - at_a


def find_culprits(
    candidates: Sequence[Candidate], compare: Compare, total_log: float, max_culprits: int = MAX_CULPRITS
) -> BisectResult:
    """Search `candidates` (oldest first; the first the known good, the last the known bad, whose
    change measured `total_log`) for its culprits, as the module doc says."""
    if len(candidates) < 2:
        raise ValueError("a bisection needs a known good and a known bad candidate")
    names = [c.name for c in candidates]
    search = _Search(candidates, compare, total_log)
    queue: list[tuple[int, int, float]] = [(0, len(candidates) - 1, total_log)]
    culprits: list[FoundCulprit] = []
    unresolved: list[tuple[str, str, str]] = []
    while queue and len(culprits) < max_culprits:
        queue.sort(key=lambda r: abs(r[2]))
        lo, hi, size = queue.pop()
        a, b, why = search.crossing(lo, hi, size)
        if why is not None:
            unresolved.append((names[a], names[b], why))
            continue
        pair = search.pair(a, b, _pair_size(search, lo, a, b, size))
        if pair.verdict != CONFIRMED or pair.diff is None or pair.interval is None:
            if pair.verdict != NOT_REPRODUCED:  # not reproduced: the range held no change of note
                unresolved.append((names[a], names[b], pair.reason or f"their direct comparison ended {pair.verdict}"))
            continue
        share = Share.of(pair.diff, pair.interval, total_log)
        of_range = Share.of(pair.diff, pair.interval, size)  # what it leaves of its own range's change
        culprits.append(FoundCulprit(names[b], names[a], pair.diff, share))
        if len(culprits) >= max_culprits:
            break
        left = search.diff(lo, a) if a > lo else None
        at_b = search.diff(lo, b)
        rest = {
            (lo, a): left,
            (b, hi): None if at_b is None else size - at_b,
        }
        for (x, y), estimate in rest.items():
            if y <= x:
                continue
            wide = estimate is not None and estimate / total_log > EXTRA_FRACTION
            if not (of_range.high < MIN_SHARE or wide):
                continue
            ends = search.run(x, y, EXTRA_FRACTION * total_log, "range")
            if ends.verdict == CONFIRMED and ends.diff is not None:
                queue.append((x, y, ends.diff))
    culprits.sort(key=lambda c: -c.share.share)
    return BisectResult(
        tuple(culprits),
        tuple(unresolved),
        tuple(search.steps),
        tuple((names[i], r) for i, r in sorted(search.skipped.items())),
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
