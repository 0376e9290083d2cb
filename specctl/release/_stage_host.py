"""Run on a host by the engine's Python: make checkpoints present in the host's Hugging Face cache.

Self-contained (the standard library and huggingface_hub, which is installed wherever sglang is):
specctl sends it as `python -c`, with one JSON argument, and reads JSON lines back.

    {"mode": "check" | "plan" | "fetch", "root": specctl's state directory on the host,
     "patterns": [...], "checkpoints": [{"repo": ..., "revision": ...}], "reserve": bytes}

check: what is staged already, from the host's disk alone (one round trip, no network).
plan:  check, then what each missing checkpoint would fetch (the Hub's file sizes) against the free
       space of the cache's file system; nothing is downloaded.
fetch: plan, refuse when the disk is short, then download (huggingface_hub resumes a file that an
       earlier attempt left incomplete), printing progress every second.

A checkpoint is staged when every file it needs is in its snapshot at the size the Hub gave and
with the content the Hub publishes (the LFS sha256 of a weight file, the git blob id of a small
one), hashed here, on the host; a record of that list and those ids is kept under specctl's state
directory, not in the cache, whose layout belongs to huggingface_hub. Hashes are cached by (path,
size, mtime), so a re-deploy reads no weights; a file whose content differs (a shard corrupted in
place) is fetched again, and one that differs after that is refused.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
from typing import Any, NoReturn

COMMIT = re.compile(r"^[0-9a-f]{40}$")


_EMITTING = threading.Lock()  # the progress thread and the main one: whole lines, never interleaved


def emit(**fields: Any) -> None:
    with _EMITTING:
        sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
        sys.stdout.flush()


def fail(kind: str, message: str, code: int = 3, **fields: Any) -> NoReturn:
    emit(event="error", kind=kind, message=message, **fields)
    sys.exit(code)


def kind_of(exc: BaseException) -> str:
    """What went wrong, by huggingface_hub's error classes (read by name: no import needed to test)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    for name, kind in (
        ("GatedRepoError", "gated"),
        ("RevisionNotFoundError", "revision"),
        ("RepositoryNotFoundError", "repo"),
        ("LocalEntryNotFoundError", "network"),
        ("EntryNotFoundError", "incomplete"),
    ):
        if name in names:
            return kind
    return "network"


MESSAGES = {
    "gated": "{repo} is gated and the Hub refused this host's token (or it had none)",
    "revision": "{repo} has no revision {revision}",
    "repo": "{repo} is not on the Hub (or is private and this host's token cannot see it)",
}


