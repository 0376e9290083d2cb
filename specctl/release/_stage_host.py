"""Run on a host by the engine's Python: make checkpoints present in the host's Hugging Face cache.

Self-contained (the standard library and huggingface_hub, which is installed wherever sglang is):
specctl sends it as `python -c`, with one JSON argument, and reads JSON lines back.

    {"mode": "check" | "plan" | "fetch", "root": specctl's state directory on the host,
     "patterns": [...], "checkpoints": [{"repo": ..., "revision": ...}], "reserve": bytes,
     "offline": the Hub is not asked, "verify": every file hashed again (the hash cache ignored)}

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

Without the Hub (`offline`, or the Hub not answering this host) a snapshot that reached the cache
by other means (`hf download`, a copy from a shared model store, in the standard layout: blobs/,
snapshots/<commit>/, refs/) is recognised from the disk alone: complete when its config.json, its
index and every shard the index names are there, each shard at the size its safetensors header
implies (8 + header length + the end of the last tensor's data). It is staged "content
unverified", with the ids its blob names claim, until a stage that reaches the Hub checks it.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from typing import Any, NoReturn

COMMIT = re.compile(r"^[0-9a-f]{40}$")
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
HUB_TIMEOUT_S = 30.0  # an unanswered Hub (packets dropped on the way) is told apart from a slow one
# exception classes (by name, in requests, httpx and huggingface_hub) that mean the Hub was not reached
UNREACHED = {"ConnectionError", "ConnectError", "ConnectTimeout", "Timeout", "TimeoutException", "NetworkError"}


HEARTBEAT_S = 1.0  # a line at least this often: a write is how a dead reader is noticed

_EMITTING = threading.Lock()  # the progress thread and the main one: whole lines, never interleaved
_last_write = [time.monotonic()]


def emit(**fields: Any) -> None:
    with _EMITTING:
        try:
            sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
            sys.stdout.flush()
        except OSError:  # EPIPE (Python ignores SIGPIPE): nobody reads what this stage says any more
            end_group()
        _last_write[0] = time.monotonic()


def end_group() -> NoReturn:
    """specctl is gone: end this stage and whatever it started, at once (a download nobody waits for
    only fills the disk). The whole process group when this process leads one of its own, else itself."""
    try:
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(137)  # not reached


def tie_to_reader(*, own_group: bool) -> None:
    """Dies with specctl. A fetch runs in a process group of its own and, from a thread, every stage
    writes a line whenever it has said nothing for HEARTBEAT_S: once whoever reads its output is gone
    (specctl SIGKILLed: locally the pipe's only reader; over SSH the connection, whose channel sshd
    then closes), that write fails and the group ends. A SIGKILL leaves specctl no chance to say so.
    A check or plan (bounded, short) stays in its caller's group, where the host shell's `timeout`
    stops it (hosts/shell.py: that `timeout` signals its own process group)."""
    try:
        if own_group and os.getpgrp() != os.getpid():  # a session leader (sshd's child) leads one already
            os.setpgid(0, 0)
    except OSError:
        pass  # not allowed here: `end_group` then ends this process alone

    def beat() -> None:
        while True:
            time.sleep(HEARTBEAT_S / 2)
            if time.monotonic() - _last_write[0] >= HEARTBEAT_S:
                emit(event="alive")

    threading.Thread(target=beat, daemon=True).start()


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


def unreached(exc: BaseException) -> bool:
    """Whether the Hub was not reached at all (no route, no name, no answer), as opposed to answering "no"."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "HfHubHTTPError" not in names and bool(names & UNREACHED)


