"""Concurrent viewers of the Ladders page (issue 30, item 3): an asyncio load generator (httpx)
against a real api-server on loopback, used by ``bench_scale.bench_page_load`` and by
``tests/integration/test_page_load.py``.

Each viewer has its own token from ``POST /auth/token`` and loops, bounded in count and in time,
over the ladder list, a run's page, the run's report and one of its charts, with a short think
time between clicks. With ``browser_cache`` a viewer keeps what a browser keeps: a response
marked ``immutable`` is not asked for again, and one with an ``ETag`` is revalidated with
``If-None-Match`` (a 304 counts as served). Beside them, a prober sends requests with no token
and with a bad one, which must all be refused."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from traceladder.ui import URL_PREFIX

TARGETS = ("ladder list", "run page", "report", "chart")
# The warm-up before the clock (not measured): rounds of concurrent ladder lists until one is fast.
WARM_CONCURRENCY, WARM_ROUND_S, WARM_MAX_S = 4, 0.3, 60.0


@dataclass
class Site:
    """What the viewers open: the page's base URL and, per ladder file, its runs and a chart name."""

    url: str
    runs: dict[str, list[str]]  # ladder file -> run ids
    chart: str = "waterfall.png"

    def path(self, target: str, rng: random.Random) -> str:
        if target == "ladder list":
            return f"{URL_PREFIX}/"
        file = rng.choice(sorted(self.runs))
        run = rng.choice(self.runs[file])
        base = f"{URL_PREFIX}/ladders/{quote(file)}"
        if target == "run page":
            return f"{base}/runs/{run}"
        if target == "report":
            return f"{base}/artifacts/{run}/summary/report.html?v=1"  # as the run page links it
        return f"{base}/artifacts/{run}/summary/charts/{self.chart}?v=1"


@dataclass
class LoadResult:
    viewers: int
    seconds: float
    latencies_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # (seconds since the clock started, ms) of every request: where in the run the slow ones fall
    timeline: list[tuple[float, float]] = field(default_factory=list)
    started: float = 0.0
    warm_s: float = 0.0  # the warm-up before the clock
    statuses: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    from_browser_cache: int = 0
    unauthenticated_sent: int = 0
    unauthenticated_served: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies_ms.values())

    def all_latencies(self) -> list[float]:
        return [x for v in self.latencies_ms.values() for x in v]

    @staticmethod
    def quantile(values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        if len(values) == 1:
            return values[0]
        return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]

    def p(self, q: float, target: str | None = None) -> float:
        return self.quantile(self.latencies_ms[target] if target else self.all_latencies(), q)

    def p_between(self, q: float, from_s: float, to_s: float) -> tuple[float, int]:
        """The quantile of the requests started in [from_s, to_s) of the run, and their count."""
        values = [ms for at, ms in self.timeline if from_s <= at < to_s]
        return self.quantile(values, q), len(values)


def _loopback(url: str) -> None:
    host = urlsplit(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"the load generator reaches loopback only, not {host!r}")


async def _token(client: Any, user: str, password: str) -> str:
    resp = await client.post("/auth/token", json={"username": user, "password": password})
    if resp.status_code != 201:
        raise RuntimeError(f"POST /auth/token for {user}: HTTP {resp.status_code}")
    return str(resp.json()["access_token"])


async def _viewer(
    site: Site,
    token: str,
    result: LoadResult,
    deadline: float,
    max_requests: int,
    seed: int,
    think_s: tuple[float, float],
    browser_cache: bool,
) -> None:
    import httpx

    rng = random.Random(seed)
    first = seed % len(TARGETS)  # viewers start on different pages, so a short run covers each
    order = TARGETS[first:] + TARGETS[:first]
    kept: dict[str, str] = {}  # path -> ETag, or "immutable"
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/html"}
    async with httpx.AsyncClient(base_url=site.url, headers=headers, timeout=60) as client:
        sent = 0
        while sent < max_requests and time.monotonic() < deadline:
            for target in order:
                if sent >= max_requests or time.monotonic() >= deadline:
                    break
                path = site.path(target, rng)
                extra = {}
                if browser_cache and kept.get(path) == "immutable":
                    result.from_browser_cache += 1
                    await asyncio.sleep(rng.uniform(*think_s))
                    continue
                if browser_cache and path in kept:
                    extra["If-None-Match"] = kept[path]
                sent += 1
                t0 = time.perf_counter()
                try:
                    resp = await client.get(path, headers=extra)
                    await resp.aread()
                except httpx.HTTPError as exc:
                    result.errors.append(f"{target} {path}: {type(exc).__name__}")
                    continue
                result.latencies_ms[target].append((time.perf_counter() - t0) * 1000)
                result.timeline.append((t0 - result.started, result.latencies_ms[target][-1]))
                result.statuses[f"{target} {resp.status_code}"] += 1
                if resp.status_code not in (200, 304):
                    result.errors.append(f"{target} {path}: HTTP {resp.status_code}")
                elif browser_cache:
                    if "immutable" in resp.headers.get("cache-control", ""):
                        kept[path] = "immutable"
                    elif resp.headers.get("etag"):
                        kept[path] = resp.headers["etag"]
                await asyncio.sleep(rng.uniform(*think_s))


