"""Static checks: each turns Inputs and the capture resolution into Findings.

Every code here is stable; CODES documents them and the tests cover each with a passing and a
failing case. Checks never raise for bad input: they report it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from specctl.constants import DEFAULT_MEM_FRACTION_STATIC, GIB, KV_HEADROOM_MIN_GIB
from specctl.engines.capture_frame import layers_of, positions_of, show_layers, show_positions
from specctl.errors import EngineError
from specctl.gpus import GPUS
from specctl.plan.findings import Finding, Severity
from specctl.plan.inputs import Inputs
from specctl.plan.resolve import CaptureResolution, resolve_capture
from specctl.profile.profile import REVISION_RE

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

CODES: dict[str, str] = {
    "checkpoint-unreadable": "target or drafter checkpoint metadata could not be read",
    "engine-version-unknown": "no capture convention is known for this engine version or architecture",
    "capture-unsupported": "this engine version has no EAGLE-3 capture for the target architecture",
    "capture-mismatch": "the layers the engine will capture differ from the manifest",
    "capture-inexpressible": "no drafter ids make this engine version capture the manifest's layers",
    "capture-overlay": "the drafter config's ids need an overlay to capture the manifest's layers",
    "capture-default": "the drafter config has no ids, so the engine's default layers are captured",
    "capture-out-of-range": "an id is out of range: silently not captured, or the engine fails at start-up",
    "capture-duplicate": "an id is given twice: captured once (one block of features short), or a start-up failure",
    "capture-cuda-graph": "verify steps replay CUDA graphs captured before the drafter's ids: the default layers",
    "capture-union": "a setter that never clears its marks captures the default and the drafter's layers together",
    "capture-tbo": "two-batch overlap splits batches that then capture fewer layers, or fail",
    "model-override": "a config override the engine fails on, or that changes the drafter's layer count",
    "pp-speculative": "the engine refuses pipeline parallelism with this speculative algorithm",
    "capture-width": "drafter fc input width differs from captures x target hidden size",
    "manifest-width": "manifest capture width differs from the drafter's fc input width",
    "manifest-order": "manifest layers are not strictly ascending (the engine concatenates ascending, once each)",
    "manifest-layer-range": "a manifest layer does not exist in the target",
    "manifest-target": (
        "manifest target (model, revision, architecture, layers, hidden, vocab) differs from the profile's target"
    ),
    "manifest-drafter": "manifest drafter (model, revision) differs from the profile's drafter",
    "drafter-hidden": "drafter target_hidden_size/hidden_size differs from the target hidden size",
    "vocab-size": "drafter vocab_size differs from the target vocab_size",
    "d2t-length": "draft_vocab_size differs from the length of the d2t table",
    "draft-vocab-key": "an untied EAGLE-3 drafter config has no draft_vocab_size key",
    "aux-disabled": "eagle_config.use_aux_hidden_state is false: nothing is captured",
    "ids-top-level": "the drafter config has top-level ids that the engine's capture ignores",
    "spec-adaptive": "adaptive speculation cannot run as asked: a release without it, or settings that turn it off",
    "drafter-format": "the engine version cannot load the drafter as an EAGLE-3 drafter (format, class, or release)",
    "drafter-ids-type": "the drafter's capture ids are not plain integers: what the engine makes of them",
    "algorithm-drafter": "an EAGLE-3 drafter is served with a non-EAGLE3 algorithm (silent fc skip)",
    "tp-heads": "TP does not divide the attention or KV heads",
    "tp-gpus": "TP exceeds nnodes x gpus_per_node or is not a multiple of nnodes",
    "parallel-hosts": "a multi-node profile names neither one host per node nor one cluster",
    "memory": "weights per GPU plus KV headroom exceed GPU memory x mem_fraction_static",
    "unpinned-revision": "a checkpoint revision is not pinned to a commit",
    "spec-rewrite": "the engine would rewrite a speculative parameter",
    "spec-auto": "the engine chooses the speculative parameters itself",
    "spec-rejected": "the engine would refuse these speculative parameters",
    "flag-unknown": "an engine flag does not exist in this engine version",
    "flag-type": "an engine flag has a value of the wrong type",
    "flag-choice": "an engine flag value is not one of its choices",
    "flag-reserved": "an engine flag that specctl renders from a profile field",
    "flag-catalog-missing": "no flag catalog is shipped for this engine version",
    "probe-failed": "the installed engine could not be probed",
    "probe-version": "the installed engine's version differs from the profile's",
    "probe-disagrees": "the installed engine captures differently from specctl's table for that version",
    "probe-parse": "the installed engine's own argument parser rejects the rendered launch flags",
    "probe-agrees": "the installed engine confirms the table's capture rule and parses the launch flags",
}

Check = Callable[[Inputs, CaptureResolution | None], Iterator[Finding]]
_CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    _CHECKS.append(fn)
    return fn


def run_checks(inputs: Inputs, resolution: CaptureResolution | None = None) -> list[Finding]:
    """All findings for these inputs, errors first, in a stable order."""
    resolution = resolution if resolution is not None else resolve_capture(inputs)
    findings = [f for fn in _CHECKS for f in fn(inputs, resolution)]
    order = {E: 0, W: 1, INFO: 2}
    return sorted(findings, key=lambda f: order[f.severity])


def _f(code: str, severity: Severity, message: str, fix: str, field: str | None = None, **values: object) -> Finding:
    assert code in CODES, code
    return Finding(code, severity, message, fix, dict(values), field)


@check
def _checkpoints(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    for role, error in (("target", inputs.target_error), ("drafter", inputs.drafter_error)):
        if error is not None:
            yield _f(
                "checkpoint-unreadable",
                E,
                f"{role} checkpoint: {error.message}",
                error.fix or "",
                f"{role}.model",
                source=error.source,
                revision=error.revision,
            )


@check
def _convention(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    if inputs.profile.drafter is None:
        return
    if inputs.convention_error is not None:
        yield _f(
            "engine-version-unknown",
            E,
            inputs.convention_error.message,
            inputs.convention_error.fix or "",
            "engine.version",
            engine=inputs.convention_error.engine,
            version=inputs.convention_error.version,
            architecture=inputs.architecture,
        )
    elif inputs.convention is not None and not inputs.convention.supported:
        c = inputs.convention
        able = _versions_able(inputs)
        yield _f(
            "capture-unsupported",
            E,
            f"{c.engine} {c.version} has no EAGLE-3 capture for {c.architecture}",
            f"use an engine version that supports it ({_span(able)})"
            if able
            else "no covered engine version supports it",
            "engine.version",
            engine=c.engine,
            version=c.version,
            architecture=c.architecture,
            versions_supporting=able,
        )


def _versions_able(inputs: Inputs) -> list[str]:
    arch, n = inputs.architecture, inputs.num_layers
    if arch is None or n is None or inputs.manifest is None:
        return []
    needed = sorted(set(positions_of(inputs.manifest.capture.layers)))
    return inputs.engine.versions_expressing(arch, needed, n)


def _span(versions: list[str]) -> str:
    if not versions:
        return "none"
    return versions[0] if len(versions) == 1 else f"{len(versions)} releases, {versions[0]} to {versions[-1]}"


@check
def _capture(inputs: Inputs, r: CaptureResolution | None) -> Iterator[Finding]:
    c = inputs.convention
    if r is None or c is None:
        return
    where = f"{c.engine} {c.version} ({c.architecture})"
    served, outcome = r.served_ids, r.served_outcome
    captured = list(outcome.captured)
    shown_ids = show_positions(list(served)) if served is not None else "none (engine default)"
    if r.needed is not None:
        needed = list(r.needed)
        common = dict(
            engine=c.engine,
            version=c.version,
            architecture=c.architecture,
            ids=list(served) if served is not None else None,
            captured_positions=captured,
            captured_layers=layers_of(captured),
            needed_positions=needed,
            needed_layers=layers_of(needed),
            rule_source=c.source,
        )
        if r.inexpressible:
            able = _versions_able(inputs)
            yield _f(
                "capture-inexpressible",
                E,
                f"no drafter ids make {where} capture the outputs of layers {show_layers(layers_of(needed))}",
                f"serve with an engine version that can ({_span(able)}), "
                "or retrain the drafter on layers this one can capture",
                "engine.version",
                versions_able=able,
                **common,
            )
        elif not r.matches:
            ids_fix = c.ids_for(needed, r.num_layers or inputs.num_layers)
            o = r.override
            fix = (
                (
                    f"set {o.ids_key} in {o.flag} to {show_positions(ids_fix)}, or remove "
                    f"{o.ids_key.split('.')[0]} from {o.flag} so specctl's overlay decides the ids"
                    if o is not None and r.origin == "override"
                    else f"remove drafter.layer_ids so specctl writes an overlay with ids {show_positions(ids_fix)}"
                    if r.origin == "profile"
                    else f"set drafter.layer_ids: {show_positions(ids_fix)}"
                )
                if ids_fix is not None
                else "retrain the drafter or change the engine version"
            )
            made = (
                "fail at start-up (below)"
                if outcome.error
                else f"capture the outputs of layers {show_layers(layers_of(captured))} "
                f"(positions {show_positions(captured)})"
            )
            yield _f(
                "capture-mismatch",
                E,
                f"ids {shown_ids} make {where} {made}, but the drafter was trained on {show_layers(layers_of(needed))} "
                f"(positions {show_positions(needed)})",
                fix,
                _ids_field(r),
                **common,
            )
        elif r.overlay and r.origin == "overlay":
            config_captured = list(r.config_outcome.captured)
            shown_config = show_positions(list(r.config_ids)) if r.config_ids is not None else "none (engine default)"
            yield _f(
                "capture-overlay",
                W,
                f"the drafter config's ids {shown_config} make {where} capture the outputs of layers "
                f"{show_layers(layers_of(config_captured))}; render writes an overlay with ids {shown_ids} "
                f"so it captures {show_layers(layers_of(needed))}",
                "nothing to do: deploy uses the overlay; to drop it, publish the drafter with these ids",
                "drafter.model",
                config_ids=list(r.config_ids) if r.config_ids is not None else None,
                config_captured_layers=layers_of(config_captured),
                **common,
            )
        elif r.origin == "engine-default":
            yield _f(
                "capture-default",
                INFO,
                f"the drafter config has no ids; {where} captures its default, the outputs of "
                f"{show_layers(layers_of(captured))}, which matches the manifest",
                "write the ids into the drafter config so no engine default is relied on",
                "drafter.model",
                **common,
            )
    twice = _duplicates(served)
    for position, reason in outcome.dropped:
        if reason.startswith("requested twice"):
            continue  # named below, with the id that repeats
        yield _f(
            "capture-out-of-range",
            E,
            f"{where} silently does not capture position {position}: {reason}",
            "use ids inside the target's layers; the drafter then gets fewer features than it was trained on",
            _ids_field(r),
            position=position,
            reason=reason,
            ids=list(served or []),
        )
    if twice:
        outcome_text = (
            f"fails at start-up: {outcome.error}"
            if outcome.error
            else "captures that layer once, so the drafter gets one block of features fewer than it has ids"
        )
        yield _f(
            "capture-duplicate",
            E,
            f"ids {shown_ids} name {show_positions(twice)} twice: {where} {outcome_text}",
            "list each id once, as many ids as the layers the drafter was trained on (the manifest's capture.layers)",
            _ids_field(r),
            duplicates=twice,
            ids=list(served or []),
        )
    elif outcome.error:
        yield _f(
            "capture-out-of-range",
            E,
            f"{where} fails at start-up with ids {shown_ids}: {outcome.error}",
            "use ids inside the target's layers",
            _ids_field(r),
            error=outcome.error,
            ids=list(served or []),
        )


def _ids_field(r: CaptureResolution) -> str:
    """The profile field that decides the served ids."""
    return {"profile": "drafter.layer_ids", "override": "engine.args"}.get(r.origin, "drafter.model")


def _duplicates(ids: tuple[int, ...] | None) -> list[int]:
    seen: set[int] = set()
    twice: set[int] = set()
    for i in ids or ():
        (twice if i in seen else seen).add(i)
    return sorted(twice)


@check
def _serving(inputs: Inputs, r: CaptureResolution | None) -> Iterator[Finding]:
    """What the launch flags change on top of the setter's answer (graphs, overrides, batch splits, pipelines)."""
    p, arch = inputs.profile, inputs.architecture
    if p.drafter is None or arch is None:
        return
    n = (r.num_layers if r is not None else None) or inputs.num_layers
    if r is None or n is None:
        return
    gpu = GPUS.get(p.hardware.gpu)
    for problem in inputs.engine.serving_problems(
        p.engine.version,
        arch,
        p.speculative.algorithm,
        p.engine.args,
        r.served_outcome,
        n,
        inputs.target.config if inputs.target else {},
        gpu.compute_capability if gpu else None,
    ):
        field = "engine.version" if problem.code in ("capture-cuda-graph", "capture-union") else "engine.args"
        yield _f(problem.code, E if problem.error else W, problem.message, problem.fix, field)


