"""Kubernetes manifests: every example validates against the Kubernetes schemas and the LeaderWorkerSet
CRD, runs the plan's argv with exactly the documented rewrites, and carries secrets by name only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_validate import utils as kv
from referencing import Registry, Resource

from specctl.constants import OVERLAY_PATH, STARTUP_BUDGET_S
from specctl.engines import get_engine
from specctl.errors import InputError
from specctl.flows import static
from specctl.plan import k8s
from specctl.plan.inputs import Inputs
from specctl.plan.k8s import K8sOptions, PodProgram
from specctl.plan.plan import NodePlan, build_plan
from specctl.profile import Profile
from tests.factory import Scenario, merge

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
LWS_SCHEMA = ROOT / "tests" / "data" / "k8s" / "leaderworkerset-v1.schema.yaml"
IMAGE = "registry.example/sglang:test"
STAGE = PodProgram("print('stage')\n", '{"checkpoints": []}', {"HF_HUB_OFFLINE": "0"})

# --- validators ---------------------------------------------------------------------------------------

K8S_VERSION = kv.latest_version()  # the newest Kubernetes whose schemas kubernetes-validate bundles


@cache
def _k8s_validator(ref: str) -> jsonschema.protocols.Validator:
    """A validator for one definition of the bundled strict Kubernetes schemas (unknown fields are errors)."""
    defs = kv.schema_contents(f"kubernetes-json-schema/v{K8S_VERSION}-local-strict/_definitions.json", K8S_VERSION)
    registry: Registry[Any] = Resource.from_contents(defs) @ Registry()
    return jsonschema.Draft202012Validator({"$ref": f"{defs['$id']}#/$defs/{ref}"}, registry=registry)


def _strict(schema: Any) -> Any:
    """The CRD schema as `kubectl apply` (server-side field validation, strict by default) reads it:
    an object with listed properties and no `x-kubernetes-preserve-unknown-fields` takes no others."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def _lws_validator() -> jsonschema.protocols.Validator:
    schema = yaml.load(LWS_SCHEMA.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return jsonschema.Draft7Validator(_strict(schema))


def validate(obj: Mapping[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless the object is one the API server would take as written."""
    if obj["kind"] == "LeaderWorkerSet":
        _lws_validator().validate(obj)
        # the CRD leaves metadata open and the templates loose: Kubernetes' own schemas judge them
        _k8s_validator("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta").validate(obj["metadata"])
        template = obj["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            _k8s_validator("io.k8s.api.core.v1.PodTemplateSpec").validate(template[key])
            _pod_rules(template[key]["spec"])
    else:
        kubernetes_validate.validate(dict(obj), K8S_VERSION, strict=True)
        if obj["kind"] == "Deployment":
            spec = obj["spec"]
            assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
            _pod_rules(spec["template"]["spec"])


def _pod_rules(pod: Mapping[str, Any]) -> None:
    """What the API server checks beyond the schema: unique names, mounts that name a volume."""
    volumes = [v["name"] for v in pod["volumes"]]
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    assert len(set(volumes)) == len(volumes) and len({c["name"] for c in containers}) == len(containers)
    for c in containers:
        assert {m["name"] for m in c["volumeMounts"]} <= set(volumes)
        names = [e["name"] for e in c["env"]]
        assert len(set(names)) == len(names)


# --- Kubernetes' $(VAR) expansion, as in k8s.io/kubernetes third_party/forked/golang/expansion ------------


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$(NAME)` becomes env[NAME] when defined (else stays), `$$` becomes `$`, any other `$` stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env.get(name, f"$({name})"))
                    i = end + 1
                    continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def test_the_expansion_model_follows_kubernetes() -> None:
    env = {"A": "x"}
    assert expand("$(A)", env) == "x" and expand("$$(A)", env) == "$(A)" and expand("$(B)", env) == "$(B)"
    assert expand("a$b$", env) == "a$b$" and expand("$$$(A)", env) == "$x" and expand("$(A", env) == "$(A"


# --- rendering ----------------------------------------------------------------------------------------


def objects(path: Path, *, baseline: bool = False, **options: Any) -> list[dict[str, Any]]:
    report = static.check(path, offline=True)
    return k8s.manifests(
        report.inputs,
        report.resolution,
        K8sOptions(image=IMAGE, **options),
        baseline=baseline,
        stage=STAGE,
        materialise=k8s.MATERIALISE_SCRIPT.read_text(),
    )


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objs}


def pods(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pod templates: the Deployment's, or the leader's and the workers'."""
    kinds = by_kind(objs)
    if "Deployment" in kinds:
        return [kinds["Deployment"]["spec"]["template"]]
    template = kinds["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    return [template["leaderTemplate"], template["workerTemplate"]]


def server(pod: Mapping[str, Any]) -> dict[str, Any]:
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == "server"]
    return container


def two_nodes(example: Path, tmp_path: Path, **engine: Any) -> Path:
    """The example on two nodes, TP spanning them."""
    data = yaml.safe_load(example.read_text())
    base = yaml.safe_load((example.parent / data["extends"]).read_text()) if "extends" in data else data
    per_node = max(1, base.get("parallel", {}).get("tp", 1) // 2)
    variant: dict[str, Any] = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "extends": str(example),
        "metadata": {"name": f"{data['metadata']['name']}-2n", "version": data["metadata"]["version"]},
        "parallel": {"tp": 2 * per_node, "nnodes": 2},
        "hardware": {"gpu": base["hardware"]["gpu"], "gpus_per_node": per_node},
        "hosts": ["node-a", "node-b"],
    }
    if engine:
        variant["engine"] = {"name": base["engine"]["name"], "version": base["engine"]["version"], **engine}
    path = tmp_path / f"{example.stem}-2n.yaml"
    path.write_text(yaml.safe_dump(variant))
    return path


@pytest.mark.parametrize("example", PROFILES, ids=[p.stem for p in PROFILES])
@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("baseline", [False, True], ids=["speculative", "baseline"])
def test_every_example_validates(example: Path, nodes: int, baseline: bool, hub_env: Path, tmp_path: Path) -> None:
    path = example if nodes == 1 else two_nodes(example, tmp_path)
    objs = objects(path, baseline=baseline, namespace="llm")
    assert [o["kind"] for o in objs][-2:] == ["Deployment" if nodes == 1 else "LeaderWorkerSet", "Service"]
    for obj in objs:
        validate(obj)
    if nodes == 2:
        assert by_kind(objs)["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["size"] == 2
    # what `render` prints reads back as the same objects
    assert list(yaml.safe_load_all(k8s.render_yaml(objs, "a header"))) == objs
    assert json.loads(k8s.render_json(objs)) == objs


def test_a_misspelled_or_mistyped_field_fails_validation(hub_env: Path, tmp_path: Path) -> None:
    """The validators are live: each catches a mistake the API server would refuse."""
    deployment = by_kind(objects(PROFILES[-1]))["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(jsonschema.ValidationError, match="readinesProbe"):
        validate(deployment)
    lws = by_kind(objects(two_nodes(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", tmp_path)))["LeaderWorkerSet"]
    for path, value in (
        (("spec", "leaderWorkerTemplate", "sise"), 2),
        (("spec", "leaderWorkerTemplate", "size"), "2"),
        (("spec", "startupPolicy"), "LeaderStarted"),
        (("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0, "resource"), {}),
    ):
        broken = json.loads(json.dumps(lws))
        *parents, last = path
        node = broken
        for key in parents:
            node = node[key]
        node[last] = value
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


def _expected(argv: tuple[str, ...], python: str, *, leader_port: int | None) -> list[str]:
    """A node's argv with the documented rewrites, spelled with sglang's flags (as pods run it, unexpanded)."""
    out = ["/specctl/release/drafter-overlay" if w == OVERLAY_PATH else w.replace("$", "$$") for w in argv]
    out[0] = python
    for i, word in enumerate(argv[:-1]):
        value = {
            "--host": "0.0.0.0",
            "--node-rank": "$(LWS_WORKER_INDEX)",
            "--dist-init-addr": f"$(LWS_LEADER_ADDRESS):{leader_port}",
        }.get(word)
        if value is not None:
            out[i + 1] = value
    return out


def test_the_pods_run_the_plans_argv_with_exactly_the_documented_rewrites(hub_env: Path, tmp_path: Path) -> None:
    path = two_nodes(
        ROOT / "profiles" / "kimi-k2.5-tp8.yaml",
        tmp_path,
        host="127.0.0.1",
        port=31000,
        args={"served-model-name": "kimi$(HOME)$$", "trust-remote-code": True},
    )
    report = static.check(path, offline=True)
    plan = static.plan(report)  # what a deploy over SSH runs
    objs = objects(path)
    leader, worker = pods(objs)
    for pod, node in ((leader, plan.nodes[0]), (worker, plan.nodes[1])):
        command = server(pod)["command"]
        assert command == _expected(node.argv, "python3", leader_port=50000)
        # and what the container really gets, once Kubernetes has expanded it in that pod
        lws_env = {"LWS_WORKER_INDEX": str(node.rank), "LWS_LEADER_ADDRESS": "kimi.x.llm", "HOME": "/root"}
        real = [expand(w, lws_env) for w in command]
        assert real[real.index("--served-model-name") + 1] == "kimi$(HOME)$$"
        assert real[real.index("--node-rank") + 1] == str(node.rank)
        assert real[real.index("--dist-init-addr") + 1] == "kimi.x.llm:50000"
    notes = by_kind(objs)["LeaderWorkerSet"]["metadata"]["annotations"]
    rewrites = json.loads(notes["specctl/rewrites"])
    assert len(rewrites) == 4 and rewrites[1].startswith("engine.host 127.0.0.1 -> 0.0.0.0")
    assert [p["containerPort"] for p in server(leader)["ports"]] == [31000, 50000] and "ports" not in server(worker)
    service = by_kind(objs)["Service"]
    assert service["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": "kimi-k2-5-tp8-2n",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    assert service["spec"]["ports"][0]["port"] == 31000


TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env_value=TEXT, arg_value=TEXT, model=TEXT.filter(lambda m: not m.startswith("/")))
def test_no_profile_string_is_expanded_by_kubernetes(env_value: str, arg_value: str, model: str) -> None:
    data: dict[str, Any] = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "metadata": {"name": "x", "version": 1},
        "target": {"model": model, "revision": "a" * 40},
        "parallel": {"tp": 2, "nnodes": 2},
        "hardware": {"gpu": "h100", "gpus_per_node": 1},
        "engine": {
            "name": "sglang",
            "version": "0.5.23",
            "env": {"SOME_VAR": env_value},
            "args": {"served-model-name": arg_value},
        },
        "hosts": ["a", "b"],
    }
    inputs = Inputs(Profile.model_validate(data), "p.yaml", "0" * 64, get_engine("sglang"))
    objs = k8s.manifests(inputs, None, K8sOptions(image=IMAGE), stage=STAGE)
    plan = build_plan(inputs, None, node0_address="leader.ns")
    for pod, node in zip(pods(objs), plan.nodes, strict=True):
        container = server(pod)
        lws_env = {
            "LWS_WORKER_INDEX": str(node.rank),
            "LWS_LEADER_ADDRESS": "leader.ns",
            "SOME_VAR": "x",
            "HOME": "/root",
        }
        assert [expand(w, lws_env) for w in container["command"]][1:] == list(node.argv)[1:]
        [some] = [e for e in container["env"] if e["name"] == "SOME_VAR"]
        assert expand(some["value"], lws_env) == env_value


CONTROL_TEXT = st.text(
    st.one_of(
        st.characters(whitelist_categories=("Cc", "Cf", "Zl", "Zp"), blacklist_characters="\x00"),
        st.sampled_from(["\n", "\t", "'", '"', "$", "\\", "#", ":", "-", " ", "é", "|"]),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(value=CONTROL_TEXT)
def test_the_yaml_shows_only_ascii_and_reads_back_exactly(value: str) -> None:
    data: dict[str, Any] = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "metadata": {"name": "x", "version": 1, "description": value},
        "target": {"model": "org/model", "revision": "a" * 40},
        "hardware": {"gpu": "h100", "gpus_per_node": 1},
        "engine": {
            "name": "sglang",
            "version": "0.5.23",
            "env": {"SOME_VAR": value},
            "args": {"served-model-name": value},
        },
    }
    objs = k8s.manifests(
        Inputs(Profile.model_validate(data), "p.yaml", "0" * 64, get_engine("sglang")),
        None,
        K8sOptions(image=IMAGE),
        stage=STAGE,
    )
    text = k8s.render_yaml(objs, "header")
    assert text.isascii() and all(c.isprintable() or c == "\n" for c in text)
    assert list(yaml.safe_load_all(text)) == objs


def test_secrets_are_referenced_never_valued(hub_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_this_value_must_never_be_written")
    objs = objects(two_nodes(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", tmp_path), secret_name="hub-token")
    text = k8s.render_yaml(objs) + k8s.render_json(objs)
    assert "hf_this_value_must_never_be_written" not in text
    for pod in pods(objs):
        for container in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
            tokens = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
            # the stage step downloads with the token, the server may need it; materialise reads the cache only
            assert tokens == (
                []
                if container["name"] == "materialise"
                else [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "HF_TOKEN"}}}]
            )


def test_gpus_shared_memory_and_probes(hub_env: Path, tmp_path: Path) -> None:
    [pod] = pods(objects(ROOT / "profiles" / "kimi-k2.5-tp8.yaml"))
    container = server(pod)
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["spec"]["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health_generate", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    startup = container["startupProbe"]
    assert (
        startup["httpGet"]["path"] == "/health"
        and startup["periodSeconds"] * startup["failureThreshold"] >= STARTUP_BUDGET_S
    )
    leader, worker = pods(objects(two_nodes(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", tmp_path)))
    assert server(worker)["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert not {"readinessProbe", "livenessProbe", "startupProbe"} & set(server(worker))  # other ranks serve no HTTP


def test_a_cpu_profile_requests_no_gpu(hub_env: Path, tmp_path: Path) -> None:
    """`gpu: cpu` (the reference engine's rehearsals) runs on any node: no GPU resource, so no GPU node."""
    example = ROOT / "profiles" / "llama-3.1-8b-b200.yaml"
    cpu = tmp_path / "cpu.yaml"
    cpu.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": str(example),
                "metadata": {"name": "llama-cpu", "version": 1},
                "hardware": {"gpu": "cpu", "gpus_per_node": 1},
            }
        )
    )
    objs = objects(cpu)
    for obj in objs:
        validate(obj)
    [pod] = pods(objs)
    assert "nvidia.com/gpu" not in json.dumps(objs)
    assert "resources" not in server(pod)
    assert not {"nodeSelector", "tolerations", "affinity"} & set(pod["spec"])


def test_the_contract_is_on_every_object(hub_env: Path) -> None:
    objs = objects(ROOT / "profiles" / "kimi-k2.5-tp8.yaml")
    plan = static.plan(static.check(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", offline=True))
    for obj in [*objs, *pods(objs)]:
        notes = obj["metadata"]["annotations"]
        assert notes["specctl/profile"] == "kimi-k2.5-tp8" and notes["specctl/profile-version"] == "3"
        assert notes["specctl/profile-sha256"] == plan.sha256 and notes["specctl/engine"] == "sglang 0.5.23"
        assert json.loads(notes["specctl/capture-layers"]) == [2, 30, 58] and json.loads(
            notes["specctl/capture-ids"]
        ) == [3, 31, 59]
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "kimi-k2-5-tp8"
    [pod] = pods(objs)
    assert (
        pod["metadata"]["labels"]["specctl/profile-version"] == "3"
        and "specctl/files-sha256" in pod["metadata"]["annotations"]
    )
    baseline = objects(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", baseline=True)
    assert by_kind(baseline)["Deployment"]["metadata"]["name"] == "kimi-k2-5-tp8-baseline"
    assert "specctl/capture-layers" not in by_kind(baseline)["Deployment"]["metadata"]["annotations"]
    assert "ConfigMap" not in by_kind(baseline) or "materialise.py" not in by_kind(baseline)["ConfigMap"]["data"]


def test_the_overlay_and_files_come_from_the_configmap(tmp_path: Path) -> None:
    s = Scenario(tmp_path)  # a local drafter trained on other layers than its config says, with adaptive tiers
    s.manifest = merge(s.manifest, {"capture": {"layers": [2, 16, 29]}})
    s.profile = merge(s.profile, {"speculative": {"adaptive": {1: {"candidate_steps": [1, 3]}}}})
    path = s.write()
    report = static.check(path, offline=True)
    plan = static.plan(report)
    objs = k8s.manifests(
        report.inputs,
        report.resolution,
        K8sOptions(image=IMAGE, model_mount=str(tmp_path)),
        materialise=k8s.MATERIALISE_SCRIPT.read_text(),
    )
    data = by_kind(objs)["ConfigMap"]["data"]
    assert plan.overlay is not None and json.loads(data["drafter-config.json"]) == plan.overlay.config
    assert json.loads(data["speculative-adaptive.json"]) == plan.files["speculative-adaptive.json"]
    [pod] = pods(objs)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["materialise"]  # local checkpoints: nothing to stage
    command = server(pod)["command"]
    assert command[command.index("--speculative-adaptive-config") + 1] == "/specctl/release/speculative-adaptive.json"


def _run_materialise(
    objs: list[dict[str, Any]], pod_root: Path, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run the materialise init container as the pod would, with /specctl/ moved under `pod_root`."""
    config = pod_root / "config"
    config.mkdir(parents=True, exist_ok=True)
    for name, text in by_kind(objs)["ConfigMap"]["data"].items():
        (config / name).write_text(text)
    [init] = [c for c in pods(objs)[0]["spec"]["initContainers"] if c["name"] == "materialise"]
    python, script, argument = init["command"]
    assert script == "/specctl/config/materialise.py"
    argument = expand(argument, {}).replace("/specctl/", f"{pod_root}/")
    return subprocess.run(
        [sys.executable, str(config / "materialise.py"), argument],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )


def test_materialise_lays_out_the_overlay_from_the_staged_drafter(hub_env: Path, tmp_path: Path) -> None:
    objs = objects(ROOT / "profiles" / "kimi-k2.5-tp8.yaml")
    plan = static.plan(static.check(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", offline=True))
    assert plan.overlay is not None
    for _attempt in (1, 2):  # a restarted init container ends in the same state
        result = _run_materialise(objs, tmp_path / "pod", {"HF_HUB_CACHE": str(hub_env), "HF_HUB_OFFLINE": "1"})
        assert result.returncode == 0, result.stderr
    overlay = tmp_path / "pod" / "release" / "drafter-overlay"
    assert json.loads((overlay / "config.json").read_text()) == plan.overlay.config
    for name in plan.overlay.links:
        link = overlay / name
        assert link.is_symlink() and str(hub_env) in os.readlink(link) and link.resolve().is_file()


def test_materialise_says_what_is_missing(hub_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = objects(ROOT / "profiles" / "kimi-k2.5-tp8.yaml")
    result = _run_materialise(
        objs, tmp_path / "pod", {"HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HUB_OFFLINE": "1"}
    )
    assert (
        result.returncode == 1
        and "AQ-MedAI/Kimi-K25-eagle3@" in result.stderr
        and "the stage init container" in result.stderr
    )


@pytest.mark.parametrize(
    ("profile_name", "baseline", "name"),
    [
        ("kimi-k2.5-tp8", False, "kimi-k2-5-tp8"),
        ("kimi-k2.5-tp8", True, "kimi-k2-5-tp8-baseline"),
        ("7b_chat", False, "specctl-7b-chat"),
        ("a" * 100, True, f"{'a' * 24}-{__import__('hashlib').sha256(b'a' * 100).hexdigest()[:6]}-baseline"),
    ],
)
def test_names_are_dns_labels_short_enough_for_lws(profile_name: str, baseline: bool, name: str) -> None:
    assert k8s.resource_name(profile_name, baseline) == name and len(name) <= k8s.MAX_NAME_CHARS


@pytest.mark.parametrize(
    "options",
    [
        {"name": "Kimi"},
        {"name": "x" * 41},
        {"namespace": "a.b"},
        {"secret_name": "Bad_Name"},
        {"model_pvc": "-x"},
        {"model_mount": "models"},
    ],
)
def test_names_kubernetes_would_refuse_are_input_errors(options: dict[str, Any], hub_env: Path) -> None:
    with pytest.raises(InputError):
        objects(ROOT / "profiles" / "qwen3-8b-rtx.yaml", **options)


def test_a_host_path_outside_the_model_volume_is_refused(tmp_path: Path) -> None:
    path = Scenario(tmp_path).write()
    with pytest.raises(InputError, match="is a path on the host"):
        objects(path)
    objs = objects(path, model_pvc="models", model_mount=str(tmp_path))
    [pod] = pods(objs)
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "models"}} in pod["spec"]["volumes"]
    assert {"name": "HF_HOME", "value": f"{tmp_path}/huggingface"} in server(pod)["env"]
    assert str(tmp_path / "target") in json.loads(
        by_kind(objs)["Deployment"]["metadata"]["annotations"]["specctl/local-paths"]
    )


def test_render_is_deterministic(hub_env: Path, tmp_path: Path) -> None:
    path = two_nodes(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", tmp_path)
    assert k8s.render_yaml(objects(path)) == k8s.render_yaml(objects(path))


def test_nodes_that_differ_beyond_their_rank_are_refused(hub_env: Path, tmp_path: Path) -> None:
    report = static.check(two_nodes(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", tmp_path), offline=True)
    plan = k8s.pod_plan(report.inputs, report.resolution)
    odd = NodePlan(1, None, (*plan.nodes[1].argv[:-1], "other"), plan.nodes[1].env)
    render: Callable[..., Any] = k8s._Render
    with pytest.raises(ValueError, match="rank alone"):
        render(
            plan.__class__(**{**plan.__dict__, "nodes": (plan.nodes[0], odd)}),
            report.inputs.profile,
            K8sOptions(image=IMAGE),
            STAGE,
            "source",
        )
