"""Docker rungs keep their spool on the host (issue 19): the mount RungDockerOperator adds."""

from __future__ import annotations

import pytest

from traceladder.airflow.operators.docker import SPOOL_IN_VOLUME, SPOOL_VOLUME, spool_mount


def test_the_workers_spool_dir_is_bind_mounted_at_the_same_path() -> None:
    mount, path = spool_mount({"TRACELADDER_SPOOL_DIR": "/srv/traceladder/spool"})
    assert path == "/srv/traceladder/spool"
    assert (mount["Type"], mount["Source"], mount["Target"]) == ("bind", path, path)


def test_without_it_a_named_volume_of_the_daemon_holds_the_spool() -> None:
    mount, path = spool_mount({})
    assert (mount["Type"], mount["Source"], mount["Target"]) == ("volume", SPOOL_VOLUME, SPOOL_IN_VOLUME)
    assert path == SPOOL_IN_VOLUME


def test_a_relative_spool_dir_is_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match=r"^TRACELADDER_SPOOL_DIR: 'spool' is not an absolute path"):
        spool_mount({"TRACELADDER_SPOOL_DIR": "spool"})
