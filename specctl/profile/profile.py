"""The Profile: what to serve. Pure, frozen data; where the flow (profile -> plan -> release) begins."""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from specctl.gpus import GPUS
from specctl.profile._invalid import interpreter, invalid, one_line

REVISION_RE = re.compile(r"^[0-9a-f]{40}$")
ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
NAME_RE = r"^[a-z0-9][a-z0-9._-]*$"
MAX_NAME_CHARS = 100  # names become directory names on hosts; far below any filesystem's limit

# a name that is safe as one directory name on any host: no '/', no leading '.' or '-', bounded
Name = Annotated[str, Field(pattern=NAME_RE, min_length=1, max_length=MAX_NAME_CHARS)]

ArgValue = bool | int | float | str | list[bool | int | float | str]


class StrictModel(BaseModel):
    """Base of every file-format model: unknown keys are errors, values are not coerced, frozen.

    No text may hold a NUL character: argv and the environment end a string at the first NUL, so
    a value would reach the engine cut short without a word.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        at = nul_at(value)
        if at is not None:
            raise invalid(
                "nul_character",
                "a NUL character is not allowed in text",
                {"at": at, "fix": "remove the NUL character (written \\0 or \\x00 in YAML)"},
            )
        return value


def nul_at(value: Any) -> tuple[str | int, ...] | None:
    """The path inside `value` (text, lists, mappings and their keys) to the first text holding a NUL, if any."""
    if isinstance(value, str):
        return () if "\0" in value else None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            inner = nul_at(item)
            if inner is not None:
                return (index, *inner)
    if isinstance(value, dict):
        for key, item in value.items():
            inner = () if isinstance(key, str) and "\0" in key else nul_at(item)
            if inner is not None:
                return (key, *inner)
    return None


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")


def _address(host: str) -> bool:
    """An IP literal (v4 or v6) or an RFC 1123 host name: dot-separated labels of letters, digits and
    inner '-', 63 characters at most each, 253 in all (one trailing dot allowed)."""
    import ipaddress

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    return 0 < len(name) <= 253 and all(_LABEL.match(label) for label in name.split("."))


def is_local_path(model: str) -> bool:
    """An absolute path names a directory on the host; anything else is a Hugging Face repo id."""
    return model.startswith("/")


def check_revision(model: str, revision: str | None, allow_unpinned: bool) -> None:
    """Repo ids need a 40-hex commit unless explicitly allowed to float (a moving 'main' is not reproducible)."""
    if revision is not None and not REVISION_RE.match(revision) and not allow_unpinned:
        raise invalid(
            "revision_format",
            "revision {revision!r} is not a 40-hex commit id",
            {
                "revision": revision,
                "at": "revision",
                "fix": "pin the full commit sha (`hf api` or the model page's history), or set `allow_unpinned: true`",
            },
        )
    if revision is None and not is_local_path(model) and not allow_unpinned:
        raise invalid(
            "revision_missing",
            "{model!r} is a Hugging Face repo id without a pinned revision",
            {
                "model": model,
                "at": "revision",
                "fix": "add `revision: <40-hex commit>` or set `allow_unpinned: true` (not reproducible)",
            },
        )


class Metadata(StrictModel):
    name: Annotated[Name, Field(description="profile name, used in release paths")]
    version: Annotated[int, Field(ge=1, description="bumped on every change")]
    description: str = ""


class Target(StrictModel):
    model: Annotated[str, Field(description="HF repo id or absolute path on the host")]
    revision: Annotated[str | None, Field(description="40-hex commit of the repo")] = None
    allow_unpinned: bool = False

    @model_validator(mode="after")
    def _pinned(self) -> Target:
        check_revision(self.model, self.revision, self.allow_unpinned)
        return self


class Drafter(Target):
    manifest: Annotated[str, Field(description="path to the drafter's DrafterManifest, relative to the profile")]
    layer_ids: Annotated[
        list[int] | None,
        Field(
            description="ids to serve in the drafter config (engine frame); normally left out so specctl derives them"
        ),
    ] = None


class AdaptiveTier(StrictModel):
    """One batch-size tier of sglang's adaptive speculation: the steps it may choose among, and its
    knobs (sglang's defaults where left out)."""

    candidate_steps: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    ema_alpha: Annotated[float | None, Field(gt=0, le=1)] = None
    update_interval: Annotated[int | None, Field(ge=1)] = None
    warmup_batches: Annotated[int | None, Field(ge=0)] = None
    up_hysteresis: float | None = None
    down_hysteresis: float | None = None
    ceiling_coeff: float | None = None


class Speculative(StrictModel):
    algorithm: Literal["EAGLE3", "EAGLE", "NEXTN", "STANDALONE"] = "EAGLE3"
    num_steps: Annotated[int | None, Field(ge=1)] = None
    eagle_topk: Annotated[int | None, Field(ge=1)] = None
    num_draft_tokens: Annotated[int | None, Field(ge=1)] = None
    # sglang's adaptive speculation: true for its built-in tiers, or tiers by batch size ({1: {...}, 8: {...}})
    adaptive: bool | dict[Annotated[int, Strict(False), Field(ge=1)], AdaptiveTier] = False

    def adaptive_config(self) -> dict[str, Any] | None:
        """The tiers as sglang's --speculative-adaptive-config file holds them (None: built-in or off)."""
        if not isinstance(self.adaptive, dict):
            return None
        return {str(bs): tier.model_dump(exclude_none=True) for bs, tier in sorted(self.adaptive.items())}


class Parallel(StrictModel):
    tp: Annotated[int, Field(ge=1)] = 1
    nnodes: Annotated[int, Field(ge=1)] = 1
    dist_init_port: Annotated[int, Field(ge=1, le=65535, description="rendezvous port on node 0")] = 50000


class Hardware(StrictModel):
    gpu: Annotated[str, Field(description="a key of the built-in GPU catalog")]
    gpus_per_node: Annotated[int, Field(ge=1)]

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, gpu: str) -> str:
        if gpu not in GPUS:
            close = difflib.get_close_matches(gpu, GPUS, n=1, cutoff=0.5)
            fix = f"did you mean {close[0]!r}?" if close else f"use one of: {', '.join(GPUS)}"
            raise invalid("unknown_gpu", "unknown GPU type {gpu!r}", {"gpu": gpu, "fix": fix})
        return gpu