@check
def _width(inputs: Inputs, r: CaptureResolution | None) -> Iterator[Finding]:
    d, hidden = inputs.drafter, inputs.hidden_size
    fc = d.fc_weight_shape if d else None
    if fc is None or len(fc) != 2:
        return
    fc_in = fc[1]
    if r is not None and hidden is not None and not r.served_outcome.error:
        n = len(r.served_outcome.captured)
        if n * hidden != fc_in:
            yield _f(
                "capture-width",
                E,
                f"the engine will feed the drafter {n} captures x {hidden} = {n * hidden} features, "
                f"but its fc.weight takes {fc_in}",
                "capture as many layers as the drafter was trained on (see the manifest)",
                "drafter.model",
                captures=n,
                hidden_size=hidden,
                fc_in_features=fc_in,
            )
    if inputs.manifest is not None and inputs.manifest.capture.width != fc_in:
        yield _f(
            "manifest-width",
            E,
            f"the manifest says capture width {inputs.manifest.capture.width}, the drafter's fc.weight takes {fc_in}",
            "fix the manifest (or it belongs to another drafter)",
            "capture.width",
            manifest_width=inputs.manifest.capture.width,
            fc_in_features=fc_in,
        )


@check
def _manifest(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    m, p = inputs.manifest, inputs.profile
    if m is None or p.drafter is None:
        return
    positions = positions_of(m.capture.layers)
    if any(b <= a for a, b in zip(positions, positions[1:], strict=False)):
        yield _f(
            "manifest-order",
            E,
            f"manifest layers {show_layers(m.capture.layers)} are not strictly ascending; "
            "the engine concatenates captures in ascending order, each once",
            "if training concatenated in this order the drafter cannot be served as is; "
            "otherwise list the layers ascending",
            "capture.layers",
            layers=list(m.capture.layers),
        )
    n = inputs.num_layers
    bad = [
        layer for layer in m.capture.layers if isinstance(layer, int) and (layer < 0 or (n is not None and layer >= n))
    ]
    if bad:
        yield _f(
            "manifest-layer-range",
            E,
            f"manifest layers {bad} do not exist in a {n}-layer target",
            "use 0-based decoder layer indices below num_hidden_layers, or `embedding`",
            "capture.layers",
            layers=bad,
            num_layers=n,
        )
    expected: dict[str, object] = {"model": p.target.model, "revision": p.target.revision}
    t = inputs.target
    if t is not None:
        expected |= {
            "architecture": t.architecture,
            "num_hidden_layers": t.num_hidden_layers,
            "hidden_size": t.hidden_size,
            "vocab_size": t.vocab_size,
        }
    differ = {
        k: {"manifest": getattr(m.target, k), "profile": v}
        for k, v in expected.items()
        if v is not None and getattr(m.target, k) != v
    }
    if differ:
        shown = "; ".join(f"{k}: manifest {d['manifest']!r} vs {d['profile']!r}" for k, d in differ.items())
        yield _f(
            "manifest-target",
            E,
            f"the drafter was trained against another target ({shown})",
            "serve it with the target it was trained on, or use a manifest for this target",
            "target",
            differences=differ,
        )
    differ = {
        k: {"manifest": getattr(m.drafter, k), "profile": getattr(p.drafter, k)}
        for k in ("model", "revision")
        if getattr(m.drafter, k) != getattr(p.drafter, k)
    }
    if differ:
        shown = "; ".join(f"{k}: manifest {d['manifest']!r} vs profile {d['profile']!r}" for k, d in differ.items())
        yield _f(
            "manifest-drafter",
            E,
            f"the manifest describes another drafter ({shown})",
            "point drafter.manifest at this drafter's manifest (specctl manifest import)",
            "drafter.manifest",
            differences=differ,
        )


@check
def _drafter_config(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    d, t, p = inputs.drafter, inputs.target, inputs.profile
    if d is None or p.drafter is None:
        return
    hidden = inputs.hidden_size
    drafter_in = d.target_hidden_size or d.hidden_size
    if hidden is not None and drafter_in is not None and drafter_in != hidden:
        key = "target_hidden_size" if d.target_hidden_size else "hidden_size (no target_hidden_size)"
        yield _f(
            "drafter-hidden",
            E,
            f"the drafter expects target hidden size {drafter_in} ({key}), the target has {hidden}",
            "use a drafter trained for this target, or set target_hidden_size in its config if only that is missing",
            "drafter.model",
            drafter=drafter_in,
            target=hidden,
        )
    if t is not None and d.vocab_size is not None and t.vocab_size is not None and d.vocab_size != t.vocab_size:
        yield _f(
            "vocab-size",
            E,
            f"drafter vocab_size {d.vocab_size} differs from the target's {t.vocab_size}",
            "use a drafter trained with this target's tokenizer",
            "drafter.model",
            drafter=d.vocab_size,
            target=t.vocab_size,
        )
    for problem in inputs.engine.drafter_problems(p.engine.version, p.speculative.algorithm, d.config):
        yield _f(problem.code, E if problem.error else W, problem.message, problem.fix, "drafter.model")
    eagle3 = "eagle3" in (d.architecture or "").lower()
    if eagle3 and not d.tie_word_embeddings and not d.has_draft_vocab_size:
        yield _f(
            "draft-vocab-key",
            E,
            "the drafter config has no draft_vocab_size key and is untied; the engine fails to load it",
            'add `"draft_vocab_size": <rows of lm_head.weight>` (or null for the full vocabulary) to its config.json',
            "drafter.model",
        )
    if d.draft_vocab_size is not None and d.d2t_length is not None and d.draft_vocab_size != d.d2t_length:
        yield _f(
            "d2t-length",
            E,
            f"draft_vocab_size {d.draft_vocab_size} differs from the d2t table's length {d.d2t_length}",
            "re-export the drafter; its config and d2t disagree",
            "drafter.model",
            draft_vocab_size=d.draft_vocab_size,
            d2t_length=d.d2t_length,
        )
    nested = d.eagle_config or {}
    if eagle3 and nested.get("use_aux_hidden_state") is False:
        yield _f(
            "aux-disabled",
            E,
            "eagle_config.use_aux_hidden_state is false: "
            "the engine captures nothing and the drafter sees only the last state",
            "set it to true for an EAGLE-3 drafter trained on captured layers",
            "drafter.model",
        )
    top = d.top_level_eagle_keys.get("eagle_aux_hidden_state_layer_ids")
    if top is not None and top != nested.get("eagle_aux_hidden_state_layer_ids"):
        yield _f(
            "ids-top-level",
            W,
            f"top-level eagle_aux_hidden_state_layer_ids {top} differs from the nested eagle_config ids "
            f"{nested.get('eagle_aux_hidden_state_layer_ids')}; the capture reads only the nested key",
            "make both agree (specctl's overlay writes both)",
            "drafter.model",
            top_level=top,
            nested=nested.get("eagle_aux_hidden_state_layer_ids"),
        )
    if eagle3 and p.speculative.algorithm != "EAGLE3":
        yield _f(
            "algorithm-drafter",
            E,
            f"{d.architecture} is an EAGLE-3 drafter served with algorithm {p.speculative.algorithm}: "
            "no layers are captured, the fc is skipped and acceptance collapses without an error",
            "set speculative.algorithm: EAGLE3",
            "speculative.algorithm",
            drafter_architecture=d.architecture,
            algorithm=p.speculative.algorithm,
        )


@check
def _parallel(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    p, t = inputs.profile, inputs.target
    tp, nodes = p.parallel.tp, p.parallel.nnodes
    gpus = nodes * p.hardware.gpus_per_node
    pp = inputs.engine.pipeline_stages(p.engine.version, p.engine.args)
    if tp * pp > gpus:
        stages = f" x pp {pp}" if pp > 1 else ""
        yield _f(
            "tp-gpus",
            E,
            f"tp {tp}{stages} needs {tp * pp} GPUs but {nodes} node(s) x {p.hardware.gpus_per_node} have {gpus}",
            "lower parallel.tp or add nodes",
            "parallel.tp",
            tp=tp,
            pp=pp,
            gpus=gpus,
        )
    if tp % nodes:
        yield _f(
            "tp-gpus",
            E,
            f"tp {tp} is not a multiple of nnodes {nodes}; the engine refuses to start",
            "make parallel.tp a multiple of parallel.nnodes",
            "parallel.tp",
            tp=tp,
            nnodes=nodes,
        )
    if (
        nodes > 1 and len(p.hosts) < nodes and len(p.hosts) != 1
    ):  # one entry: a cluster whose scheduler places every rank
        yield _f(
            "parallel-hosts",
            E,
            f"nnodes {nodes} but hosts lists {len(p.hosts)}",
            "list one host per node (the first is node rank 0), or one Slurm cluster",
            "hosts",
            nnodes=nodes,
            hosts=list(p.hosts),
        )
    if t is None:
        return
    heads, kv = t.num_attention_heads, t.num_key_value_heads
    if heads and heads % tp:
        yield _f(
            "tp-heads",
            E,
            f"tp {tp} does not divide the {heads} attention heads",
            "choose a tp that divides the head count",
            "parallel.tp",
            tp=tp,
            heads=heads,
        )
    if kv and (kv % tp if kv >= tp else tp % kv):
        yield _f(
            "tp-heads",
            E,
            f"tp {tp} and the {kv} KV heads do not shard evenly",
            "choose a tp that divides (or is a multiple of) the KV heads",
            "parallel.tp",
            tp=tp,
            kv_heads=kv,
        )


@check
def _memory(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    p, t = inputs.profile, inputs.target
    if t is None or not t.weight_bytes:
        return
    gpu = GPUS[p.hardware.gpu]
    fraction = p.engine.args.get(
        "mem-fraction-static", p.engine.args.get("mem_fraction_static", DEFAULT_MEM_FRACTION_STATIC)
    )
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        return  # flag-type reports it
    weights = t.weight_bytes + (inputs.drafter.weight_bytes if inputs.drafter and p.drafter else 0)
    pp = inputs.engine.pipeline_stages(p.engine.version, p.engine.args)  # each stage holds its share of the layers
    per_gpu_gib = weights / (p.parallel.tp * pp) / GIB
    budget_gib = gpu.memory_gib * float(fraction)
    if per_gpu_gib + KV_HEADROOM_MIN_GIB > budget_gib:
        yield _f(
            "memory",
            E,
            f"weights need {per_gpu_gib:.1f} GiB per GPU (tp {p.parallel.tp}{f' x pp {pp}' if pp > 1 else ''}) "
            f"plus {KV_HEADROOM_MIN_GIB:.0f} GiB KV headroom, "
            f"but {gpu.key} offers {gpu.memory_gib:.1f} GiB x mem_fraction_static {fraction} = {budget_gib:.1f} GiB",
            "raise parallel.tp, use a GPU with more memory, a quantized checkpoint, or raise mem-fraction-static",
            "parallel.tp",
            weights_per_gpu_gib=round(per_gpu_gib, 2),
            budget_gib=round(budget_gib, 2),
            kv_headroom_gib=KV_HEADROOM_MIN_GIB,
            mem_fraction_static=fraction,
            gpu=gpu.key,
        )


@check
def _revisions(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    p = inputs.profile
    for role, part in (("target", p.target), ("drafter", p.drafter)):
        if part is None or part.model.startswith("/"):
            continue
        if part.revision is None or not REVISION_RE.match(part.revision):
            yield _f(
                "unpinned-revision",
                W,
                f"{role} {part.model} is not pinned (revision {part.revision or 'none'}); "
                "a later deploy may serve other weights",
                "pin a 40-hex commit and drop allow_unpinned",
                f"{role}.revision",
                model=part.model,
                revision=part.revision,
            )


@check
def _speculative(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    p = inputs.profile
    if p.drafter is None:
        return
    s = p.speculative
    for rewrite in inputs.engine.speculative_rewrites(
        inputs.architecture or "", s.algorithm, s.num_steps, s.eagle_topk, s.num_draft_tokens
    ):
        if rewrite.rejected:
            yield _f(
                "spec-rejected",
                E,
                rewrite.reason,
                "set num_steps, eagle_topk and num_draft_tokens together, or none of them",
                rewrite.field,
                given=rewrite.given,
            )
        elif rewrite.given is None:
            yield _f(
                "spec-auto",
                INFO,
                f"{rewrite.reason}: {rewrite.effective}",
                "set them in the profile to make the choice explicit",
                rewrite.field,
                effective=rewrite.effective,
            )
        else:
            yield _f(
                "spec-rewrite",
                W,
                f"{rewrite.field} {rewrite.given} becomes {rewrite.effective}: {rewrite.reason}",
                f"set {rewrite.field}: {rewrite.effective} so the profile says what runs",
                rewrite.field,
                given=rewrite.given,
                effective=rewrite.effective,
            )
    if s.adaptive:
        for problem in inputs.engine.adaptive_problems(
            p.engine.version, s.algorithm, s.eagle_topk, p.engine.args, s.adaptive_config()
        ):
            yield _f(problem.code, E if problem.error else W, problem.message, problem.fix, "speculative.adaptive")


@check
def _flags(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    p = inputs.profile
    if not p.engine.args:
        return
    try:
        catalog = inputs.engine.flag_catalog(p.engine.version)
    except EngineError as exc:
        yield _f("flag-catalog-missing", W, f"{exc.message}; engine.args are not checked", exc.fix or "", "engine.args")
        return
    for problem in catalog.validate(p.engine.args, inputs.engine.reserved_flags()):
        yield _f(
            f"flag-{problem.kind}",
            E,
            problem.message,
            problem.fix,
            f"engine.args.{problem.key}",
            flag=problem.key,
            value=p.engine.args[problem.key],
        )


@check
def _probe(inputs: Inputs, _: CaptureResolution | None) -> Iterator[Finding]:
    report, p = inputs.probe, inputs.profile
    if report is None:
        return
    if report.error:
        yield _f(
            "probe-failed",
            E,
            f"probing {report.python}: {report.error}",
            "point --engine-python at the interpreter that has the engine installed",
            "engine.python",
            python=report.python,
        )
        return
    if report.version != p.engine.version:
        yield _f(
            "probe-version",
            E,
            f"{report.python} runs {p.engine.name} {report.version}, the profile says {p.engine.version}",
            f'set engine.version: "{report.version}" (and re-check) or install {p.engine.version} there',
            "engine.version",
            installed=report.version,
            profile=p.engine.version,
        )
    for d in report.disagreements:
        ids = show_positions(list(d.ids)) if d.ids is not None else "none (default)"
        table = d.table_error if d.table is None else show_positions(list(d.table))
        engine = d.engine_error if d.engine is None or d.engine_error else show_positions(list(d.engine))
        yield _f(
            "probe-disagrees",
            W,
            f"for ids {ids} specctl's table for {p.engine.name} {report.version} predicts {table}, "
            f"the installed engine gives {engine}; specctl follows the installed engine",
            "a patched engine, or a wrong table row: report it with this output",
            "engine.version",
            ids=list(d.ids) if d.ids is not None else None,
            table=list(d.table) if d.table is not None else None,
            table_error=d.table_error,
            engine=list(d.engine) if d.engine is not None else None,
            engine_error=d.engine_error,
        )
    if report.version == p.engine.version and not report.disagreements and all(a.ok for a in report.parse):
        yield _f(
            "probe-agrees",
            INFO,
            f"{p.engine.name} {report.version} at {report.python} confirms specctl's capture rule "
            f"and parses the launch flags ({report.seconds:.1f} s)",
            "nothing to do",
            "engine.python",
            python=report.python,
        )
    for answer in report.parse:
        if not answer.ok:
            yield _f(
                "probe-parse",
                E,
                f"{p.engine.name} {report.version}'s own parser rejects the launch flags: {answer.error}",
                "fix engine.args (specctl check shows which flag), or the engine version",
                "engine.args",
                error=answer.error,
            )