def write_whole(path: str, text: str) -> None:
    """Write a file through a temporary sibling and a rename: a reader sees the old text or the new."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        from huggingface_hub import constants
    except ImportError:
        fail("no-hub", "huggingface_hub cannot be imported by " + sys.executable)
    cache = os.path.abspath(constants.HF_HUB_CACHE)
    records = os.path.join(spec["root"], "staged", hashlib.sha256(cache.encode()).hexdigest()[:16])

    def repo_dir(repo: str) -> str:
        return os.path.join(cache, "models--" + repo.replace("/", "--"))

    def record_path(repo: str, commit: str) -> str:
        return os.path.join(records, repo.replace("/", "--") + "@" + commit + ".json")

    def commit_of(repo: str, revision: str | None) -> str | None:
        revision = revision or "main"
        if COMMIT.match(revision):
            return revision
        try:
            with open(os.path.join(repo_dir(repo), "refs", revision)) as handle:
                return handle.read().strip()
        except OSError:
            return None

    def pin(repo: str, revision: str | None, commit: str) -> None:
        """Point the cache's ref for a branch or tag (none given: main) at the commit just staged, as
        `hf download` does: the engine, started offline, resolves the name through it. A download by
        commit id writes no ref, and an unpinned profile then could not start without the Hub."""
        revision = revision or "main"
        if COMMIT.match(revision):
            return
        write_whole(os.path.join(repo_dir(repo), "refs", revision), commit)

    hashes_path = os.path.join(records, "hashes.json")
    try:
        with open(hashes_path) as handle:
            hashes: dict[str, list[Any]] = json.load(handle)
    except (OSError, ValueError):
        hashes = {}

    def content_id(path: str, kind: str) -> str:
        """The file's id of `kind` ("sha256", or "git": the blob id), from the cache while its size and
        mtime are the ones hashed."""
        real = os.path.realpath(path)
        st = os.stat(real)
        hit = hashes.get(real)
        known: dict[str, str] = hit[2] if hit and hit[:2] == [st.st_size, st.st_mtime_ns] else {}
        if kind not in known:
            digest = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % st.st_size)
            with open(real, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            known = {**known, kind: digest.hexdigest()}
            hashes[real] = [st.st_size, st.st_mtime_ns, known]
        return known[kind]

    def save_hashes() -> None:
        write_whole(hashes_path, json.dumps(hashes, sort_keys=True))

    def differing(snapshot: str, ids: dict[str, str]) -> list[str]:
        """The files whose content is not the id the Hub published ("kind:hex")."""
        out = []
        for name, expected in ids.items():
            kind, _, want = expected.partition(":")
            try:
                if content_id(os.path.join(snapshot, name), kind) == want:
                    continue
            except OSError:
                pass
            out.append(name)
        return out

    def missing_in(snapshot: str, files: dict[str, int | None]) -> dict[str, int | None]:
        """The files not in the snapshot at their size."""
        out = {}
        for name, size in files.items():
            try:
                if size is not None and os.path.getsize(os.path.join(snapshot, name)) == size:
                    continue
            except OSError:
                pass
            out[name] = size
        return out

    def staged(repo: str, revision: str | None) -> dict[str, Any] | None:
        commit = commit_of(repo, revision)
        if commit is None:
            return None
        try:
            with open(record_path(repo, commit)) as handle:
                record = json.load(handle)
            files: dict[str, int] = record["files"]
            ids: dict[str, str] = record.get("ids", {})
        except (OSError, ValueError, KeyError):
            return None
        snapshot = os.path.join(repo_dir(repo), "snapshots", commit)
        if missing_in(snapshot, dict(files)) or differing(snapshot, ids):  # a record without ids: by size
            return None
        return {"repo": repo, "commit": commit, "snapshot": snapshot, "bytes": sum(files.values()), "files": len(files)}

    todo: list[dict[str, Any]] = []
    for item in spec["checkpoints"]:
        done = staged(item["repo"], item.get("revision"))
        if done is not None:
            emit(event="staged", fetched=0, **done)
        else:
            todo.append(item)
    try:
        save_hashes()  # what was hashed to tell, for the next look
    except OSError:
        pass
    if not todo or spec["mode"] == "check":
        for item in todo:
            emit(event="missing", repo=item["repo"], revision=item.get("revision"))
        return

    from huggingface_hub import HfApi, snapshot_download

    api = HfApi()
    plans: list[tuple[str, str, dict[str, int | None], str, int]] = []
    published: dict[str, dict[str, str]] = {}  # repo -> file -> "sha256:<hex>" (LFS) or "git:<blob id>"
    for item in todo:
        repo, revision = item["repo"], item.get("revision")
        try:
            info = api.model_info(repo, revision=revision, files_metadata=True)
        except Exception as exc:  # noqa: BLE001 - reported by kind
            kind = kind_of(exc)
            fail(
                kind,
                MESSAGES.get(kind, "{repo}: cannot ask the Hub: {error}").format(
                    repo=repo, revision=revision, error=f"{type(exc).__name__}: {exc}"
                ),
                repo=repo,
            )
        files: dict[str, int | None] = {
            s.rfilename: s.size
            for s in info.siblings or ()
            if any(fnmatch.fnmatch(s.rfilename, p) for p in spec["patterns"])
        }
        commit = str(info.sha)
        published[repo] = {
            s.rfilename: f"sha256:{s.lfs.sha256}" if s.lfs else f"git:{s.blob_id}"
            for s in info.siblings or ()
            if s.rfilename in files and (s.lfs or s.blob_id)
        }
        snapshot = os.path.join(repo_dir(repo), "snapshots", commit)
        missing = missing_in(snapshot, files)
        need = sum(size or 0 for size in missing.values())
        plans.append((repo, commit, files, snapshot, need))
        emit(
            event="plan",
            repo=repo,
            commit=commit,
            snapshot=snapshot,
            bytes=sum(s or 0 for s in files.values()),
            fetch=need,
            files=len(files),
            fetch_files=len(missing),
        )
    probe = cache
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    free = shutil.disk_usage(probe).free
    need = sum(p[4] for p in plans)
    emit(event="disk", cache=cache, free=free, need=need, reserve=spec["reserve"])
    if spec["mode"] == "fetch" and need + spec["reserve"] > free:
        fail(
            "disk",
            f"{cache} has {free} bytes free; staging needs {need} plus a reserve of {spec['reserve']}",
            code=4,
            free=free,
            need=need,
        )
    if spec["mode"] == "plan":
        return

    revisions = {item["repo"]: item.get("revision") for item in todo}
    for repo, commit, files, snapshot, need in plans:
        total = sum(size or 0 for size in files.values())
        stop = threading.Event()

        def report(
            repo: str = repo,
            snapshot: str = snapshot,
            files: dict[str, int | None] = files,
            total: int = total,
            stop: threading.Event = stop,
        ) -> None:
            blobs = os.path.join(repo_dir(repo), "blobs")
            while not stop.wait(1.0):
                done = 0
                for name in files:
                    try:
                        done += os.path.getsize(os.path.join(snapshot, name))
                    except OSError:
                        pass
                for partial in glob.glob(os.path.join(blobs, "*.incomplete")):
                    try:
                        done += os.path.getsize(partial)
                    except OSError:
                        pass
                emit(event="progress", repo=repo, done=min(done, total), total=total, t=time.time())

        watcher = threading.Thread(target=report, daemon=True)
        watcher.start()
        try:
            snapshot_download(repo, revision=commit, allow_patterns=list(files), max_workers=4)
        except Exception as exc:  # noqa: BLE001 - the files done stay done: the next stage fetches the rest
            kind = kind_of(exc)
            fail(
                kind,
                MESSAGES.get(kind, "{repo}: the download stopped: {error}").format(
                    repo=repo, revision=commit, error=f"{type(exc).__name__}: {exc}"
                ),
                repo=repo,
            )
        finally:
            stop.set()
            watcher.join()  # its last progress line comes before the outcome's
        left = missing_in(snapshot, files)
        if left:
            fail(
                "incomplete",
                f"{repo}: {len(left)} file(s) are not in the snapshot after the download, e.g. {sorted(left)[0]}",
                repo=repo,
            )
        ids = published.get(repo, {})
        refetched = differing(snapshot, ids)
        if refetched:  # in the cache at the right size, but not the bytes the Hub publishes: once more
            for name in refetched:
                link = os.path.join(snapshot, name)
                for path in {os.path.realpath(link), link}:
                    try:
                        os.remove(path)
                    except OSError:
                        pass
            emit(event="refetch", repo=repo, files=refetched)
            try:
                snapshot_download(repo, revision=commit, allow_patterns=refetched, max_workers=4)
            except Exception as exc:  # noqa: BLE001 - reported by kind
                fail(
                    kind_of(exc),
                    f"{repo}: fetching {refetched[0]} again failed: {type(exc).__name__}: {exc}",
                    repo=repo,
                )
            still = differing(snapshot, {name: ids[name] for name in refetched})
            if still:
                save_hashes()
                fail(
                    "corrupt",
                    f"{repo}: {still[0]} does not have the content the Hub publishes ({ids[still[0]]}), "
                    "even fetched again",
                    repo=repo,
                )
        save_hashes()
        write_whole(
            record_path(repo, commit),
            json.dumps({"repo": repo, "commit": commit, "files": files, "ids": ids}, sort_keys=True),
        )
        pin(repo, revisions.get(repo), commit)
        emit(
            event="staged",
            repo=repo,
            commit=commit,
            snapshot=snapshot,
            bytes=total,
            files=len(files),
            fetched=need,
            refetched=refetched,
        )


if __name__ == "__main__":
    main()
