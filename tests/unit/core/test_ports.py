"""Ports for local services come from below the kernel's ephemeral range (core/ports.py)."""

from __future__ import annotations

import socket

import pytest

from traceladder.core import ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low = int(ports.EPHEMERAL_RANGE_FILE.read_text().split()[0])
    picked = ports.free_ports(20)
    assert len(set(picked)) == 20
    assert all(ports.LOWEST_PORT <= p < low for p in picked)
    assert all(ports.port_free(p) for p in picked)


def test_a_taken_port_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports.free_port()))
        taken = held.getsockname()[1]
        assert not ports.port_free(taken)
        # Only two candidates: the taken one and one more; the pick must be the other.
        candidates = iter([taken] * 5 + [taken + 1])
        monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: next(candidates))
        assert ports.free_ports(1) == [taken + 1]


def test_exclude_is_honoured_and_exhaustion_names_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: 25000)
    with pytest.raises(OSError, match=r"no 1 free TCP ports on 127\.0\.0\.1 in \d+-\d+"):
        ports.free_ports(1, exclude=[25000])
