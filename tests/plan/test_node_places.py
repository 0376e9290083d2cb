"""Where each node's rank and node 0's address sit in its argv: the engine records them as it renders
the argv, the plan carries them, and the pods' manifests fill in exactly those words."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specctl.constants import HEAD_ADDRESS
from specctl.engines import LaunchArgv, LaunchSpec, get_engine
from specctl.flows import static
from specctl.plan import k8s
from specctl.plan.k8s import K8sOptions
from tests.factory import Scenario, merge

SPEC = LaunchSpec(python="python3", model="m", revision=None, host="0.0.0.0", port=30000, tp=2, nnodes=2, node_rank=1,
                  dist_init_addr="n0:50000")  # fmt: skip


@pytest.mark.parametrize("engine", ["sglang", "reference"])
def test_the_engine_records_where_rank_and_address_sit(engine: str) -> None:
    argv = get_engine(engine).argv(SPEC)
    assert argv.node_rank_at is not None and argv.dist_init_at is not None
    assert argv.words[argv.node_rank_at] == "1" and argv.words[argv.dist_init_at] == "n0:50000"
    single = get_engine(engine).argv(dataclasses.replace(SPEC, nnodes=1, node_rank=0, dist_init_addr=None))
    assert (single.node_rank_at, single.dist_init_at) == (None, None)


def test_a_replaced_span_moves_the_places_after_it() -> None:
    argv = LaunchArgv(("a", "b", "--rank", "1", "--addr", "x:1"), 3, 5)
    moved = argv.replaced(0, 2, ["z"])
    assert moved.words == ("z", "--rank", "1", "--addr", "x:1") and (moved.node_rank_at, moved.dist_init_at) == (2, 4)


def _two_node_report(tmp_path: Path) -> static.CheckReport:
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, {"parallel": {"tp": 2, "nnodes": 2}, "hardware": {"gpus_per_node": 1}})
    return static.check(s.write())


def test_the_plan_carries_the_places_and_the_pods_fill_in_only_those(tmp_path: Path) -> None:
    report = _two_node_report(tmp_path)
    plan = static.plan(report, node0_address=HEAD_ADDRESS)
    for node in plan.nodes:
        assert node.rank_at is not None and node.argv[node.rank_at] == str(node.rank)
        assert node.dist_init_at is not None and node.argv[node.dist_init_at].startswith(HEAD_ADDRESS + ":")
    pods = k8s.pod_plan(report.inputs, report.resolution)
    render = k8s._Render(
        pods, report.inputs.profile, K8sOptions(image="img:1", model_mount=str(tmp_path)), None, "source"
    )
    for node, words in zip(pods.nodes, render.argvs, strict=True):
        assert words[node.rank_at or 0] == f"$({k8s.LWS_WORKER_INDEX})"
        assert words[node.dist_init_at or 0].startswith(f"$({k8s.LWS_LEADER_ADDRESS}):")
        assert words.count(f"$({k8s.LWS_WORKER_INDEX})") == 1  # `--tp-size 2`'s "2" is not a rank


def test_a_plan_without_the_places_is_refused(tmp_path: Path) -> None:
    report = _two_node_report(tmp_path)
    pods = k8s.pod_plan(report.inputs, report.resolution)
    unplaced = tuple(dataclasses.replace(n, rank_at=None) for n in pods.nodes)
    with pytest.raises(ValueError, match="rank alone"):
        k8s._Render(
            dataclasses.replace(pods, nodes=unplaced),
            report.inputs.profile,
            K8sOptions(image="img:1", model_mount=str(tmp_path)),
            None,
            "s",
        )
