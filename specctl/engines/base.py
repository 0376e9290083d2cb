"""What the core asks of a serving engine; one implementation per engine lives in engines/<name>/.

No engine name, version test or flag spelling appears outside engines/: the plan and the checks
talk to an Engine through this interface (see ADDING.md for the steps to add one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specctl.verdict.window import Source

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specctl.engines.flags import FlagCatalog


class CaptureOutcome(Protocol):
    """What an engine will really capture for a list of drafter ids (positions in the engine frame)."""

    ids: tuple[int, ...] | None
    requested: tuple[int, ...]
    captured: tuple[int, ...]
    dropped: tuple[tuple[int, str], ...]
    error: str | None


@dataclass(frozen=True)
class Convention:
    """How one engine version maps drafter-config ids to capture positions for one architecture.

    Position p is the residual stream entering decoder layer p: p = canonical layer + 1, and 0 is
    the embedding output.
    """

    engine: str
    version: str
    architecture: str
    source: str  # where the rule came from: the engine's file and method, or "probe"
    supported: bool
    capture: Any  # Callable[[Sequence[int] | None, int], CaptureOutcome]
    ids_for: Any  # Callable[[Sequence[int], int], list[int] | None]
    default_note: str = ""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything an engine needs to build the argv of one node; engine-neutral names."""

    python: str
    model: str
    revision: str | None
    host: str
    port: int
    tp: int
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    drafter: str | None = None  # None: launch without speculation (a baseline)
    drafter_revision: str | None = None
    algorithm: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    engine_version: str | None = None
    adaptive: bool = False  # the engine changes num_steps at run time from the acceptance it sees
    adaptive_config: str | None = None  # a file of tiers for it (a path the launch script expands)
    metrics: bool = False  # serve the engine's Prometheus metrics (what `specctl watch` measures)


@dataclass(frozen=True)
class LaunchArgv:
    """One node's launch argv, and where in it sit the words a scheduler fills in per node: the
    node rank's value and node 0's dist-init address (`host:port`); None where there is none (one node)."""

    words: tuple[str, ...]
    node_rank_at: int | None = None
    dist_init_at: int | None = None

    def replaced(self, start: int, stop: int, words: Sequence[str]) -> LaunchArgv:
        """`words[start:stop]` replaced by `words`, the recorded places moved with what follows."""
        shift = len(words) - (stop - start)

        def moved(at: int | None) -> int | None:
            if at is None or at < start:
                return at
            assert at >= stop, "a recorded place cannot be replaced"
            return at + shift

        return LaunchArgv(
            (*self.words[:start], *words, *self.words[stop:]), moved(self.node_rank_at), moved(self.dist_init_at)
        )


@dataclass(frozen=True)
class SpecRewrite:
    """A speculative parameter the engine would silently change, or refuse."""

    field: str
    given: object
    effective: object
    reason: str
    rejected: bool


@dataclass(frozen=True)
class ProbeDisagreement:
    """An id list for which the host's engine and specctl's table predict different captures."""

    ids: tuple[int, ...] | None
    table: tuple[int, ...] | None
    table_error: str | None
    engine: tuple[int, ...] | None
    engine_error: str | None


@dataclass(frozen=True)
class ParseAnswer:
    """Whether the engine's own argument parser accepts one node's launch flags."""

    argv: tuple[str, ...]
    ok: bool
    error: str | None


@dataclass(frozen=True)
class EngineProblem:
    """Something in a profile or a drafter config this engine version would do otherwise than its author meant."""

    code: str  # a check code: drafter-format, drafter-ids-type
    error: bool  # the drafter cannot serve as meant (else a warning)
    message: str
    fix: str