def implied_size(path: str) -> int:
    """The size a safetensors file must have: its 8-byte header length, the header, and the data up
    to the end of its last tensor."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
    ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    return 8 + length + max(ends, default=0)


def claimed_id(path: str) -> str | None:
    """The id the cache's layout claims for a file: its blob's name (an LFS sha256, or a git blob id)."""
    name = os.path.basename(os.path.realpath(path))
    return f"sha256:{name}" if re.match(r"^[0-9a-f]{64}$", name) else f"git:{name}" if COMMIT.match(name) else None


class OfflineError(Exception):
    """The Hub is not to be asked."""


def main() -> None:
    spec = json.loads(sys.argv[1])
    tie_to_reader(own_group=spec["mode"] == "fetch")
    offline, verify = bool(spec.get("offline")), bool(spec.get("verify"))
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

    hashed = [0]  # bytes read to hash, for the checkpoint being staged

    def content_id(path: str, kind: str) -> str:
        """The file's id of `kind` ("sha256", or "git": the blob id), from the cache while its size and
        mtime are the ones hashed."""
        real = os.path.realpath(path)
        st = os.stat(real)
        hit = None if verify else hashes.get(real)  # --verify: every byte read again
        known: dict[str, str] = hit[2] if hit and hit[:2] == [st.st_size, st.st_mtime_ns] else {}
        if kind not in known:
            digest = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % st.st_size)
            with open(real, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            known = {**known, kind: digest.hexdigest()}
            hashes[real] = [st.st_size, st.st_mtime_ns, known]
            hashed[0] += st.st_size
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
        unverified = record.get("unverified")  # why its content is not checked yet (recognised without the Hub)
        if verify or (unverified and not offline):  # the Hub is to be asked: it goes the whole way
            return None
        snapshot = os.path.join(repo_dir(repo), "snapshots", commit)
        if missing_in(snapshot, dict(files)) or (not unverified and differing(snapshot, ids)):
            return None  # (a record without ids, or an unverified one: by size)
        return described(repo, commit, snapshot, files, ids, unverified)

    def described(
        repo: str, commit: str, snapshot: str, files: dict[str, Any], ids: dict[str, str], unverified: str | None
    ) -> dict[str, Any]:
        """A staged checkpoint as the events and the release's checkpoints.json say it: every file's
        size and content id, and whether that id was checked against the Hub's."""
        return {
            "repo": repo,
            "commit": commit,
            "snapshot": snapshot,
            "bytes": sum(size or 0 for size in files.values()),
            "files": len(files),
            "verified": not unverified,
            "unverified": unverified,
            "contents": {name: [size, ids.get(name)] for name, size in sorted(files.items())},
        }

    def recognised(repo: str, revision: str | None, why: str) -> dict[str, Any]:
        """A snapshot put in the cache by other means, complete by its config, index and shard headers,
        recorded "content unverified" (`why`: the Hub was not asked, or did not answer)."""
        commit = commit_of(repo, revision)
        snapshot = os.path.join(repo_dir(repo), "snapshots", commit or "")
        if commit is None or not os.path.isdir(snapshot):
            where = f"{repo_dir(repo)}/refs/{revision or 'main'}" if commit is None else snapshot
            fail(
                "not-cached",
                f"{repo}@{revision or 'main'} is not in this host's cache ({where} is missing), and {why}",
            )
        index = os.path.join(snapshot, INDEX)
        try:
            with open(index) as handle:
                shards = sorted(set(json.load(handle)["weight_map"].values()))
        except FileNotFoundError:
            shards = [SINGLE]
        except (OSError, ValueError, KeyError) as exc:
            fail("incomplete-cache", f"{repo}@{commit}: {INDEX} in {snapshot} cannot be read ({exc}), and {why}")
        for name in ["config.json", *shards]:
            path = os.path.join(snapshot, name)
            if not os.path.isfile(path):
                fail("incomplete-cache", f"{repo}@{commit}: {name} is missing from {snapshot}, and {why}")
            if name.endswith(".safetensors"):
                try:
                    want = implied_size(path)
                except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
                    fail(
                        "incomplete-cache",
                        f"{repo}@{commit}: {name} has no readable safetensors header ({exc}), and {why}",
                    )
                if os.path.getsize(path) != want:
                    fail(
                        "incomplete-cache",
                        f"{repo}@{commit}: {name} is {os.path.getsize(path)} bytes; its safetensors header "
                        f"implies {want} (truncated or still being copied), and {why}",
                    )
        files: dict[str, int] = {}
        for folder, _, names in os.walk(snapshot):
            for name in names:
                rel = os.path.relpath(os.path.join(folder, name), snapshot)
                if any(fnmatch.fnmatch(rel, p) for p in spec["patterns"]):
                    try:
                        files[rel] = os.path.getsize(os.path.join(folder, name))
                    except OSError:  # a link to a blob that was not copied
                        fail("incomplete-cache", f"{repo}@{commit}: {rel} in {snapshot} has no content, and {why}")
        ids = {name: i for name in files if (i := claimed_id(os.path.join(snapshot, name)))}
        if spec["mode"] == "fetch":  # a dry run writes nothing
            write_whole(
                record_path(repo, commit),
                json.dumps(
                    {"repo": repo, "commit": commit, "files": files, "ids": ids, "unverified": why}, sort_keys=True
                ),
            )
        return described(repo, commit, snapshot, files, ids, why)

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
    hub_down = "the Hub is not asked (--offline)" if offline else None  # once unanswered, not asked again
    for item in todo:
        repo, revision = item["repo"], item.get("revision")
        try:
            if hub_down is not None:
                raise OfflineError(hub_down)
            info = api.model_info(repo, revision=revision, files_metadata=True, timeout=HUB_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - reported by kind
            if not verify and (isinstance(exc, OfflineError) or unreached(exc)):
                hub_down = hub_down or f"the Hub did not answer ({type(exc).__name__})"
                emit(event="staged", fetched=0, **recognised(repo, revision, hub_down))
                continue
            kind = kind_of(exc)
            if verify and unreached(exc):
                fail("network", f"{repo}: --verify needs the Hub's checksums, and the Hub did not answer: {exc}")
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
        hashed[0] = 0
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
            fetched=need,
            refetched=refetched,  # in the cache at their size, with other content: fetched once more
            refetched_bytes=sum(files.get(name) or 0 for name in refetched),
            hashed=hashed[0],
            **described(repo, commit, snapshot, files, ids, None),
        )


if __name__ == "__main__":
    main()
