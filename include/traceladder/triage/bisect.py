"""The bisection over a confirmed change's ordered candidates (builds by creation time, image tags
by their config's `created`, or settings applied one at a time): each step confirms the midpoint
against the known good candidate; the search stops at the first bad one. A step that ends
`insufficient` stops the search ("between X and Y"); a candidate that cannot run is skipped with
its reason, as `git bisect skip` does. Every step is recorded.

The search itself is pure: `step(good, candidate)` runs the confirm (triage/confirm.py) and
`bisect` only orders the steps, so tests and the bench drive it with their own runners."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from traceladder.core.documents import JSONObject
from traceladder.core.errors import TraceladderError
from traceladder.stats.sequential import CONFIRMED, INSUFFICIENT, NOT_REPRODUCED


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
