"""A full disk under the rung's workspace, said in one line that names the disk (issue 19)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

# Below this much free space a failing rung is blamed on the disk, not on its workload.
NEARLY_FULL_BYTES = 1 << 20


def mount_point(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def disk_full(root: Path, write_errors: list[OSError]) -> str | None:
    """One line when the workspace's disk ran out (a write failed with ENOSPC/EDQUOT, or under
    1 MiB is left); None otherwise."""
    full = any(e.errno in (errno.ENOSPC, errno.EDQUOT) for e in write_errors)
    try:
        st = os.statvfs(root)
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    except OSError:
        return "disk full: the rung's workspace {root} is unreadable" if full else None
    if not full and free >= NEARLY_FULL_BYTES:
        return None
    return (
        f"disk full: {mount_point(root)} (the rung's workspace {root}) has {free} of {total} bytes free; "
        "the log up to that point is kept"
    )
