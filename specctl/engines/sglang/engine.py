"""The SGLang engine behind specctl's Engine interface."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specctl.verdict.window import Source

import copy
import json
from collections.abc import Mapping, Sequence
from functools import cache, partial
from pathlib import Path
from typing import Any

from specctl.constants import OVERLAY_DIR, OVERLAY_PATH
from specctl.engines.base import (
    CaptureOutcome,
    ConfigOverride,
    Convention,
    EngineProblem,
    HttpContract,
    LaunchArgv,
    LaunchSpec,
    ParseAnswer,
    ProbeDisagreement,
    ProbeReport,
    SpecRewrite,
)
from specctl.engines.flags import FlagCatalog, StoreError, load_catalog, shipped_versions
from specctl.engines.sglang import capture as table
from specctl.engines.sglang import serving
from specctl.errors import EngineError

DATA = Path(__file__).parent / "data"
IDS_KEY = "eagle_aux_hidden_state_layer_ids"

# Flags specctl renders from profile fields; a profile must not set them through engine.args.
_RESERVED = {
    "model-path": "target.model",
    "revision": "target.revision",
    "speculative-draft-model-path": "drafter.model",
    "speculative-draft-model-revision": "drafter.revision",
    "speculative-algorithm": "speculative.algorithm",
    "speculative-num-steps": "speculative.num_steps",
    "speculative-eagle-topk": "speculative.eagle_topk",
    "speculative-num-draft-tokens": "speculative.num_draft_tokens",
    "tp-size": "parallel.tp",
    "nnodes": "parallel.nnodes",
    "node-rank": "parallel.nnodes (ranks are derived)",
    "dist-init-addr": "parallel.dist_init_port (the address is node 0)",
    "host": "engine.host",
    "port": "engine.port",
}

# `_auto_choose_speculative_params` in sglang 0.5.23 srt/arg_groups/speculative_hook.py, keyed on
# the target architecture
_AUTO_PARAMS = {"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8), "Grok1VForCausalLM": (5, 4, 8)}
_AUTO_DEFAULT = (3, 1, 4)


# what drift compares between the plan and the live server (`/server_info` resolved arguments)
DRIFT_FIELDS = (
    "model_path",
    "revision",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_draft_model_revision",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "tp_size",
    "nnodes",
    "port",
)


def _as_flag_value(value: Any) -> str:
    """A reported value as the launch flag would spell it (3 and "3" agree; 0.5 and "0.50" agree)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class SGLangEngine:
    """SGLang as specctl sees it: `python -m sglang.launch_server` and its EAGLE-3 capture rules."""

    name = "sglang"

    def versions(self) -> tuple[str, ...]:
        return table.load_table().releases

    def convention(self, version: str, architecture: str) -> Convention:
        data = table.load_table()
        if not data.covers_version(version):
            raise EngineError(
                f"sglang {version} is not in specctl's convention table "
                f"(it covers {data.releases[0]} to {data.releases[-1]})",
                engine=self.name,
                version=version,
                fix="use a covered version, probe the host's engine with --engine-python, "
                "or pass --assume-convention VERSION",
            )
        rule = data.rule_for(version, architecture)
        if rule is None:
            raise EngineError(
                f"specctl has no capture rule for architecture {architecture!r} in sglang {version}",
                engine=self.name,
                version=version,
                fix="probe the host's engine with --engine-python, "
                "or pass --assume-convention with an architecture it covers",
            )
        return Convention(
            engine=self.name,
            version=version,
            architecture=architecture,
            source=rule.source,
            supported=rule.supported,
            capture=partial(table.capture, rule),
            ids_for=partial(table.ids_for, rule),
        )

    def versions_expressing(self, architecture: str, positions: Sequence[int], num_layers: int) -> list[str]:
        data = table.load_table()
        found = []
        for version in data.releases:
            rule = data.rule_for(version, architecture)
            if rule is not None and rule.supported and table.ids_for(rule, positions, num_layers) is not None:
                found.append(version)
        return found

    def flag_catalog(self, version: str) -> FlagCatalog:
        """The release's parser as data/flags/catalog.json stores it (one file for every release,
        decoded lazily: only the asked-for release is built)."""
        store = DATA / "flags" / "catalog.json"
        try:
            return load_catalog(store, version)
        except StoreError as exc:
            if exc.failure is not None:
                raise EngineError(
                    f"specctl could not build sglang {version}'s flag catalog ({exc.failure})",
                    engine=self.name,
                    version=version,
                    fix="check engine.args by hand; "
                    "specctl/engines/sglang/CONVENTIONS.md lists the releases without a catalog",
                ) from None
            shipped = shipped_versions(store)
            have = f"catalogs cover {shipped[0]} to {shipped[-1]}" if shipped else "none is shipped"
            raise EngineError(
                f"no sglang {version} flag catalog is shipped ({have})",
                engine=self.name,
                version=version,
                fix="pin a covered version, "
                "or add one with scripts/gen_sglang_flags.py --wheel from that release's wheel",
            ) from None

    def launch_args(self, version: str, args: Mapping[str, Any]) -> list[str]:
        try:
            catalog = self.flag_catalog(version)
        except EngineError:  # no catalog for that version: render without one (check warns)
            catalog = FlagCatalog(self.name, version, ())
        return catalog.render(args)

    def distribution(self) -> str:
        return "sglang"

    def startup_phases(self) -> Sequence[tuple[str, str]]:
        # log lines of sglang's model runner and HTTP server, in the order they appear
        return (
            ("Load weight begin", "loading weights"),
            ("Load weight end", "weights loaded"),
            ("Capture cuda graph begin", "capturing CUDA graphs"),
            ("Capture cuda graph end", "CUDA graphs captured"),
            ("fired up and ready to roll", "ready"),
        )

    def reserved_flags(self) -> Mapping[str, str]:
        return _RESERVED

    def argv(self, spec: LaunchSpec) -> LaunchArgv:
        argv = [spec.python, "-m", "sglang.launch_server", "--model-path", spec.model]
        if spec.revision:
            argv += ["--revision", spec.revision]
        if spec.drafter is not None:
            argv += [
                "--speculative-algorithm",
                spec.algorithm or "EAGLE3",
                "--speculative-draft-model-path",
                spec.drafter,
            ]
            if spec.drafter_revision:
                argv += ["--speculative-draft-model-revision", spec.drafter_revision]
            for flag, value in (
                ("--speculative-num-steps", spec.num_steps),
                ("--speculative-eagle-topk", spec.eagle_topk),
                ("--speculative-num-draft-tokens", spec.num_draft_tokens),
            ):
                if value is not None:
                    argv += [flag, str(value)]
            if spec.adaptive:
                argv += [
                    "--speculative-adaptive",
                    *(["--speculative-adaptive-config", spec.adaptive_config] if spec.adaptive_config else []),
                ]
        argv += ["--tp-size", str(spec.tp)]
        rank_at = addr_at = None
        if spec.nnodes > 1:
            argv += ["--nnodes", str(spec.nnodes), "--node-rank"]
            rank_at = len(argv)
            argv += [str(spec.node_rank), "--dist-init-addr"]
            addr_at = len(argv)
            argv += [spec.dist_init_addr or ""]
        argv += ["--host", spec.host, "--port", str(spec.port)]
        if spec.metrics:
            argv += ["--enable-metrics"]
        return LaunchArgv(tuple(argv), rank_at, addr_at)

    def drafter_ids(self, config: Mapping[str, Any]) -> list[int] | None:
        # sglang reads only the nested key (spec_aux_hidden_state.py `_resolve_eagle_aux_hidden_state`)
        # and hands the value to the setter as is: booleans and whole floats are numbers to it
        # (`True + 1 == 2`, `2.0 == 2`); anything else fails there (drafter_problems says so)
        ids = _raw_ids(config)
        if isinstance(ids, list) and all(_whole(i) for i in ids):
            return [int(i) for i in ids]
        return None

    def drafter_problems(self, version: str, algorithm: str, config: Mapping[str, Any]) -> list[EngineProblem]:
        if algorithm != "EAGLE3":
            return []
        return [*_format_problems(version, config), *_ids_problems(config)]

    def adaptive_problems(
        self,
        version: str,
        algorithm: str,
        eagle_topk: int | None,
        args: Mapping[str, Any],
        tiers: Mapping[str, Any] | None,
    ) -> list[EngineProblem]:
        row = _adaptive_row(version)
        if row is None:
            since = _adaptive()["since"]
            return [
                EngineProblem(
                    "spec-adaptive",
                    True,
                    f"sglang {version} has no adaptive speculation: "
                    "--speculative-adaptive is an unknown flag there and the server does not start",
                    f"pin engine.version to {since} or later, or remove speculative.adaptive",
                )
            ]
        off = []
        if algorithm not in row["algorithms"]:
            off.append(f"algorithm {algorithm} (only {', '.join(row['algorithms'])})")
        if row["topk_one"] and eagle_topk not in (None, 1):
            off.append(f"eagle_topk {eagle_topk} (only 1)")
        on = {dest for dest, value in self._settings(version, args).items() if value}
        off += [f"{flag.replace('_', '-')} is on" for flag in row["flags"] if flag in on]
        off += [
            f"{flag.replace('_', '-')} is not set (this release needs it)" for flag in row["needs"] if flag not in on
        ]
        problems = (
            [
                EngineProblem(
                    "spec-adaptive",
                    False,
                    f"sglang {version} turns adaptive speculation off with only a "
                    f"warning in its log, and serves the static settings: {'; '.join(off)}",
                    "change what it names, or remove speculative.adaptive",
                )
            ]
            if off
            else []
        )
        if tiers is not None and not row["tiers"]:
            problems.append(
                EngineProblem(
                    "spec-adaptive",
                    True,
                    f"sglang {version} has one set of adaptive settings for "
                    "every batch size (tiers by batch size come in 0.5.13): its config file has no "
                    "batch-size keys",
                    "pin engine.version to 0.5.13 or later, or use `adaptive: true`",
                )
            )
        return problems

    def adaptive_tiers(self, version: str) -> dict[str, Any] | None:
        row = _adaptive_row(version)
        return copy.deepcopy(row["defaults"]) if row is not None else None

    def adaptive_by_batch_size(self, version: str) -> bool:
        row = _adaptive_row(version)
        return bool(row and row["tiers"])

    def with_drafter_ids(self, config: Mapping[str, Any], ids: Sequence[int]) -> dict[str, Any]:
        rewritten = copy.deepcopy(dict(config))
        nested = dict(rewritten.get("eagle_config") or {})
        nested[IDS_KEY] = list(ids)
        rewritten["eagle_config"] = nested
        if IDS_KEY in rewritten:  # other readers use the top-level key; keep them in agreement
            rewritten[IDS_KEY] = list(ids)
        return rewritten

    def speculative_rewrites(
        self,
        architecture: str,
        algorithm: str,
        num_steps: int | None,
        eagle_topk: int | None,
        num_draft_tokens: int | None,
    ) -> list[SpecRewrite]:
        rewrites = []
        given = (num_steps, eagle_topk, num_draft_tokens)
        if algorithm == "NEXTN":
            rewrites.append(
                SpecRewrite(
                    "speculative.algorithm", "NEXTN", "EAGLE", "sglang resolves NEXTN as an alias of EAGLE", False
                )
            )
        if all(v is None for v in given):
            steps, topk, tokens = _AUTO_PARAMS.get(architecture, _AUTO_DEFAULT)
            rewrites.append(
                SpecRewrite(
                    "speculative",
                    None,
                    {"num_steps": steps, "eagle_topk": topk, "num_draft_tokens": tokens},
                    f"sglang chooses these for {architecture} when all three are unset",
                    False,
                )
            )
            return rewrites
        if any(v is None for v in given):
            missing = [
                n for n, v in zip(("num_steps", "eagle_topk", "num_draft_tokens"), given, strict=True) if v is None
            ]
            rewrites.append(
                SpecRewrite(
                    "speculative",
                    dict(zip(("num_steps", "eagle_topk", "num_draft_tokens"), given, strict=True)),
                    None,
                    f"sglang fails at start-up unless all three or none are set (missing: {', '.join(missing)})",
                    True,
                )
            )
            return rewrites
        assert num_steps is not None and num_draft_tokens is not None
        if eagle_topk == 1 and num_draft_tokens != num_steps + 1:
            rewrites.append(
                SpecRewrite(
                    "speculative.num_draft_tokens",
                    num_draft_tokens,
                    num_steps + 1,
                    "with eagle_topk 1 sglang forces num_draft_tokens = num_steps + 1",
                    False,
                )
            )
        return rewrites

    def probe_script(self) -> Path:
        return Path(__file__).parent / "probe.py"

    def build_script(self) -> Path | None:
        return Path(__file__).parent / "build.py"

    def prove_script(self) -> Path:
        return Path(__file__).parent / "probe.py"  # with arguments, it proves a release (see its docstring)

    def chat_ids_command(self, python: str, argv: Sequence[str]) -> list[str]:
        """The tokenizer sglang's chat endpoint uses: --tokenizer-path, else --model-path, at --revision."""
        flags = _flag_values(argv)
        tokenizer = flags.get("--tokenizer-path") or flags.get("--model-path") or flags.get("--model") or ""
        source = (Path(__file__).parent / "_chat_ids_host.py").read_text(encoding="utf-8")
        return [
            python,
            "-c",
            source,
            tokenizer,
            flags.get("--revision") or "",
            "1" if "--trust-remote-code" in argv else "0",
        ]

    def probe_request(
        self,
        architecture: str | None,
        num_layers: int | None,
        ids: Sequence[Sequence[int] | None],
        needed: Sequence[int] | None,
        argvs: Sequence[Sequence[str]],
    ) -> dict[str, Any]:
        queries: list[list[int] | None] = []
        if architecture and num_layers:
            n = num_layers
            probes: list[Sequence[int] | None] = [
                None,
                *ids,
                [1, n // 2 - 1, n - 4],
                [-1, 1, n // 2],
                [0, n // 2, n - 1],
                [n - 1],
                [n],
            ]
            probes += table.candidate_ids(needed) if needed else []
            for item in probes:
                query = list(item) if item is not None else None
                if query not in queries:
                    queries.append(query)
        captures = [{"architecture": architecture, "num_layers": num_layers, "queries": queries}] if queries else []
        return {"captures": captures, "argv": [self._flags(argv) for argv in argvs]}

    @staticmethod
    def _flags(argv: Sequence[str]) -> list[str]:
        """The launch flags of an argv rendered by `argv()`: what follows `-m sglang.launch_server`."""
        return list(argv[3:]) if tuple(argv[1:3]) == ("-m", "sglang.launch_server") else list(argv)

    def probe_report(
        self, python: str, architecture: str | None, num_layers: int | None, answer: Mapping[str, Any]
    ) -> ProbeReport:
        seconds = float((answer.get("seconds") or {}).get("wall", 0.0))
        parse = tuple(ParseAnswer(tuple(p["argv"]), bool(p["ok"]), p.get("error")) for p in answer.get("parse") or [])
        engine_version = answer.get("version")
        if answer.get("error") or engine_version is None:
            return ProbeReport(
                python, engine_version, None, (), parse, answer.get("error") or "no engine version reported", seconds
            )
        probed = next(
            (
                c
                for c in answer.get("captures") or []
                if c["architecture"] == architecture and c["num_layers"] == num_layers
            ),
            None,
        )
        if not probed or architecture is None or num_layers is None:
            return ProbeReport(python, engine_version, None, (), parse, None, seconds)
        data = table.load_table()
        rule = data.rule_for(engine_version, architecture)
        if not probed.get("supported"):
            unsupported = table.CaptureRule(architecture, engine_version, engine_version, "probe", False)
            convention = self._probed(engine_version, architecture, unsupported, {})
            disagree = (
                ()
                if rule is None or not rule.supported
                else (ProbeDisagreement(None, None, "supported", None, probed.get("reason")),)
            )
            return ProbeReport(python, engine_version, convention, disagree, parse, None, seconds)
        stub_errors = [r["stub_error"] for r in probed["results"] if r.get("stub_error")]
        if stub_errors:
            return ProbeReport(
                python,
                engine_version,
                None,
                (),
                parse,
                f"the probe's stub does not fit this engine: {stub_errors[0]}",
                seconds,
            )
        answers = {(tuple(r["ids"]) if r["ids"] is not None else None): r for r in probed["results"]}
        bounds = (
            rule
            if rule is not None and rule.supported
            else table.CaptureRule(
                architecture,
                engine_version,
                engine_version,
                "probe",
                True,
                max_position="N-1",
                beyond="dropped",
                embedding="unverified",
            )
        )
        convention = self._probed(engine_version, architecture, bounds, answers)
        disagreements = []
        if rule is not None:
            for ids, result in answers.items():
                expected = table.capture(rule, list(ids) if ids is not None else None, num_layers)
                if (
                    not rule.supported
                    or tuple(expected.requested) != tuple(result["requested"] or ())
                    or ((expected.error or "").startswith("IndexError") != bool(result["error"]))
                ):
                    disagreements.append(
                        ProbeDisagreement(
                            ids,
                            tuple(expected.requested) if rule.supported else None,
                            expected.error,
                            tuple(result["requested"]) if result["requested"] is not None else None,
                            result["error"],
                        )
                    )
        return ProbeReport(python, engine_version, convention, tuple(disagreements), parse, None, seconds)

    def _probed(
        self, version: str, architecture: str, bounds: table.CaptureRule, answers: Mapping[Any, Any]
    ) -> Convention:
        """A convention that answers from the engine's own setter, bounded by the forward loop's limits."""

        def capture(ids: Sequence[int] | None, num_layers: int) -> table.SglangCapture:
            if not bounds.supported:
                return table.capture(bounds, ids, num_layers)
            key = tuple(ids) if ids is not None else None
            if key not in answers:
                raise KeyError(f"the probe was not asked about ids {list(ids) if ids is not None else None}")
            result = answers[key]
            if result["error"]:
                return table.SglangCapture(key, tuple(result["requested"] or ()), (), error=result["error"])
            return table.bound(bounds, key, result["requested"], num_layers)

        def ids_for(positions: Sequence[int], num_layers: int) -> list[int] | None:
            target = tuple(sorted(set(positions)))
            for ids in table.candidate_ids(target):
                if ids in answers:
                    out = capture(ids, num_layers)
                    if out.error is None and not out.dropped and not out.remapped and tuple(out.captured) == target:
                        return list(ids)
            return None

        source = f"probe of the installed engine (loop limits from {bounds.source})"
        return Convention(self.name, version, architecture, source, bounds.supported, capture, ids_for)

    def pins_installed_version(self) -> bool:
        return True

    def container_image(self, version: str) -> str | None:
        # the project's release images on Docker Hub are tagged v<version> (CUDA variants add a
        # suffix, e.g. v0.5.12-cu130; the plain tag is the default build)
        return f"lmsysorg/sglang:v{version}"

    def _settings(self, version: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """A profile's engine.args by the version's own destination names (aliases and spellings resolved
        by its parser); the key itself where the catalog does not know it."""
        try:
            catalog = self.flag_catalog(version)
        except EngineError:
            catalog = FlagCatalog(self.name, version, ())
        return serving.launch_settings(catalog, args)

    def config_override(self, version: str, args: Mapping[str, Any]) -> ConfigOverride | None:
        return serving.config_override(self._settings(version, args))

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
        rule = table.load_table().rule_for(version, architecture)
        default = table.default_positions(rule, num_layers) if rule is not None and rule.supported else []
        launch = serving.Launch(
            version,
            architecture,
            algorithm,
            self._settings(version, args),
            capture,
            default,
            num_layers,
            target_config,
            compute_capability,
        )
        return serving.serving_problems(launch)

    def pipeline_stages(self, version: str, args: Mapping[str, Any]) -> int:
        value = self._settings(version, args).get("pp_size", 1)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    def watch_source(self, version: str) -> Source:
        """From the metrics table (engines/sglang/metrics.py): exact windows where the release counts
        verify calls (0.5.13 on), else its gauge weighted by its decode tokens (0.5.9 on) or its
        generated tokens."""
        from specctl.engines.sglang.metrics import spec_metrics
        from specctl.verdict.window import Source

        m = spec_metrics(version)
        return Source(
            m.accept_length,
            m.generation_tokens,
            m.requests,
            verify_calls=m.verify_calls,
            decode_tokens=m.decode_tokens,
            decode_match=dict([m.decode_mode]) if m.decode_tokens else {},
        )

    def http_contract(self, version: str) -> HttpContract:
        """From data/http.json (scripts/gen_sglang_http.py: the first release of each feature); a
        version the table does not list is taken as the newest."""
        since = _http_since()
        releases = table.load_table().releases
        at = releases.index(version) if version in releases else len(releases)

        def has(feature: str) -> bool:
            first = since.get(feature)
            return first is not None and first in releases and at >= releases.index(first)

        new_routes = has("server_info_route")  # before it only /get_server_info and /get_model_info exist
        return HttpContract(
            version,
            has("chat_meta_info"),
            has("spec_verify_ct"),
            has("e2e_latency"),
            server_info_path="/server_info" if new_routes else "/get_server_info",
            model_info_path="/model_info" if new_routes else "/get_model_info",
        )

    def expected_server_args(self, argv: Sequence[str], release_dir: str, engine_version: str) -> dict[str, str]:
        # the flags whose resolved value /server_info reports under the flag's dest name
        expected = {"version": engine_version}
        words = [w.replace(OVERLAY_PATH, release_dir + "/" + OVERLAY_DIR) for w in argv]
        for flag, value in zip(words, words[1:], strict=False):
            dest = flag[2:].replace("-", "_") if flag.startswith("--") else None
            if dest in DRIFT_FIELDS:
                expected[dest] = value
        return expected

    def reported_server_args(self, server_info: Mapping[str, Any]) -> dict[str, str | None]:
        keys = (*DRIFT_FIELDS, "version")
        return {key: None if server_info.get(key) is None else _as_flag_value(server_info[key]) for key in keys}


SGLANG = SGLangEngine()


def _flag_values(argv: Sequence[str]) -> dict[str, str]:
    """`--flag value` pairs of an argv (the first value of each flag)."""
    values: dict[str, str] = {}
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag.startswith("--") and not value.startswith("--"):
            values.setdefault(flag, value)
    return values


@cache
def _http_since() -> dict[str, str | None]:
    with open(Path(__file__).parent / "data" / "http.json", encoding="utf-8") as handle:
        since: dict[str, str | None] = json.load(handle)["since"]
    return since


def _raw_ids(config: Mapping[str, Any]) -> Any:
    nested = config.get("eagle_config")
    return nested.get(IDS_KEY) if isinstance(nested, Mapping) else None


def _whole(value: Any) -> bool:
    """A value sglang's capture code uses as that integer: an int, a bool, or a float with no fraction."""
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _ids_problems(config: Mapping[str, Any]) -> list[EngineProblem]:
    ids = _raw_ids(config)
    if ids is None:
        return []
    where = f"eagle_config.{IDS_KEY} = {json.dumps(ids)[:80]}"
    fix = "write the ids as a JSON list of integers"
    if not isinstance(ids, list) or not all(isinstance(i, (int, float)) for i in ids):
        return [
            EngineProblem(
                "drafter-ids-type",
                True,
                f"{where} is not a list of numbers: sglang passes it to the "
                "model's capture setter as is, which fails at start-up (a TypeError when it adds the "
                "+1 offset or iterates)",
                fix,
            )
        ]
    if not all(_whole(i) for i in ids):
        return [
            EngineProblem(
                "drafter-ids-type",
                True,
                f"{where} has fractional ids: no layer index equals them, so "
                "sglang captures nothing at those positions (or fails at start-up where it indexes "
                "the layer list)",
                fix,
            )
        ]
    odd = [i for i in ids if isinstance(i, bool) or isinstance(i, float)]
    if not odd:
        return []
    read = [int(i) for i in ids]
    floats = any(isinstance(i, float) for i in odd)
    return [
        EngineProblem(
            "drafter-ids-type",
            floats,
            f"{where}: sglang uses {json.dumps(odd)} as the numbers "
            f"{[int(i) for i in odd]} (true + 1 == 2), so it reads {read}"
            + (
                "; where a release indexes the layer list with an id (Qwen-MoE from 0.5.4.post2, "
                "Qwen3-Next), a float is a TypeError at start-up"
                if floats
                else ""
            ),
            fix,
        )
    ]


def _format_problems(version: str, config: Mapping[str, Any]) -> list[EngineProblem]:
    archs = [a for a in config.get("architectures") or () if isinstance(a, str)]
    shown = json.dumps(archs)
    since = _eagle3_since()
    releases = table.load_table().releases
    at = releases.index(version) if version in releases else len(releases)
    known = [name for name, first in since.items() if first in releases and at >= releases.index(first)]
    if not config.get("model_type"):
        kind = (
            " (the speculators format)"
            if "speculators_config" in config or any(a.endswith("Speculator") for a in archs)
            else ""
        )
        return [
            EngineProblem(
                "drafter-format",
                True,
                f"the drafter config has no model_type{kind}, architectures {shown}: sglang {version} reads it with "
                f'transformers\' AutoConfig, which refuses it ("Should have a `model_type` key"), and its model '
                f"registry has no such class",
                "serve it with an engine that loads this format (vLLM loads speculators drafters), or convert it to "
                'the layout sglang loads: architectures ["LlamaForCausalLMEagle3"], model_type "llama", '
                "the layer fields at the top level and eagle_config.eagle_aux_hidden_state_layer_ids",
            )
        ]
    if any(a in known for a in archs):
        return []
    later = {a: since[a] for a in archs if a in since}
    if later:
        name, first = next(iter(later.items()))
        return [
            EngineProblem(
                "drafter-format",
                True,
                f"sglang {version} has no {name} model class (it appears in {first})",
                f"pin engine.version to {first} or later",
            )
        ]
    return [
        EngineProblem(
            "drafter-format",
            True,
            f"architectures {shown} is not an EAGLE-3 drafter class of sglang {version} "
            f"(it has {', '.join(known) or 'none'}): "
            f"sglang loads the drafter as that plain model class, without its fc and midlayer weights, so it fails at "
            f"start-up or drafts from untrained layers",
            "set architectures to [\"LlamaForCausalLMEagle3\"] in (a copy of) the drafter's config.json: SafeAILab's "
            "EAGLE-3 exports name their weights as sglang's LlamaForCausalLMEagle3 loads them",
        )
    ]


@cache
def _eagle3_since() -> dict[str, str]:
    """EAGLE-3 drafter class -> first release that registers it (scripts/gen_sglang_drafters.py)."""
    with open(Path(__file__).parent / "data" / "drafters.json", encoding="utf-8") as handle:
        since: dict[str, str] = json.load(handle)["eagle3_since"]
    return since


@cache
def _adaptive() -> dict[str, Any]:
    """What adaptive speculation is per release (scripts/gen_sglang_adaptive.py)."""
    with open(Path(__file__).parent / "data" / "adaptive.json", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)["adaptive"]
    return data


def _adaptive_row(version: str) -> dict[str, Any] | None:
    """The rows apply from their release on; a version newer than the table takes the last row."""
    releases = table.load_table().releases
    at = releases.index(version) if version in releases else len(releases)
    found = None
    for row in _adaptive()["rows"]:
        if row["from"] in releases and at >= releases.index(row["from"]):
            found = row
    return found
