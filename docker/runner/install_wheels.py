"""Install pure-Python wheels into this interpreter's site-packages without pip (the test stand-in
base has none): unpack the archive, write a launcher for each console script in
entry_points.txt. Standard library only. Usage: python3 install_wheels.py WHEEL..."""

from __future__ import annotations

import configparser
import os
import site
import sys
import sysconfig
import zipfile
from pathlib import Path


def install(wheel: Path, target: Path, bindir: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        if any(n.endswith(".so") or ".data/" in n for n in names):
            raise SystemExit(f"install_wheels: {wheel.name}: not a pure-Python wheel; install it with pip")
        zf.extractall(target)
        info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    scripts = []
    entry_points = target / info / "entry_points.txt"
    if entry_points.exists():
        parser = configparser.ConfigParser()
        parser.read(entry_points)
        for name, ref in parser.items("console_scripts") if parser.has_section("console_scripts") else []:
            module, _, func = ref.partition(":")
            path = bindir / name
            path.write_text(
                f"#!{sys.executable}\nimport sys\n"
                f"from {module.strip()} import {func.strip()}\nsys.exit({func.strip()}())\n"
            )
            os.chmod(path, 0o755)  # noqa: S103 - a console script must be executable by all
            scripts.append(name)
    return scripts


def main(argv: list[str]) -> int:
    target = Path((site.getsitepackages() or [sysconfig.get_paths()["purelib"]])[0])
    target.mkdir(parents=True, exist_ok=True)
    bindir = Path("/usr/local/bin")
    for arg in argv:
        scripts = install(Path(arg), target, bindir)
        print(
            f"install_wheels: {Path(arg).name} -> {target}" + (f" (scripts: {', '.join(scripts)})" if scripts else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
