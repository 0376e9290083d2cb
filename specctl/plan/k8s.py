"""Kubernetes manifests for a Plan: what `specctl render --platform k8s` prints. Pure: data in, dicts out.

One node is a Deployment, several are a LeaderWorkerSet (LWS) of one group of `parallel.nnodes`
pods; either comes with a Service on `engine.port` and, when the release directory has files, a
ConfigMap. The pods run the plan's argv and environment with only these words changed, each listed
in the `specctl/rewrites` annotation:

- argv[0], the host's interpreter (`engine.python`), becomes the image's (`python3` unless told);
- `engine.host`, unless a wildcard, becomes 0.0.0.0: probes and the Service reach a pod on its own address;
- the node rank becomes `$(LWS_WORKER_INDEX)` and node 0's address `$(LWS_LEADER_ADDRESS)`, which
  LWS sets in every container of the group (`AddLWSVariables` in kubernetes-sigs/lws pkg/utils/pod);
- `${SPECCTL_RELEASE_DIR}/...` words point into the pod's release directory, an emptyDir;
- every other `$` is doubled, so Kubernetes' `$(VAR)` expansion hands the value over as written.

Two init containers do what a deploy does on a host before the start: `stage` puts the Hub
checkpoints into the Hugging Face cache on the model volume (so the server starts offline, as the
plan's environment says), and `materialise` lays out the release directory (the drafter overlay's
links and config.json, the adaptive tiers). Their programs travel in the ConfigMap.

Secrets are referenced by name from one Kubernetes Secret, never valued. Everything is built in a
fixed order and rendered with sorted keys, so two renders of one profile diff cleanly.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from specctl.constants import (
    ADAPTIVE_FILE,
    ADAPTIVE_PATH,
    APP_NAME,
    HEAD_ADDRESS,
    K8S_MODEL_MOUNT,
    K8S_PYTHON,
    OVERLAY_DIR,
    OVERLAY_PATH,
    RELEASE_DIR_VAR,
    STARTUP_BUDGET_S,
)
from specctl.errors import InputError
from specctl.gpus import GPUS
from specctl.plan.inputs import Inputs
from specctl.plan.plan import Plan, build_plan
from specctl.plan.resolve import CaptureResolution
from specctl.profile.profile import Profile, is_local_path

# where things are inside a pod
RELEASE_MOUNT = "/specctl/release"  # the release directory: an emptyDir per pod, laid out by `materialise`
CONFIG_MOUNT = "/specctl/config"  # the ConfigMap, read-only
MATERIALISE_SCRIPT = Path(__file__).with_name("_pod_materialise.py")  # read by the caller: this module does no I/O

# LeaderWorkerSet, from kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"  # <lws>-<group>.<subdomain>.<namespace>: the leader pod's DNS name
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"  # 0 for the leader, 1..size-1 for the workers

WILDCARD_HOSTS = ("0.0.0.0", "::")
READY_PATH = "/health_generate"  # a real generation answered: what a deploy waits for (release/readiness.py)
LIVE_PATH = "/health"  # the HTTP server answers
PROBE_PERIOD_S = 10
# Weights are staged by an init container, which can take hours on a first deploy; Kubernetes'
# default of ten minutes without progress would report a healthy rollout as failed.
PROGRESS_DEADLINE_S = 24 * 3600
MAX_NAME_CHARS = 40  # LWS names StatefulSets and pods after it, and their labels must stay within 63
GPU_RESOURCE = "nvidia.com/gpu"
PREFIX = f"{APP_NAME}/"  # annotation and label keys of our own
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RELEASE_WORDS = {OVERLAY_PATH: OVERLAY_DIR, ADAPTIVE_PATH: ADAPTIVE_FILE}
_OVERLAY_CONFIG = "drafter-config.json"  # the overlay's config.json, as a ConfigMap key
_NOT_POD_PLAN = (
    "the nodes' argv must differ in their rank alone, at the places the plan records for the rank and "
    "node 0's address, and name node 0 as HEAD_ADDRESS (build it with pod_plan)"
)


@dataclass(frozen=True)
class K8sOptions:
    """What a profile cannot know about a cluster.

    Args:
        image: the container image (the caller defaults it to the engine's published one).
        name: name of the objects (default: from the profile name, `-baseline` for a baseline).
        namespace: written into every object; left out, `kubectl -n` decides.
        secret_name: the Kubernetes Secret holding the profile's secrets, one key each (default `<name>-secrets`).
        model_pvc: a PersistentVolumeClaim for the model volume (default: an emptyDir, so every pod
            start downloads the checkpoints again).
        model_mount: where the model volume is mounted; local checkpoint paths must be under it.
        python: the image's interpreter, in place of the host's `engine.python`.
    """

    image: str
    name: str | None = None
    namespace: str | None = None
    secret_name: str | None = None
    model_pvc: str | None = None
    model_mount: str = K8S_MODEL_MOUNT
    python: str = K8S_PYTHON

    def names(self, profile_name: str, baseline: bool) -> tuple[str, str]:
        """The objects' name and the Secret's."""
        name = self.name or resource_name(profile_name, baseline)
        return name, self.secret_name or f"{name}-secrets"


@dataclass(frozen=True)
class PodProgram:
    """A self-contained Python program an init container runs with the image's interpreter: its
    source (shipped in the ConfigMap), its one JSON argument and the environment it adds."""

    source: str
    argument: str
    env: Mapping[str, str] = field(default_factory=dict)


def pod_plan(inputs: Inputs, resolution: CaptureResolution | None, *, baseline: bool = False) -> Plan:
    """The plan as pods run it: listening on every address, node 0 named by a scheduler's
    `HEAD_ADDRESS` (which the manifests turn into LWS's leader address), and the Hub checkpoints
    staged before the start."""
    p = inputs.profile
    if p.engine.host not in WILDCARD_HOSTS:
        inputs = replace(
            inputs, profile=p.model_copy(update={"engine": p.engine.model_copy(update={"host": WILDCARD_HOSTS[0]})})
        )
    return build_plan(inputs, resolution, baseline=baseline, node0_address=HEAD_ADDRESS, staged=True)


def resource_name(profile_name: str, baseline: bool) -> str:
    """A DNS label from a profile name (`kimi-k2.5-tp8` -> `kimi-k2-5-tp8`), short enough for LWS."""
    base = re.sub(r"[^a-z0-9]+", "-", profile_name.lower()).strip("-")
    if not base[:1].isalpha():
        base = f"{APP_NAME}-{base}".rstrip("-")
    suffix = "-baseline" if baseline else ""
    room = MAX_NAME_CHARS - len(suffix)
    if len(base) > room:  # cut, with a digest of the whole name so two long names stay apart
        base = f"{base[: room - 7].rstrip('-')}-{hashlib.sha256(profile_name.encode()).hexdigest()[:6]}"
    return base + suffix


def manifests(
    inputs: Inputs,
    resolution: CaptureResolution | None,
    options: K8sOptions,
    *,
    baseline: bool = False,
    stage: PodProgram | None = None,
    materialise: str = "",
) -> list[dict[str, Any]]:
    """The objects to apply, in order: ConfigMap (when there are files), Deployment or
    LeaderWorkerSet, Service.

    Args:
        stage: the program that stages the Hub checkpoints (None: none to stage).
        materialise: the source of `_pod_materialise.py` (`MATERIALISE_SCRIPT`), used when the
            release directory has files.

    Raises:
        InputError: a name Kubernetes would refuse.
    """
    plan = pod_plan(inputs, resolution, baseline=baseline)
    return _Render(plan, inputs.profile, options, stage, materialise).objects()


def render_yaml(objects: Sequence[Mapping[str, Any]], header: str = "") -> str:
    """Multi-document YAML, keys sorted; text with newlines (the programs) as literal blocks. Only
    ASCII is written as itself (the rest as YAML escapes), so nothing in a profile can act on the
    terminal that shows the manifest."""
    body = yaml.dump_all(objects, Dumper=_Dumper, sort_keys=True, explicit_start=True, width=120)
    return "".join(f"# {line}\n" for line in header.splitlines()) + body


def render_json(objects: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(objects), indent=2, sort_keys=True) + "\n"


def banner(inputs: Inputs, options: K8sOptions, *, baseline: bool) -> str:
    """The comment that opens the YAML: what was rendered, what the cluster must have, how to apply it."""
    p = inputs.profile
    name, secret = options.names(p.metadata.name, baseline)
    kind = "a LeaderWorkerSet (the LWS controller must be installed)" if p.parallel.nnodes > 1 else "a Deployment"
    lines = [
        f"specctl render --platform k8s: profile {p.metadata.name} v{p.metadata.version} "
        f"({'baseline' if baseline else 'speculative'}), sha256 {inputs.profile_sha256}",
        f"{kind} {name} and the Service {name}-api on port {p.engine.port}",
    ]
    if p.secrets:
        lines.append(
            f"secrets {', '.join(p.secrets)} come from the Secret {secret}, one key each: "
            f"kubectl create secret generic {secret} " + " ".join(f'--from-literal={s}="${s}"' for s in p.secrets)
        )
    lines.append("apply: kubectl apply -f <this file>")
    return "\n".join(lines)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line text as a `|` block (the emitter falls back to quotes where a
    block cannot hold it)."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _represent_text)


def _escape(text: str) -> str:
    """Kubernetes expands `$(VAR)` in args, command and env values; `$$` stands for one `$`."""
    return text.replace("$", "$$")


def _label_value(text: str) -> str:
    """A label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends) from any text."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("._-")


class _Render:
    """One render: the plan, the profile it came from and the options, turned into objects."""

    def __init__(
        self, plan: Plan, profile: Profile, options: K8sOptions, stage: PodProgram | None, materialise: str
    ) -> None:
        self.plan, self.profile, self.options, self.stage = plan, profile, options, stage
        self.name, self.secret_name = options.names(plan.profile, plan.baseline)
        self._check_options()
        self.multi = len(plan.nodes) > 1
        self.files = self._files(materialise)
        self.argvs, self.rewrites = self._argvs()

    def _check_options(self) -> None:
        """Names Kubernetes would refuse, and checkpoints the pods could not see, refused before anything is printed."""
        o, p = self.options, self.profile
        names = [
            ("--name", self.name, _DNS_LABEL, MAX_NAME_CHARS),
            ("--namespace", o.namespace, _DNS_LABEL, 63),
            ("--secret-name", self.secret_name, _DNS_SUBDOMAIN, 253),
            ("--model-pvc", o.model_pvc, _DNS_SUBDOMAIN, 253),
        ]
        for option, value, pattern, most in names:
            if value is not None and not (pattern.match(value) and len(value) <= most):
                raise InputError(
                    f"{option} {value!r} is not a name Kubernetes accepts",
                    fix=f"use lowercase letters, digits and '-' (starting with a letter for {option}), "
                    f"at most {most} characters",
                )
        if not o.model_mount.startswith("/"):
            raise InputError(
                f"--model-mount {o.model_mount!r} is not an absolute path",
                fix="give the path inside the pod, e.g. /models",
            )
        models = [p.target.model, *([p.drafter.model] if p.drafter is not None and not self.plan.baseline else [])]
        outside = [m for m in models if is_local_path(m) and not m.startswith(o.model_mount.rstrip("/") + "/")]
        if outside:
            raise InputError(
                f"{outside[0]} is a path on the host, and the pods mount the model volume at {o.model_mount}",
                fix="put the checkpoint on a volume and pass --model-pvc NAME --model-mount DIR with DIR above it",
            )
        if self.stage is None and any(not is_local_path(m) for m in models):
            raise ValueError(
                "Hub checkpoints are served offline from the cache: pass the stage program that puts them there"
            )

    # --- what the pods run ------------------------------------------------------------------------

    def _argvs(self) -> tuple[list[list[str]], list[str]]:
        """Each node's container args, and the rewrites made (for the annotation)."""
        nodes, p = self.plan.nodes, self.profile
        first = nodes[0].argv
        leader = f"{HEAD_ADDRESS}:{p.parallel.dist_init_port}"
        if self.multi and not all(
            n.rank_at is not None
            and n.dist_init_at is not None
            and n.argv[n.rank_at] == str(n.rank)
            and n.argv[n.dist_init_at] == leader
            for n in nodes
        ):
            raise ValueError(_NOT_POD_PLAN)
        rewrites = []
        if first[0] == p.engine.python and p.engine.python != self.options.python:
            rewrites.append(f"argv[0] {p.engine.python} -> {self.options.python}: the image's interpreter")
        if p.engine.host not in WILDCARD_HOSTS:
            rewrites.append(
                f"engine.host {p.engine.host} -> {WILDCARD_HOSTS[0]}: "
                "probes and the Service reach the pod on its own address"
            )
        if self.multi:
            rewrites.append(
                f"node rank -> $({LWS_WORKER_INDEX}), node 0 -> $({LWS_LEADER_ADDRESS}): set by LWS in every pod"
            )
        if any(word in _RELEASE_WORDS for word in first):
            rewrites.append(f"${{{RELEASE_DIR_VAR}}} -> {RELEASE_MOUNT}: the pod's release directory")
        argvs = []
        for node in nodes:
            words = []
            for i, word in enumerate(node.argv):
                if i == 0 and word == p.engine.python:
                    words.append(self.options.python)
                elif self.multi and i == node.rank_at:
                    words.append(f"$({LWS_WORKER_INDEX})")
                elif self.multi and i == node.dist_init_at:
                    words.append(f"$({LWS_LEADER_ADDRESS}):{p.parallel.dist_init_port}")
                elif word in _RELEASE_WORDS:
                    words.append(f"{RELEASE_MOUNT}/{_RELEASE_WORDS[word]}")
                else:
                    words.append(_escape(word))
            argvs.append(words)
        if any(words != argvs[0] for words in argvs):  # one pod template serves every worker
            raise ValueError(_NOT_POD_PLAN)
        return argvs, rewrites

    def _env(self, extra: Mapping[str, str] | None = None, *, secrets: bool = True) -> list[dict[str, Any]]:
        """The plan's environment with the cache on the model volume (in place of a host's cache
        settings), the release directory, `extra`, and the secrets by reference; sorted by name."""
        plain = {k: v for k, v in self.plan.nodes[0].env.items() if k not in ("HF_HOME", "HF_HUB_CACHE")}
        plain |= {
            "HF_HOME": f"{self.options.model_mount.rstrip('/')}/huggingface",
            RELEASE_DIR_VAR: RELEASE_MOUNT,
            **(extra or {}),
        }
        env: list[dict[str, Any]] = [{"name": k, "value": _escape(v)} for k, v in plain.items()]
        if secrets:
            env += [
                {"name": s, "valueFrom": {"secretKeyRef": {"name": self.secret_name, "key": s}}}
                for s in self.plan.secrets
            ]
        return sorted(env, key=lambda e: str(e["name"]))

    def _files(self, materialise: str) -> dict[str, str]:
        """The ConfigMap's data: the init containers' programs and the files of the release directory."""
        files: dict[str, str] = {}
        if self.stage is not None:
            files["stage.py"] = self.stage.source
        if self.plan.overlay is not None:
            files[_OVERLAY_CONFIG] = json.dumps(self.plan.overlay.config, indent=2) + "\n"  # as a deploy writes it
        for name, data in self.plan.files.items():
            files[name] = json.dumps(data, indent=2, sort_keys=True) + "\n"
        if self.plan.overlay is not None or self.plan.files:
            if not materialise:
                raise ValueError("the release directory has files: pass the source of MATERIALISE_SCRIPT")
            files["materialise.py"] = materialise
        return files

    def _init_containers(self) -> list[dict[str, Any]]:
        mounts = {"model": self.options.model_mount, "files": CONFIG_MOUNT}
        containers = []
        if self.stage is not None:
            containers.append(
                {
                    "name": "stage",
                    "image": self.options.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": [self.options.python, f"{CONFIG_MOUNT}/stage.py", _escape(self.stage.argument)],
                    "env": self._env(self.stage.env),
                    "volumeMounts": _mounts(mounts, read_only=frozenset({"files"})),
                }
            )
        if "materialise.py" in self.files:
            overlay = self.plan.overlay
            spec = {
                "overlay": None
                if overlay is None
                else {
                    "directory": f"{RELEASE_MOUNT}/{OVERLAY_DIR}",
                    "source": overlay.source,
                    "revision": overlay.revision,
                    "links": list(overlay.links),
                    "config": f"{CONFIG_MOUNT}/{_OVERLAY_CONFIG}",
                },
                "files": {f"{RELEASE_MOUNT}/{name}": f"{CONFIG_MOUNT}/{name}" for name in self.plan.files},
            }
            containers.append(
                {
                    "name": "materialise",
                    "image": self.options.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": [
                        self.options.python,
                        f"{CONFIG_MOUNT}/materialise.py",
                        _escape(json.dumps(spec, sort_keys=True)),
                    ],
                    "env": self._env(secrets=False),
                    "volumeMounts": _mounts({**mounts, "release": RELEASE_MOUNT}, read_only=frozenset({"files"})),
                }
            )
        return containers

    def _pod(self, rank: int) -> dict[str, Any]:
        """The pod template of node `rank` (a leader's, or every worker's)."""
        gpus = str(self.profile.hardware.gpus_per_node)
        # a CPU profile (the reference engine) asks for no GPU, so any node may run it
        on_gpu = GPUS[self.profile.hardware.gpu].architecture != "cpu"
        server: dict[str, Any] = {
            "name": "server",
            "image": self.options.image,
            "imagePullPolicy": "IfNotPresent",
            "command": self.argvs[rank],
            "env": self._env(),
            **({"resources": {"limits": {GPU_RESOURCE: gpus}, "requests": {GPU_RESOURCE: gpus}}} if on_gpu else {}),
            "volumeMounts": _mounts(
                {"dshm": "/dev/shm", "model": self.options.model_mount, "release": RELEASE_MOUNT},
                read_only=frozenset({"release"}),
            ),
        }
        if rank == 0:  # the engine's other ranks join node 0's process group and serve no HTTP
            server["ports"] = [{"name": "http", "containerPort": self.profile.engine.port, "protocol": "TCP"}]
            if self.multi:
                server["ports"].append(
                    {"name": "dist-init", "containerPort": self.profile.parallel.dist_init_port, "protocol": "TCP"}
                )
            server |= {
                # loading weights and capturing CUDA graphs take minutes: the budget a deploy waits
                "startupProbe": _probe(LIVE_PATH, timeout_s=5, failures=math.ceil(STARTUP_BUDGET_S / PROBE_PERIOD_S)),
                # ready = a real generation answered, as a deploy judges it (the engine's own check gives up at 20 s)
                "readinessProbe": _probe(READY_PATH, timeout_s=25, failures=3),
                "livenessProbe": _probe(LIVE_PATH, timeout_s=10, failures=6),
            }
        volumes: list[dict[str, Any]] = [
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},  # the engine's processes share tensors through /dev/shm
            {
                "name": "model",
                **(
                    {"persistentVolumeClaim": {"claimName": self.options.model_pvc}}
                    if self.options.model_pvc
                    else {"emptyDir": {}}
                ),
            },
            {"name": "release", "emptyDir": {}},
        ]
        if self.files:
            volumes.append({"name": "files", "configMap": {"name": f"{self.name}-files"}})
        spec: dict[str, Any] = {
            "containers": [server],
            "volumes": volumes,
            # service links would put <SERVICE>_PORT variables beside the engine's own settings
            "enableServiceLinks": False,
        }
        init = self._init_containers()
        if init:
            spec["initContainers"] = init
        return {
            "metadata": {"labels": self._labels(pod=True), "annotations": self._annotations(pod=True)},
            "spec": spec,
        }

    # --- metadata ---------------------------------------------------------------------------------

    def _selector(self) -> dict[str, str]:
        return {"app.kubernetes.io/instance": self.name, "app.kubernetes.io/managed-by": APP_NAME}

    def _labels(self, *, pod: bool = False) -> dict[str, str]:
        labels = {
            **self._selector(),
            "app.kubernetes.io/name": _label_value(self.plan.engine),
            "app.kubernetes.io/version": _label_value(self.plan.engine_version),
            "app.kubernetes.io/component": "server",
            f"{PREFIX}mode": "baseline" if self.plan.baseline else "speculative",
        }
        if pod:
            labels[f"{PREFIX}profile-version"] = str(self.plan.version)
        return labels

    def _annotations(self, *, pod: bool = False) -> dict[str, str]:
        """The contract an operator reads off any object: profile, digest, engine, GPUs, capture, rewrites."""
        p, plan = self.profile, self.plan
        notes = {
            f"{PREFIX}profile": plan.profile,
            f"{PREFIX}profile-version": str(plan.version),
            f"{PREFIX}profile-sha256": plan.sha256,
            f"{PREFIX}engine": f"{plan.engine} {plan.engine_version}",
            f"{PREFIX}gpus": f"{p.parallel.nnodes} x {p.hardware.gpus_per_node} {p.hardware.gpu}",
            f"{PREFIX}rewrites": json.dumps(self.rewrites),
        }
        if plan.capture is not None:
            notes[f"{PREFIX}capture-layers"] = json.dumps(plan.capture["layers"])
            notes[f"{PREFIX}capture-ids"] = json.dumps(plan.capture["ids"])
        local = sorted(
            {
                m
                for m in (p.target.model, None if plan.baseline or p.drafter is None else p.drafter.model)
                if m is not None and is_local_path(m)
            }
        )
        if local:
            notes[f"{PREFIX}local-paths"] = json.dumps(
                local
            )  # the pods need these: on the model volume or in the image
        if pod and self.files:  # a changed file changes the template, so the pods roll
            digest = hashlib.sha256(json.dumps(self.files, sort_keys=True).encode()).hexdigest()
            notes[f"{PREFIX}files-sha256"] = digest
        return notes

    def _meta(self, name: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "labels": self._labels(), "annotations": self._annotations()}
        if self.options.namespace:
            meta["namespace"] = self.options.namespace
        return meta

    # --- the objects ------------------------------------------------------------------------------

    def objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.files:
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": self._meta(f"{self.name}-files"),
                    "data": self.files,
                }
            )
        out.append(self._leader_worker_set() if self.multi else self._deployment())
        # a multi-node group is reached through its leader (LWS names its own headless Service after the set)
        selector = {LWS_NAME_LABEL: self.name, LWS_WORKER_INDEX_LABEL: "0"} if self.multi else self._selector()
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": self._meta(f"{self.name}-api"),
                "spec": {
                    "type": "ClusterIP",
                    "selector": selector,
                    "ports": [
                        {"name": "http", "port": self.profile.engine.port, "targetPort": "http", "protocol": "TCP"}
                    ],
                },
            }
        )
        return out

    def _deployment(self) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self._meta(self.name),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": self._selector()},
                # the new pod starts beside the old one, which serves until the new one is ready
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "progressDeadlineSeconds": PROGRESS_DEADLINE_S,
                "template": self._pod(0),
            },
        }

    def _leader_worker_set(self) -> dict[str, Any]:
        return {
            "apiVersion": LWS_API_VERSION,
            "kind": "LeaderWorkerSet",
            "metadata": self._meta(self.name),
            "spec": {
                "replicas": 1,
                # workers start with the leader: the engine's process group forms only when every rank is up
                "startupPolicy": "LeaderCreated",
                "rolloutStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0},
                },
                "leaderWorkerTemplate": {
                    "size": len(self.plan.nodes),
                    "restartPolicy": "RecreateGroupOnPodRestart",  # one lost rank breaks the process group
                    "leaderTemplate": self._pod(0),
                    "workerTemplate": self._pod(1),
                },
            },
        }


def _mounts(paths: Mapping[str, str], *, read_only: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    return [
        {"name": name, "mountPath": path, **({"readOnly": True} if name in read_only else {})}
        for name, path in paths.items()
    ]


def _probe(path: str, *, timeout_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": PROBE_PERIOD_S,
        "timeoutSeconds": timeout_s,
        "failureThreshold": failures,
    }