class EngineSettings(StrictModel):
    name: Annotated[str, Field(description="engine name from specctl's engine registry")]
    version: Annotated[str, Field(description='exact engine version, e.g. "0.5.23" (quoted)')]
    python: Annotated[str, Field(description="interpreter on the host that has the engine installed")] = "python3"
    host: str = "0.0.0.0"
    port: Annotated[int, Field(ge=1, le=65535)] = 30000
    args: Annotated[dict[str, ArgValue], Field(description="extra engine flags, checked against its flag catalog")] = {}
    env: dict[str, str] = {}
    # on by default, and then left out of the profile's digest: profiles written before it keep theirs
    metrics: Annotated[
        bool,
        Field(
            description="serve the engine's Prometheus metrics (sglang: --enable-metrics), which `specctl watch` reads",
            exclude_if=lambda on: on is True,
        ),
    ] = True

    @field_validator("python")
    @classmethod
    def _python_on_the_host(cls, python: str) -> str:
        one_line(python)
        return interpreter(python) or python

    @field_validator("host")
    @classmethod
    def _an_address(cls, host: str) -> str:
        """What the server binds: an IP literal or an RFC 1123 host name, nothing else (the value reaches
        the engine as one quoted word: this is about binding what was meant, not about the shell)."""
        if not _address(host):
            raise invalid(
                "engine_host",
                "{host!r} is neither an IP address nor a host name",
                {
                    "host": host,
                    "fix": 'use an address such as "0.0.0.0" (every interface), "127.0.0.1" or "::", '
                    "or a host name of letters, digits, '-' and '.'",
                },
            )
        return host

    @field_validator("name")
    @classmethod
    def _known_engine(cls, name: str) -> str:
        from specctl.engines import engine_names

        if name not in engine_names():
            raise invalid(
                "unknown_engine",
                "unknown engine {name!r}",
                {"name": name, "fix": f"use one of: {', '.join(engine_names())}"},
            )
        return name

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not re.match(ENV_NAME_RE, name):
                raise invalid(
                    "env_name",
                    "{name!r} is not a valid environment variable name",
                    {"name": name, "fix": "use letters, digits and '_', not starting with a digit"},
                )
        return env


# a gate's threshold: one for every operating point, or per concurrency ({1: 1.3, 16: 1.0}; keys may
# come back from JSON as text, so they alone are coerced)
Concurrency = Annotated[int, Strict(False), Field(ge=1)]


