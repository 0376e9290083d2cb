"""The Plan: everything needed to start the server, per node, computed without touching a host."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from specctl.constants import ADAPTIVE_FILE, ADAPTIVE_PATH, OVERLAY_PATH
from specctl.engines import LaunchSpec
from specctl.engines.capture_frame import layers_of
from specctl.plan.inputs import Inputs
from specctl.plan.resolve import CaptureResolution
from specctl.profile.profile import is_local_path


@dataclass(frozen=True)
class NodePlan:
    """One node's launch: argv and environment (secrets by name only, never by value), and where in
    the argv the engine put this node's rank and node 0's dist-init address (multi-node), so a
    platform that fills them in per node (a pod's LWS index) finds them without reading flags."""

    rank: int
    host: str | None
    argv: tuple[str, ...]
    env: dict[str, str]
    rank_at: int | None = None
    dist_init_at: int | None = None


@dataclass(frozen=True)
class OverlayPlan:
    """A drafter directory to materialise on the host: links to the drafter's files plus a rewritten config.json."""

    directory: str
    source: str
    revision: str | None
    links: tuple[str, ...]
    config: dict[str, Any]


@dataclass(frozen=True)
class Plan:
    """What `render` prints and a deploy materialises; plain data that dumps to JSON."""

    profile: str
    version: int
    sha256: str
    engine: str
    engine_version: str
    baseline: bool
    nodes: tuple[NodePlan, ...]
    overlay: OverlayPlan | None
    secrets: tuple[str, ...]
    capture: dict[str, Any] | None
    files: dict[str, Any] = field(default_factory=dict)  # JSON documents the argv names inside the release

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_plan(
    inputs: Inputs,
    resolution: CaptureResolution | None,
    *,
    baseline: bool = False,
    node0_address: str | None = None,
    staged: bool = True,
) -> Plan:
    """The launch plan of every node; `baseline` serves the same target without speculation.
    Hub checkpoints are `staged` before the launch (so it starts offline from them), unless a deploy
    leaves the download to the engine.

    Multi-node ranks meet at node 0: its resolved address when a deploy knows it, else its host name.
    """
    p = inputs.profile
    overlay = None if baseline else _overlay(inputs, resolution)
    drafter: str | None = None
    drafter_revision = None
    if p.drafter is not None and not baseline:
        drafter, drafter_revision = (OVERLAY_PATH, None) if overlay else (p.drafter.model, p.drafter.revision)
    node0 = node0_address or (p.hosts[0] if p.hosts else None)
    adaptive_config = None if baseline else p.speculative.adaptive_config()
    env = dict(p.engine.env)
    if staged and any(not is_local_path(m) for m in (p.target.model, *([drafter] if drafter else []))):
        env.setdefault(
            "HF_HUB_OFFLINE", "1"
        )  # deploy stages the Hub checkpoints first: start from them, fetch nothing else
    nodes = []
    for rank in range(p.parallel.nnodes):
        spec = LaunchSpec(
            python=p.engine.python,
            model=p.target.model,
            revision=p.target.revision,
            host=p.engine.host,
            port=p.engine.port,
            tp=p.parallel.tp,
            nnodes=p.parallel.nnodes,
            node_rank=rank,
            dist_init_addr=f"{node0}:{p.parallel.dist_init_port}" if p.parallel.nnodes > 1 and node0 else None,
            drafter=drafter,
            drafter_revision=drafter_revision,
            algorithm=p.speculative.algorithm,
            num_steps=p.speculative.num_steps,
            eagle_topk=p.speculative.eagle_topk,
            num_draft_tokens=p.speculative.num_draft_tokens,
            engine_version=p.engine.version,
            adaptive=bool(p.speculative.adaptive) and not baseline,
            adaptive_config=ADAPTIVE_PATH if adaptive_config is not None else None,
            metrics=p.engine.metrics and not ({"enable-metrics", "enable_metrics"} & set(p.engine.args)),
        )
        launch = inputs.engine.argv(spec)
        argv = [*launch.words]
        if p.engine.args:
            argv += inputs.engine.launch_args(p.engine.version, p.engine.args)
        host = p.hosts[rank] if rank < len(p.hosts) else None
        nodes.append(NodePlan(rank, host, tuple(argv), dict(env), launch.node_rank_at, launch.dist_init_at))
    return Plan(
        p.metadata.name,
        p.metadata.version,
        inputs.profile_sha256,
        p.engine.name,
        p.engine.version,
        baseline,
        tuple(nodes),
        overlay,
        tuple(p.secrets),
        None if baseline else _capture_summary(resolution),
        {ADAPTIVE_FILE: adaptive_config} if adaptive_config is not None else {},
    )


def _overlay(inputs: Inputs, r: CaptureResolution | None) -> OverlayPlan | None:
    p, d = inputs.profile, inputs.drafter
    if r is None or not r.overlay or p.drafter is None or d is None or r.served_ids is None:
        return None
    config = inputs.engine.with_drafter_ids(d.config, r.served_ids)
    links = tuple(f for f in d.files if f != "config.json")
    return OverlayPlan(OVERLAY_PATH, p.drafter.model, p.drafter.revision, links, config)


def _capture_summary(r: CaptureResolution | None) -> dict[str, Any] | None:
    if r is None:
        return None
    captured = list(r.served_outcome.captured)
    return {
        "ids": list(r.served_ids) if r.served_ids is not None else None,
        "origin": r.origin,
        "positions": captured,
        "layers": layers_of(captured),
        "needed_layers": layers_of(list(r.needed)) if r.needed is not None else None,
        "matches": r.matches,
    }
