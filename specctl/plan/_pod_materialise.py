"""Run in a pod by the `materialise` init container, with the image's Python: lay out the release
directory the server's argv names (the drafter overlay and the plan's files), as a deploy does in
`releases/<run-id>/` on a host.

Never imported by specctl: `render --platform k8s` ships this file in the ConfigMap (see plan/k8s.py)
and passes one JSON argument. Self-contained: the standard library, and huggingface_hub (installed
wherever the engine is) to find a Hub drafter's snapshot, which the `stage` init container has
already put in the cache, so nothing is fetched here.

    {"overlay": {"directory": where the overlay goes, "source": Hub repo id or absolute path,
                 "revision": commit or null, "links": [file names], "config": the overlay's
                 config.json in the ConfigMap} or null,
     "files": {path in the release: path in the ConfigMap}}

Every step replaces what an earlier run of the same pod left, so a restarted init container ends
in the same state.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any, NoReturn


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"materialise: {message}\n")
    sys.exit(1)


def snapshot(source: str, revision: str | None) -> str:
    """The drafter's directory: a path as given, a Hub repo as its snapshot in the local cache."""
    if source.startswith("/"):
        return source
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(source, revision=revision, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure means the same thing here
        fail(
            f"{source}@{revision} is not in the cache ({type(exc).__name__}: {exc}); "
            "the stage init container puts it there"
        )
    return str(path)


def replace_file(source: str, destination: str) -> None:
    """Copy through a temporary name, so a reader never sees half a file."""
    os.makedirs(os.path.dirname(destination), exist_ok=True)
    partial = destination + ".partial"
    shutil.copyfile(source, partial)
    os.replace(partial, destination)


def link_overlay(overlay: dict[str, Any]) -> int:
    source = snapshot(overlay["source"], overlay.get("revision"))
    directory = overlay["directory"]
    for name in overlay["links"]:
        target = os.path.join(source, name)
        if not os.path.exists(target):
            fail(f"the drafter has no {name} in {source}")
        link = os.path.join(directory, name)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)
    replace_file(overlay["config"], os.path.join(directory, "config.json"))
    return len(overlay["links"])


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    linked = link_overlay(spec["overlay"]) if spec.get("overlay") else 0
    for destination, source in sorted(spec.get("files", {}).items()):
        replace_file(source, destination)
    print(
        json.dumps({"event": "materialised", "linked": linked, "files": sorted(spec.get("files", {}))}, sort_keys=True)
    )


if __name__ == "__main__":
    main(sys.argv)
