"""What a command that acts on hosts carries: the context (ledger, SSH options, secrets, signals,
progress) and one session per host (its connection, state directory, lock and the release
documents it has read), so a step's signature is `(session)` and not eleven parameters."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from specctl.cancel import NEVER, CancelToken
from specctl.constants import STAGE_PARALLEL, STARTUP_BUDGET_S
from specctl.errors import HostError
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Transport
from specctl.ledger.ledger import Ledger
from specctl.release import lock, whole
from specctl.release import release as rel
from specctl.release.documents import ReleaseDocs, read_release
from specctl.release.platform import Platform, platform_of, server_url


@dataclass
class Context:
    """What every command that acts on hosts needs: where to record, how to reach hosts, what to say."""

    ledger: Ledger
    command: str
    reason: str | None = None
    ssh_config: str | None = None
    accept_new_host_key: bool = False
    secrets_env: dict[str, str] = field(default_factory=dict)
    # the operator's environment, read only for names a stored release's `secrets:` lists (a rollback
    # learns them from the release's own profile on the host, after the command line was read)
    environ: Mapping[str, str] = field(default_factory=dict)
    budget_s: float = STARTUP_BUDGET_S
    cancel: CancelToken = NEVER
    on_progress: Callable[[str, str], None] = lambda host, text: None  # what a host is doing now: passes
    on_note: Callable[[str, str], None] = lambda host, text: None  # what must be said once and stay said
    on_event: Callable[[str, dict[str, Any]], None] = lambda host, event: None  # structured progress
    stage_slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(STAGE_PARALLEL))
    offline: bool = False  # staging asks no Hub: what a host's cache holds is staged, content unverified

    # what this command has seen of its hosts' identities (release/lock.py: what two names share is said)
    seen: lock.Seen = field(default_factory=lock.Seen)
    _sessions: dict[tuple[str, str], HostSession] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def take_secrets(self, names: Iterable[str]) -> None:
        """Add the named secrets that `environ` sets to `secrets_env`, what servers start with (a name
        it does not set stays out: `prove` refuses the release, naming it)."""
        with self._guard:
            self.secrets_env.update({n: self.environ[n] for n in names if n in self.environ})

    def session(self, host: HostSpec, profile: str) -> HostSession:
        """One session per host and profile for the whole command: one connection per host (a
        baseline or a rollback inside a deploy uses the deploy's session, lock and documents)."""
        with self._guard:
            key = (host.name, profile)
            if key not in self._sessions:
                self._sessions[key] = HostSession(self, host, profile)
            return self._sessions[key]


@dataclass
class HostSession:
    """One host as one profile's flows see it; used by one thread at a time."""

    ctx: Context
    spec: HostSpec
    profile: str
    _transport: Transport | None = None
    _platform: Platform | None = None
    _root: str | None = None
    _lock_depth: int = 0
    _docs: dict[str, ReleaseDocs] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = self.spec.transport(
                ssh_config=self.ctx.ssh_config, accept_new_host_key=self.ctx.accept_new_host_key
            )
        return self._transport

    @property
    def platform(self) -> Platform:
        """What runs the profile's servers here: processes on the host, or a cluster's scheduler."""
        if self._platform is None:
            self._platform = platform_of(self.spec, self.transport)
        return self._platform

    def server_url(self, release: rel.Release, port: int) -> str:
        """The base URL of the release's server, as this machine reaches it."""
        return server_url(self.platform, release, port)

    @property
    def root(self) -> str:
        if self._root is None:
            self._root = rel.host_root(self.transport, self.spec.root, self.spec.name)
        return self._root

    @property
    def base(self) -> str:
        return f"{self.root}/{self.profile}"

    def release(self, run_id: str, profile: str | None = None) -> rel.Release:
        return rel.Release(self.transport, self.root, profile or self.profile, run_id)

    def current(self) -> str | None:
        return rel.linked(self.transport, self.root, self.profile)

    def docs(self, run_id: str) -> ReleaseDocs:
        """A release's documents, read once per command."""
        if run_id not in self._docs:
            self._docs[run_id] = read_release(self.release(run_id))
        return self._docs[run_id]

    def progress(self, text: str) -> None:
        """What the host is doing now, replaced by the next (a request counter, a readiness phase)."""
        self.ctx.on_progress(self.name, text)

    def note(self, text: str) -> None:
        """Something a person must read even after the command ends (a lock taken over, a restore)."""
        self.ctx.on_note(self.name, text)

    def stage(self, name: str) -> None:
        """A stage of the host's work began (the steps of a change are stages of their own)."""
        self.ctx.on_event(self.name, {"event": "step", "step": name, "state": "began"})

    def hold(self, run_id: str) -> None:
        """Take the profile's host lock, or share the hold of an outer flow (a rollback inside a
        deploy, a baseline inside a verify); every hold ends with one `let_go`."""
        if self._lock_depth == 0:
            taken = lock.take(
                self.transport,
                self.base,
                lock.owner(run_id, self.ctx.command, self.name),
                own_root=self.platform.machine_root,
                seen=self.ctx.seen,
            )
            for text in lock.said(taken):
                self.note(text)
        self._lock_depth += 1

    @property
    def holding(self) -> bool:
        return self._lock_depth > 0

    def let_go(
        self, last_write: tuple[str, bytes] | None = None, *, on_failure: Callable[[HostError], None] | None = None
    ) -> None:
        """End a hold; the outermost one releases the lock. `last_write` (path, bytes) is written
        either way, in the release's round trip when there is one (a run's copy is written under
        the lock, and costs no round trip of its own). `on_failure`: who says a failure, instead of
        a line of progress (the recorder, for a run's copy)."""
        self._lock_depth -= 1
        releasing = self._lock_depth == 0
        try:
            if releasing:
                lock.release(self.transport, self.base, last_write=last_write)
            elif last_write is not None:
                whole.put(self.transport, *last_write)
        except HostError as exc:  # the host is gone: its lock stays, and `unlock` will see our process gone
            if on_failure is not None:
                on_failure(exc)
                return
            undone = ([f"write {last_write[0]}"] if last_write else []) + (["release the lock"] if releasing else [])
            self.progress(f"could not {' and '.join(undone)}: {error_text(exc)}")

    @contextmanager
    def locked(self, run_id: str) -> Iterator[None]:
        """Hold the lock for the block."""
        self.hold(run_id)
        try:
            yield
        finally:
            self.let_go()


def error_text(exc: BaseException) -> str:
    """An exception as one line for people and the ledger."""
    return str(getattr(exc, "message", None) or exc or type(exc).__name__)