@dataclass(frozen=True)
class ConfigOverride:
    """A launch flag whose keys replace the same keys of the target's and the drafter's config at load time.

    `decides_ids`: the override replaces the part of the drafter's config the capture ids are read
    from (`ids_key`), so the engine reads the ids from the flag, and a drafter overlay cannot change them.
    """

    flag: str
    values: Mapping[str, Any]
    ids_key: str
    decides_ids: bool = False
    error: str | None = None

    def applied(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return {**config, **self.values}

    @property
    def num_layers(self) -> int | None:
        value = self.values.get("num_hidden_layers")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class HttpContract:
    """What one engine version's HTTP API gives verify (derived from each release's code)."""

    version: str
    chat_meta_info: bool  # /v1/chat/completions returns meta_info (with the speculative counters) when asked
    spec_counters: bool  # meta_info carries spec_verify_ct when speculating
    e2e_latency: bool  # meta_info carries e2e_latency
    server_info_path: str = "/server_info"  # where the server reports its arguments (/get_server_info before it)
    model_info_path: str = "/model_info"


@dataclass(frozen=True)
class ProbeReport:
    """What the engine installed for an interpreter said about itself."""

    python: str
    version: str | None
    convention: Convention | None
    disagreements: tuple[ProbeDisagreement, ...] = ()
    parse: tuple[ParseAnswer, ...] = ()
    error: str | None = None
    seconds: float = 0.0


class Engine(Protocol):
    """The per-engine knowledge specctl needs: conventions, flags, argv, drafter-config ids."""

    name: str

    def versions(self) -> tuple[str, ...]:
        """Engine versions with a capture convention table."""
        ...

    def convention(self, version: str, architecture: str) -> Convention:
        """The capture convention; raises EngineError for an unknown version or architecture."""
        ...

    def versions_expressing(self, architecture: str, positions: Sequence[int], num_layers: int) -> list[str]:
        """Versions under which some drafter ids capture exactly `positions` (for an error's fix)."""
        ...

    def flag_catalog(self, version: str) -> FlagCatalog:
        """The engine's launch-flag catalog for that version; raises EngineError when none is shipped."""
        ...

    def launch_args(self, version: str, args: Mapping[str, Any]) -> list[str]:
        """argv fragments for a profile's `engine.args` (through the version's catalog when there is one)."""
        ...

    def distribution(self) -> str:
        """The Python distribution whose version is the engine version on a host."""
        ...

    def startup_phases(self) -> Sequence[tuple[str, str]]:
        """(log line marker, phase shown to people) pairs, to show start-up progress from the server log."""
        ...

    def reserved_flags(self) -> Mapping[str, str]:
        """Flags specctl renders itself, mapped to the profile field that sets them."""
        ...

    def argv(self, spec: LaunchSpec) -> LaunchArgv:
        """The exact launch argv of one node, with where its node rank and dist-init address sit."""
        ...

    def drafter_ids(self, config: Mapping[str, Any]) -> list[int] | None:
        """The capture ids this engine reads from a drafter config.json (None: its default)."""
        ...

    def drafter_problems(self, version: str, algorithm: str, config: Mapping[str, Any]) -> list[EngineProblem]:
        """Why this engine version would not load or read a drafter config as its author meant: a
        format it cannot load, a class that is not a drafter, ids that are not integers."""
        ...

    def adaptive_problems(
        self,
        version: str,
        algorithm: str,
        eagle_topk: int | None,
        args: Mapping[str, Any],
        tiers: Mapping[str, Any] | None,
    ) -> list[EngineProblem]:
        """Why adaptive speculation, as the profile asks for it, would not run on this version."""
        ...

    def adaptive_tiers(self, version: str) -> dict[str, Any] | None:
        """The version's built-in adaptive tiers (batch size -> settings), None where it has none."""
        ...

    def adaptive_by_batch_size(self, version: str) -> bool:
        """Whether the version's adaptive config file is keyed by batch size (else it holds one set of knobs)."""
        ...

    def with_drafter_ids(self, config: Mapping[str, Any], ids: Sequence[int]) -> dict[str, Any]:
        """A copy of a drafter config.json that makes this engine read `ids`."""
        ...

    def speculative_rewrites(
        self,
        architecture: str,
        algorithm: str,
        num_steps: int | None,
        eagle_topk: int | None,
        num_draft_tokens: int | None,
    ) -> list[SpecRewrite]:
        """Parameters the engine would rewrite (e.g. topk 1 forces draft tokens) or reject."""
        ...

    def probe_script(self) -> Path:
        """A self-contained file the engine's interpreter runs: JSON request on stdin, answer on stdout."""
        ...

    def config_override(self, version: str, args: Mapping[str, Any]) -> ConfigOverride | None:
        """The launch flag among `args` that overrides keys of the checkpoints' configs, parsed; None if none."""
        ...

    def serving_problems(
        self,
        version: str,
        architecture: str,
        algorithm: str,
        args: Mapping[str, Any],
        capture: CaptureOutcome,
        num_layers: int,
        target_config: Mapping[str, Any],
        compute_capability: str | None,
    ) -> list[EngineProblem]:
        """How these launch flags make the server capture otherwise than `capture` (the setter's answer), or refuse."""
        ...

    def pipeline_stages(self, version: str, args: Mapping[str, Any]) -> int:
        """How many pipeline stages `args` ask for (each holds its share of the layers on tp GPUs)."""
        ...

    def http_contract(self, version: str) -> HttpContract:
        """What this version's HTTP API answers verify with."""
        ...

    def watch_source(self, version: str) -> Source | None:
        """Which of this version's Prometheus series carry speculative acceptance, for `watch`
        (None: the engine serves none)."""
        ...

    def chat_ids_command(self, python: str, argv: Sequence[str]) -> list[str]:
        """A host command printing, as JSON, the token ids this engine's chat endpoint would build for
        each message list on its stdin (for versions whose chat endpoint returns no meta_info)."""
        ...

    def build_script(self) -> Path | None:
        """A self-contained file printing which build of the engine an interpreter has (version and a
        digest of the files the probe reads); None when the engine cannot be probed on hosts."""
        ...

    def probe_request(
        self,
        architecture: str | None,
        num_layers: int | None,
        ids: Sequence[Sequence[int] | None],
        needed: Sequence[int] | None,
        argvs: Sequence[Sequence[str]],
    ) -> dict[str, Any]:
        """The probe's request: these ids plus every candidate for `needed`, and the nodes' argv to parse."""
        ...

    def probe_report(
        self, python: str, architecture: str | None, num_layers: int | None, answer: Mapping[str, Any]
    ) -> ProbeReport:
        """Read a probe answer: a convention backed by the engine's own answers, and where the table disagrees."""
        ...

    def pins_installed_version(self) -> bool:
        """Whether the installed distribution's version must equal the profile's engine version."""
        ...

    def prove_script(self) -> Path:
        """A self-contained file a host's engine interpreter runs as `PYTHON -c SOURCE VERSION WORD...`
        before anything stops (a deploy's `prove`): WORD... is a release's launch argv after the
        interpreter, VERSION the version the installed engine must be ("": none pinned). It prints one
        JSON line {"version": installed or null, "check": null or what failed ("engine-import",
        "engine-version", "engine-parse"), "error": the engine's own words}: the engine imports, at
        VERSION, and its own launch parser accepts the flags."""
        ...

    def container_image(self, version: str) -> str | None:
        """The engine's own published container image for a version (None: it publishes none)."""
        ...

    def expected_server_args(self, argv: Sequence[str], release_dir: str, engine_version: str) -> dict[str, str]:
        """What the live server must report (`/server_info`) for the fields drift watches, from a node's argv."""
        ...

    def reported_server_args(self, server_info: Mapping[str, Any]) -> dict[str, str | None]:
        """The same fields as the live server reports them, as strings (None: not reported)."""
        ...
