"""Fetch the sglang release wheels the conformance tier reads, and check them against wheels.lock.

    python scripts/sglang-cpu/wheels.py DIR            # fetch what is missing, verify everything
    python scripts/sglang-cpu/wheels.py DIR --lock     # (re)write wheels.lock from DIR's wheels

wheels.lock names each release's wheel file and its sha256, one "version file sha256" line per
release. A wheel is downloaded with `pip download --no-deps` (only the wheel, none of its
dependencies), written under a temporary name and moved into DIR only once its checksum matches;
a wheel already in DIR whose checksum differs is replaced. Standard library only: the Makefile
runs it before any virtual environment exists.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

LOCK = Path(__file__).resolve().with_name("wheels.lock")
# the interpreter and platform the CPU sglang environment uses (setup.sh); pure wheels match "any"
PLATFORM = [
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
    "--platform",
    "manylinux_2_34_x86_64",
    "--platform",
    "any",
]


def read_lock(path: Path = LOCK) -> dict[str, tuple[str, str]]:
    """version -> (wheel file name, sha256)."""
    entries: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3:
            raise SystemExit(f"{path}:{number}: expected 'version file sha256', got {line!r}")
        entries[parts[0]] = (parts[1], parts[2])
    return entries


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(directory: Path, version: str, name: str, want: str) -> str:
    """Put `name` into `directory` with checksum `want`; what was done, in a few words."""
    target = directory / name
    if target.is_file() and sha256(target) == want:
        return "cached"
    with tempfile.TemporaryDirectory(dir=directory, prefix=".fetch-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            "--disable-pip-version-check",
            *PLATFORM,
            "-d",
            tmp,
            f"sglang=={version}",
        ]
        result = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / name
        if result.returncode != 0 or not got.is_file():
            tail = "\n".join(line for line in result.stderr.splitlines() if "is ignored: it is neither" not in line)
            raise SystemExit(f"cannot download sglang=={version} ({name}): {tail[-800:] or 'pip fetched another file'}")
        if (have := sha256(got)) != want:
            raise SystemExit(
                f"sglang=={version}: {name} has sha256 {have}, wheels.lock says {want}: "
                "the index served other bytes; nothing was kept"
            )
        got.replace(target)
    return "downloaded"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--lock", action="store_true", help="write wheels.lock from the wheels in DIR")
    args = parser.parse_args(argv)
    directory: Path = args.directory
    directory.mkdir(parents=True, exist_ok=True)
    if args.lock:
        versions = read_lock() if LOCK.exists() else {}
        lines = [
            "# sglang release wheels the conformance tier reads: version, file, sha256 (scripts/sglang-cpu/wheels.py)"
        ]
        for version in sorted(versions, key=_version_key):
            [wheel] = sorted(directory.glob(f"sglang-{version}-*.whl"))[:1]
            lines.append(f"{version} {wheel.name} {sha256(wheel)}")
        LOCK.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return 0
    done = [fetch(directory, version, name, want) for version, (name, want) in read_lock().items()]
    print(
        f"sglang wheels: {done.count('downloaded')} downloaded, {done.count('cached')} cached and verified, "
        f"in {directory}"
    )
    return 0


def _version_key(version: str) -> tuple[int, ...]:
    parts = version.replace(".post", ".").split(".")
    return tuple(int(p) for p in parts)


if __name__ == "__main__":
    sys.exit(main())
