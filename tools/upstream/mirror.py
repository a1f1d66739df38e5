"""Reading the bare git mirrors, what could not be read, and the helpers that build a table row."""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
import sys

from .pins import Pin


# ---------------------------------------------------------------------------------------------
# Reading the mirrors
# ---------------------------------------------------------------------------------------------
Row = tuple[str, str, str, str, str, str, str]


class Problems:
    """What could not be read (rows left out) and rules that no longer hold."""

    def __init__(self) -> None:
        self.left_out: list[str] = []
        self.fatal: list[str] = []


PROBLEMS = Problems()


class Mirror:
    def __init__(self, pin: Pin) -> None:
        self.pin = pin
        value = os.environ.get(pin.env)
        if not value:
            print(f"upstream_facts: error: set {pin.env} to a bare git mirror of {pin.repo}", file=sys.stderr)
            raise SystemExit(2)
        self.dir = value
        self._cache: dict[tuple[str, str], str | None] = {}

    def _git(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", "-C", self.dir, *args], capture_output=True, check=False)

    def read(self, path: str, commit: str | None = None) -> str | None:
        commit = commit or self.pin.commit
        key = (commit, path)
        if key not in self._cache:
            proc = self._git("cat-file", "blob", f"{commit}:{path}")
            if proc.returncode != 0:
                PROBLEMS.left_out.append(f"{self.pin.repo}@{commit[:8]}:{path}: cannot be read ({_first(proc)})")
                self._cache[key] = None
            else:
                self._cache[key] = proc.stdout.decode("utf-8", errors="replace")
        return self._cache[key]

    def tag_commit(self, tag: str) -> str | None:
        proc = self._git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def has_commit(self, commit: str) -> bool:
        return self._git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0

    def ls(self, folder: str, commit: str | None = None) -> list[str]:
        proc = self._git("ls-tree", "--name-only", commit or self.pin.commit, "--", folder.rstrip("/") + "/")
        if proc.returncode != 0:
            PROBLEMS.left_out.append(f"{self.pin.repo}:{folder}: cannot be listed ({_first(proc)})")
            return []
        return sorted(posixpath.basename(p) for p in proc.stdout.decode().splitlines())

    def gitlink(self, commit: str, path: str) -> str | None:
        proc = self._git("ls-tree", commit, "--", path)
        parts = proc.stdout.decode().split()
        return parts[2] if proc.returncode == 0 and len(parts) >= 3 and parts[1] == "commit" else None


def _first(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = proc.stderr.decode(errors="replace").strip().splitlines()
    return lines[0] if lines else f"git exit {proc.returncode}"


def one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text.strip())


def clip(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def row(kind: str, name: str, pin: Pin, path: str, ref: str, default: str, detail: str) -> Row:
    return (kind, name, pin.repo, path, ref, one_line(default), one_line(detail))