MIN_PROBES = 8


async def _prober(site: Site, result: LoadResult, deadline: float, max_requests: int, seed: int) -> None:
    """Requests with no token and with a forged one: each must be refused (401/403). At least
    MIN_PROBES are sent, however slow the server is."""
    import httpx

    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=site.url, timeout=60) as client:
        for i in range(max(max_requests, MIN_PROBES)):
            if time.monotonic() >= deadline and i >= MIN_PROBES:
                break
            path = site.path(TARGETS[i % len(TARGETS)], rng)
            headers = {} if i % 2 == 0 else {"Authorization": "Bearer not-a-token"}
            try:
                resp = await client.get(path, headers=headers)
            except httpx.HTTPError as exc:
                result.errors.append(f"unauthenticated {path}: {type(exc).__name__}")
                continue
            result.unauthenticated_sent += 1
            if resp.status_code not in (401, 403):
                result.unauthenticated_served.append(f"{path}: HTTP {resp.status_code}")
            await asyncio.sleep(0.2)


async def _run(
    site: Site,
    user: str,
    password: str,
    viewers: int,
    seconds: float,
    max_requests: int,
    think_s: tuple[float, float],
    browser_cache: bool,
) -> LoadResult:
    import httpx

    result = LoadResult(viewers, seconds)
    async with httpx.AsyncClient(base_url=site.url, timeout=120) as client:
        tokens = [await _token(client, user, password) for _ in range(viewers)]
        # A server that has been up: each page once before the clock starts (imports, the S3
        # client, the templates), not measured.
        rng = random.Random(0)
        auth = {"Authorization": f"Bearer {tokens[0]}"}
        for target in TARGETS:
            await client.get(site.path(target, rng), headers=auth)
        # The api-server's workers each keep their own caches, and the requests above reach only
        # some of them: ask for the ladder list WARM_CONCURRENCY at a time until a whole round
        # answers fast (every worker has read the ladders' indexes once), at most WARM_MAX_S.
        warm_until = time.monotonic() + WARM_MAX_S
        while time.monotonic() < warm_until:
            t0 = time.perf_counter()
            await asyncio.gather(
                *(client.get(site.path("ladder list", rng), headers=auth) for _ in range(WARM_CONCURRENCY))
            )
            if time.perf_counter() - t0 < WARM_ROUND_S:
                break
        result.warm_s = time.monotonic() - (warm_until - WARM_MAX_S)
    deadline = time.monotonic() + seconds
    result.started = time.perf_counter()
    tasks = [
        _viewer(site, tokens[i], result, deadline, max_requests, 1000 + i, think_s, browser_cache)
        for i in range(viewers)
    ]
    tasks.append(_prober(site, result, deadline, max_requests, 7))
    await asyncio.gather(*tasks)
    return result


def drive(
    site: Site,
    user: str,
    password: str,
    viewers: int = 20,
    seconds: float = 60.0,
    max_requests: int = 500,
    think_s: tuple[float, float] = (0.5, 1.5),
    browser_cache: bool = True,
) -> LoadResult:
    """Run the viewers and the prober; the result with the generator's own CPU seconds."""
    _loopback(site.url)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = asyncio.run(_run(site, user, password, viewers, seconds, max_requests, think_s, browser_cache))
    result.cpu_s, result.wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    return result