class Verify(StrictModel):
    workload: Annotated[str, Field(description="a built-in prompt set name or a file path")] = "chat-small"
    requests: Annotated[int, Field(ge=1)] = 32
    max_new_tokens: Annotated[int, Field(ge=1)] = 128
    temperature: Annotated[float, Field(ge=0)] = 0.0
    concurrency: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] = 1
    request_rate: Annotated[float | None, Field(gt=0)] = None
    stream: bool = False
    min_accept_length: Annotated[float, Field(ge=1)] | dict[Concurrency, Annotated[float, Field(ge=1)]] | None = None
    min_speedup: Annotated[float, Field(gt=0)] | dict[Concurrency, Annotated[float, Field(gt=0)]] | None = None
    max_ttft_s: Annotated[float, Field(gt=0)] | dict[Concurrency, Annotated[float, Field(gt=0)]] | None = None

    @property
    def points(self) -> tuple[int, ...]:
        """The operating points measured, in order: each concurrency once, ascending."""
        levels = self.concurrency if isinstance(self.concurrency, list) else [self.concurrency]
        return tuple(sorted(set(levels)))

    def threshold(self, gate: str, concurrency: int) -> float | None:
        """A gate's threshold at one operating point (None: not gated there)."""
        value = getattr(self, gate)
        return value.get(concurrency) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _thresholds_name_points(self) -> Verify:
        if isinstance(self.concurrency, list) and (
            not self.concurrency or len(set(self.concurrency)) != len(self.concurrency)
        ):
            raise invalid(
                "concurrency_list",
                "concurrency must list each level once",
                {"at": "concurrency", "fix": "write e.g. [1, 4, 16]"},
            )
        for gate in ("min_accept_length", "min_speedup", "max_ttft_s"):
            value = getattr(self, gate)
            stray = sorted(set(value) - set(self.points)) if isinstance(value, dict) else []
            if stray:
                raise invalid(
                    "threshold_point",
                    "{gate} names concurrency {stray}, which verify.concurrency does not measure",
                    {
                        "gate": gate,
                        "stray": stray,
                        "at": gate,
                        "fix": f"add {stray} to verify.concurrency, or remove it from {gate}",
                    },
                )
        return self


class TuneObjective(StrictModel):
    """What `specctl tune` maximises: a throughput at one operating point."""

    metric: Annotated[
        Literal["output_tokens_per_s", "decode_tokens_per_s"],
        Field(description="Σ tokens / Σ e2e per request (output) or after the first token (decode)"),
    ] = "output_tokens_per_s"
    concurrency: Annotated[Concurrency | None, Field(description="the operating point (default: verify's highest)")] = (
        None
    )


class Tune(StrictModel):
    """The speculative settings `specctl tune` searches: every combination of the lists, measured at
    the objective's operating point (`num_draft_tokens` empty: eagle_topk 1's rule, num_steps + 1)."""

    num_steps: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = [1, 2, 3, 4, 5]
    eagle_topk: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = [1]
    num_draft_tokens: list[Annotated[int, Field(ge=1)]] = []
    adaptive: Annotated[list[bool], Field(min_length=1)] = [False]
    objective: TuneObjective = TuneObjective()
    requests: Annotated[
        int | None, Field(ge=8, description="planned requests per candidate (default: verify.requests, at least 8)")
    ] = None
    batch: Annotated[int, Field(ge=1, description="requests between two looks at a candidate's interval")] = 4


class Watch(StrictModel):
    """How `specctl watch` judges the serving release (not part of what is served)."""

    tolerance: Annotated[
        float,
        Field(
            ge=0,
            description="accept-length units below the verified interval's lower bound that a window may fall "
            "before it is degraded (the profile's gate applies regardless)",
        ),
    ] = 0.3


class Profile(StrictModel):
    """A versioned statement of what to serve: target, drafter and its manifest, parallelism, GPU, engine."""

    api_version: Literal["specctl/v1"] = Field("specctl/v1", alias="apiVersion")
    kind: Literal["Profile"] = "Profile"
    metadata: Metadata
    target: Target
    drafter: Drafter | None = None
    speculative: Speculative = Speculative()
    parallel: Parallel = Parallel()
    hardware: Hardware
    engine: EngineSettings
    secrets: list[Annotated[str, Field(pattern=ENV_NAME_RE)]] = []
    verify: Verify = Verify()
    hosts: list[str] = []
    # how to search speculative settings; not part of what is served, so not part of the profile's digest
    tune: Annotated[Tune | None, Field(exclude=True)] = None
    watch: Annotated[Watch, Field(exclude=True)] = Watch()

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True, defer_build=True)

    @model_validator(mode="after")
    def _secrets_not_in_env(self) -> Profile:
        leaked = sorted(set(self.secrets) & set(self.engine.env))
        if leaked:
            raise invalid(
                "secret_in_env",
                "secret {names} also has a value in engine.env, which would be written to disk",
                {
                    "names": ", ".join(leaked),
                    "at": "engine.env",
                    "fix": "remove it from engine.env; secrets are passed from your environment at run time",
                },
            )
        return self
