"""`specctl render --platform k8s` (once `--target k8s`) end to end: YAML and JSON on stdout, the same refusals as the
launch scripts, the engine's published image by default, and no secret value anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.release.staging import _SCRIPT as STAGE_SCRIPT
from tests.factory import Scenario, merge

ROOT = Path(__file__).resolve().parents[2]
KIMI = str(ROOT / "profiles" / "kimi-k2.5-tp8.yaml")
BROKEN = str(ROOT / "profiles" / "kimi-k2.5-tp8-broken.yaml")


def test_yaml_and_json_carry_the_same_objects(cli: Any, hub_env: Path) -> None:
    text = cli("render", KIMI, "--platform", "k8s")
    assert text.code == 0, text.stderr
    assert text.stdout.startswith("# specctl render --platform k8s: profile kimi-k2.5-tp8 v3 (speculative), sha256 ")
    assert "# secrets HF_TOKEN come from the Secret kimi-k2-5-tp8-secrets" in text.stdout
    objects = list(yaml.safe_load_all(text.stdout))
    assert [o["kind"] for o in objects] == ["ConfigMap", "Deployment", "Service"]
    assert cli("render", KIMI, "--target", "k8s", "--json").json() == objects
    assert cli("--json", "render", KIMI, "--target", "k8s").json() == objects
    pod = objects[1]["spec"]["template"]["spec"]
    assert (
        pod["containers"][0]["image"] == "lmsysorg/sglang:v0.5.23"
    )  # the engine's own image for the profile's version
    # the stage init container runs the program a deploy runs on a host, from the ConfigMap
    assert objects[0]["data"]["stage.py"] == STAGE_SCRIPT
    assert [c["name"] for c in pod["initContainers"]] == ["stage", "materialise"]
    stage = json.loads(pod["initContainers"][0]["command"][2])
    assert stage["mode"] == "fetch" and stage["root"] == "/specctl/models/specctl"
    assert [c["repo"] for c in stage["checkpoints"]] == ["moonshotai/Kimi-K2.5", "AQ-MedAI/Kimi-K25-eagle3"]


def test_options_reach_the_objects(cli: Any, hub_env: Path) -> None:
    result = cli(
        "render",
        KIMI,
        "--target",
        "k8s",
        "--json",
        "--image",
        "my.registry/sglang:0.5.23-cu130",
        "--name",
        "kimi",
        "-n",
        "llm",
        "--secret-name",
        "hub",
        "--model-pvc",
        "weights",
        "--model-mount",
        "/models",
        "--image-python",
        "/usr/bin/python3",
    )
    assert result.code == 0, result.stderr
    configmap, deployment, service = result.json()
    assert {o["metadata"]["namespace"] for o in (configmap, deployment, service)} == {"llm"}
    assert (configmap["metadata"]["name"], deployment["metadata"]["name"], service["metadata"]["name"]) == (
        "kimi-files",
        "kimi",
        "kimi-api",
    )
    pod = deployment["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert server["image"] == "my.registry/sglang:0.5.23-cu130" and server["command"][0] == "/usr/bin/python3"
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "weights"}} in pod["volumes"]
    assert {"name": "HF_HOME", "value": "/models/huggingface"} in server["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "HF_TOKEN"}}} in server["env"]


def test_a_secret_value_is_never_printed(cli: Any, hub_env: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_never_printed_0123456789")
    for args in (["--target", "k8s"], ["--target", "k8s", "--json"], ["--target", "k8s", "--baseline"]):
        result = cli("render", KIMI, *args)
        assert result.code == 0 and "hf_never_printed" not in result.stdout + result.stderr


def test_check_errors_refuse_unless_forced(cli: Any, hub_env: Path) -> None:
    refused = cli("render", BROKEN, "--target", "k8s")
    assert refused.code == 1 and refused.stdout == "" and "capture-mismatch" in refused.stderr
    forced = cli("render", BROKEN, "--target", "k8s", "--force", "--json")
    assert forced.code == 0, forced.stderr
    configmap, deployment, _ = forced.json()
    # what the profile says is served, and the annotation shows what it captures: nothing the drafter was trained on
    assert json.loads(configmap["data"]["drafter-config.json"])["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [
        -1,
        2,
        30,
    ]
    assert deployment["metadata"]["annotations"]["specctl/capture-ids"] == "[-1, 2, 30]"


def test_launch_script_options_are_usage_errors_with_k8s(cli: Any, hub_env: Path) -> None:
    for args in (["--node", "0"], ["--format", "json"]):
        result = cli("render", KIMI, "--target", "k8s", *args)
        assert result.code == 2 and "--platform k8s renders every node" in result.stderr
    assert cli("render", KIMI, "--target", "helm").code == 2
    bad = cli("render", KIMI, "--target", "k8s", "--name", "Kimi")
    assert bad.code == 2 and "--name 'Kimi' is not a name Kubernetes accepts" in bad.stderr


def test_an_engine_without_a_published_image_needs_one(cli: Any, tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, {"engine": {"name": "reference"}})
    path = str(s.write())
    result = cli("render", path, "--target", "k8s", "--model-mount", str(tmp_path))
    assert result.code == 2 and "publishes no container image" in result.stderr and "--image" in result.stderr
    ok = cli("render", path, "--target", "k8s", "--model-mount", str(tmp_path), "--image", "specctl-reference:dev")
    assert ok.code == 0, ok.stderr


def test_a_multi_node_profile_needs_no_hosts_on_kubernetes(cli: Any, tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, {"parallel": {"tp": 8, "nnodes": 2}, "hardware": {"gpus_per_node": 4}})
    s.profile["hosts"] = []
    path = str(s.write())
    assert cli("render", path).code == 1  # launch scripts need a host per node rank (or one cluster)
    result = cli("render", path, "--target", "k8s", "--json", "--image", "img:1", "--model-mount", str(tmp_path))
    assert result.code == 0, result.stderr
    assert [o["kind"] for o in result.json()] == ["LeaderWorkerSet", "Service"]  # local checkpoints: nothing to stage


def test_a_kubernetes_inventory_entry_supplies_the_options_and_flags_override_it(
    cli: Any, hub_env: Path, tmp_path: Path
) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Inventory",
                "clusters": {
                    "gke": {
                        "kind": "kubernetes",
                        "namespace": "llm",
                        "image": "my.registry/sglang:1",
                        "model_pvc": "weights",
                    }
                },
            }
        )
    )
    result = cli(
        "render", KIMI, "--target", "k8s", "--json", "--cluster", "gke", "--inventory", str(inventory), "-n", "other"
    )
    assert result.code == 0, result.stderr
    _, deployment, _ = result.json()
    assert deployment["metadata"]["namespace"] == "other"  # the flag wins
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "my.registry/sglang:1"
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "weights"}} in pod["volumes"]
    missing = cli("render", KIMI, "--target", "k8s", "--cluster", "eks", "--inventory", str(inventory))
    assert missing.code == 2 and "no `kind: kubernetes` cluster 'eks'" in missing.stderr
    # deploy does not apply objects yet: it says how to
    deploy = cli("deploy", KIMI, "--hosts", "gke", "--inventory", str(inventory), "--skip-check")
    assert deploy.code == 2 and "render PROFILE --platform k8s --cluster gke" in deploy.stderr, deploy.stderr


def test_target_is_the_hidden_old_name_of_platform(cli: Any, hub_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new, old = cli("render", KIMI, "--platform", "k8s"), cli("render", KIMI, "--target", "k8s")
    assert new.code == old.code == 0 and new.stdout == old.stdout, old.stderr
    assert "--target is the old name of --platform" in old.stderr and "--target" not in new.stderr
    assert cli("render", KIMI, "--target", "k8s", "--platform", "k8s").code == 0
    both = cli("render", KIMI, "--target", "k8s", "--platform", "sh")  # sh is the default: the old name decides
    assert both.code == 0 and both.stdout == new.stdout
    assert cli("render", KIMI, "--target", "sh", "--platform", "k8s").code == 2
    capsys.readouterr()
    assert cli("render", "--help").code == 0
    shown = capsys.readouterr().out  # help goes straight to the terminal
    assert "--platform" in shown and "--target" not in shown
