#!/usr/bin/env python3
"""Installs carried wheels on a machine without a registry, taking only
those it needs (scripts/gpu-suite.sh run, for build/wheels made by
scripts/fetch-gpu-wheels.sh).

    python3 scripts/install-wheels.py WHEEL_DIR TARGET [ROOT ...]

ROOTs (default: dask distributed) are installed from WHEEL_DIR; then each
requirement of what is installed (environment markers evaluated by this
Python, extras left out), in turn: a distribution this Python already has
at a version that satisfies it is used as it is, else its wheel from
WHEEL_DIR is installed too.  Everything goes into TARGET (emptied first)
with ``pip install --no-index --no-deps --target``; put TARGET on the path
after the package under test.  The machine's own packages thus stay in
charge wherever they fit (a carried wheel on the path would otherwise
shadow them: PYTHONPATH comes before site-packages), and nothing that only
another Python version needs (importlib-metadata before 3.12) is installed.

Fails, saying which, when a needed distribution has no wheel in WHEEL_DIR
or its wheel does not satisfy what asks for it.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.version import Version  # type: ignore[no-redef]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_metadata(path: Path) -> tuple[str, str, list[str]]:
    """(name, version, requirement strings) read from a wheel's METADATA."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        msg = email.parser.Parser().parsestr(z.read(meta).decode("utf-8"))
    return msg["Name"], msg["Version"], msg.get_all("Requires-Dist") or []


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    wheel_dir, target = Path(argv[0]), Path(argv[1])
    roots = argv[2:] or ["dask", "distributed"]
    wheels: dict[str, tuple[Path, str, list[str]]] = {}
    for path in sorted(wheel_dir.glob("*.whl")):
        name, version, reqs = wheel_metadata(path)
        if norm(name) in wheels:
            print(f"install-wheels: two wheels of {name} in {wheel_dir}; keep one", file=sys.stderr)
            return 1
        wheels[norm(name)] = (path, version, reqs)

    chosen: dict[str, str] = {}  # name -> why
    kept: dict[str, str] = {}  # name -> the machine's version, used as it is
    root_names = {norm(Requirement(r).name) for r in roots}
    todo = [(Requirement(r), "asked for") for r in roots]
    while todo:
        req, by = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = norm(req.name)
        if key in chosen:
            _, version, _ = wheels[key]
            if not req.specifier.contains(Version(version), prereleases=True):
                print(f"install-wheels: {by} needs {req}, the carried wheel is {version}", file=sys.stderr)
                return 1
            continue
        have = kept.get(key) or installed_version(req.name)
        if have is not None and key not in root_names and req.specifier.contains(Version(have), prereleases=True):
            kept[key] = have
            continue
        if key not in wheels:
            print(
                f"install-wheels: {by} needs {req}; this Python has {have or 'none'} and {wheel_dir} no wheel",
                file=sys.stderr,
            )
            return 1
        path, version, reqs = wheels[key]
        if not req.specifier.contains(Version(version), prereleases=True):
            print(f"install-wheels: {by} needs {req}, the carried wheel is {version}", file=sys.stderr)
            return 1
        chosen[key] = f"{version} (this Python has {have or 'none'})"
        todo += [(Requirement(r), f"{req.name} {version}") for r in reqs]

    shutil.rmtree(target, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--root-user-action=ignore"]
    pip += ["--no-index", "--no-deps", "--no-compile", "--target", str(target)]
    rc = subprocess.call(pip + [str(wheels[k][0]) for k in sorted(chosen)])
    for k in sorted(chosen):
        print(f"install-wheels: installed {k} {chosen[k]}")
    print("install-wheels: this Python's own: " + ", ".join(f"{k} {v}" for k, v in sorted(kept.items())))
    unused = sorted(set(wheels) - set(chosen))
    if unused:
        print("install-wheels: not needed here: " + ", ".join(unused))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
