"""Staging on real sshd hosts with the real huggingface_hub client against a local Hub endpoint:
a Hub profile (tiny target and drafter served as repos at fixed commits) is staged, deployed with
its drafter overlay linked into the host's snapshot, and every refusal happens before anything
running is stopped."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.flows.demo import MODELS
from tests.hub_endpoint import HubEndpoint, HubRepo
from tests.integration.conftest import lab_profile
from tests.integration.health import HealthPolls
from tests.integration.sshd import SshLab

PORT = 31820
TARGET, DRAFTER = "specctl-test/tiny-llama", "specctl-test/tiny-llama-eagle3"
COMMITS = {TARGET: hashlib.sha1(b"tiny-llama").hexdigest(), DRAFTER: hashlib.sha1(b"tiny-llama-eagle3").hexdigest()}


def repo(name: str, directory: Path, **kwargs: Any) -> HubRepo:
    return HubRepo({p.name: p for p in directory.iterdir() if p.is_file()}, COMMITS[name], **kwargs)


@pytest.fixture
def hub(lab: SshLab, serve: Any, tmp_path: Path) -> HubEndpoint:
    """The tiny models as Hub repos, on an address the lab's hosts reach (this machine's side of h0's
    link). The drafter's config.json names ids [0, 2, 3], as a drafter published under another
    convention would: its manifest's layers [1, 3, 4] need an overlay with ids [1, 3, 4]."""
    drafter = tmp_path / "published-drafter"
    drafter.mkdir()
    config = json.loads((MODELS / "tiny-llama-eagle3" / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 2, 3]
    (drafter / "config.json").write_text(json.dumps(config, indent=2))
    (drafter / "model.safetensors").symlink_to(MODELS / "tiny-llama-eagle3" / "model.safetensors")
    return serve({TARGET: repo(TARGET, MODELS / "tiny-llama"), DRAFTER: repo(DRAFTER, drafter)}, host=lab.gateway("h0"))


def hub_profile(env: dict[str, Any], hub: HubEndpoint, *, cache: str, **engine_env: str) -> str:
    """v1 with both models taken from the Hub at pinned commits (and a manifest naming them), the
    host's cache at `cache`."""
    path = Path(env["tmp"]) / "profiles" / "hub.yaml"
    manifest = yaml.safe_load((Path(env["tmp"]) / "manifests" / "tiny-llama-eagle3.yaml").read_text())
    manifest["drafter"] = {"model": DRAFTER, "revision": COMMITS[DRAFTER]}
    manifest["target"].update({"model": TARGET, "revision": COMMITS[TARGET]})
    (Path(env["tmp"]) / "manifests" / "hub.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    drafter: dict[str, Any] = {"model": DRAFTER, "revision": COMMITS[DRAFTER], "manifest": "../manifests/hub.yaml"}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": "tiny-llama-v1.yaml",
                "metadata": {"name": "tiny-llama-demo", "version": 7},
                "target": {"model": TARGET, "revision": COMMITS[TARGET]},
                "drafter": drafter,
                "engine": {
                    "env": {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": cache, "HF_HUB_DISABLE_XET": "1", **engine_env}
                },
            },
            sort_keys=False,
        )
    )
    return str(path)


@pytest.fixture
def env(lab: SshLab, tmp_path: Path) -> dict[str, Any]:
    return lab_profile(lab, tmp_path, PORT)


def test_stage_fetches_once_then_costs_no_download(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    cache = str(tmp_path / "h0-cache")
    profile = hub_profile(env, hub, cache=cache)
    first = cli("--json", "stage", profile, "--hosts", "h0", *env["common"])
    assert first.code == 0, first.stdout + first.stderr
    [row] = first.json()["hosts"]
    staged = {s["repo"]: s for s in row["staged"]}
    assert set(staged) == {TARGET, DRAFTER} and all(s["fetched"] == s["bytes"] > 0 for s in staged.values())
    snapshot = Path(staged[TARGET]["snapshot"])
    assert snapshot == Path(cache) / "models--specctl-test--tiny-llama" / "snapshots" / COMMITS[TARGET]
    assert (snapshot / "model.safetensors").read_bytes() == (MODELS / "tiny-llama" / "model.safetensors").read_bytes()
    assert hub.file_gets()
    hub.clear()
    again = cli("--json", "stage", profile, "--hosts", "h0", *env["common"])
    assert again.code == 0 and all(s["fetched"] == 0 for s in again.json()["hosts"][0]["staged"])
    # already staged: the host's disk answers and asks the Hub nothing (what is left is the operator's
    # own check reading metadata: HEADs, and header ranges of the shards it does not hold)
    assert [s.path for s in hub.log if s.path.startswith("/api/") or (s.method == "GET" and s.range is None)] == []
    runs = cli("--json", "runs", "--kind", "stage").json()["runs"]
    assert [r["status"] for r in runs][-2:] == ["succeeded", "succeeded"]


def test_a_hub_profile_deploys_with_its_overlay_linked_into_the_staged_snapshot(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    cache = str(tmp_path / "h1-cache")
    profile = hub_profile(env, hub, cache=cache)
    checked = cli("--json", "check", profile)
    assert checked.code == 0, checked.stdout
    result = cli("--json", "deploy", profile, "--hosts", "h1", "--no-verify", *env["common"])
    assert result.code == 0, result.stdout + result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert any(e.get("event") == "staged" and e["host"] == "h1" for e in events)
    release = lab.hosts["h1"].root / "tiny-llama-demo" / "releases" / result.json()["hosts"][0]["release"]
    overlay = release / "drafter-overlay"
    link = os.readlink(overlay / "model.safetensors")
    assert link.startswith(f"{cache}/models--specctl-test--tiny-llama-eagle3/snapshots/{COMMITS[DRAFTER]}/")
    assert json.loads((overlay / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [
        1,
        3,
        4,
    ]
    launch = (release / "launch.sh").read_text()
    assert "export HF_HUB_OFFLINE=1" in launch and f"--revision {COMMITS[TARGET]}" in launch
    # what content the release served, each file checked against the id the Hub published
    record = {c["repo"]: c for c in json.loads((release / "checkpoints.json").read_text())["checkpoints"]}
    weights = (MODELS / "tiny-llama" / "model.safetensors").read_bytes()
    assert record[TARGET]["verified"] and record[TARGET]["commit"] == COMMITS[TARGET]
    assert {
        "name": "model.safetensors",
        "size": len(weights),
        "id": "sha256:" + hashlib.sha256(weights).hexdigest(),
        "verified": True,
    } in record[TARGET]["files"]
    status = cli("--json", "status", profile, "--hosts", "h1", *env["common"]).json()["hosts"][0]
    assert status["healthy"]
    cli("stop", profile, "--hosts", "h1", *env["common"])


def test_a_shard_corrupted_in_place_is_fetched_again(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """Same size, other bytes: the content is checked against the checksum the Hub publishes (hashed on
    the host, cached by size and mtime), so the next stage fetches that file again."""
    cache = str(tmp_path / "h0-cache")
    profile = hub_profile(env, hub, cache=cache)
    assert cli("--json", "stage", profile, "--hosts", "h0", *env["common"]).code == 0
    shard = Path(cache) / "models--specctl-test--tiny-llama" / "snapshots" / COMMITS[TARGET] / "model.safetensors"
    original = (MODELS / "tiny-llama" / "model.safetensors").read_bytes()
    blob = shard.resolve()
    with open(blob, "r+b") as handle:  # flip bytes in the middle of the weights, in place
        handle.seek(len(original) // 2)
        handle.write(bytes(b ^ 0xFF for b in original[len(original) // 2 : len(original) // 2 + 64]))
    assert shard.stat().st_size == len(original) and shard.read_bytes() != original

    def corrupt() -> None:
        with open(blob, "r+b") as handle:  # flip bytes in the middle of the weights, in place
            handle.seek(len(original) // 2)
            handle.write(bytes(b ^ 0xFF for b in original[len(original) // 2 : len(original) // 2 + 64]))

    hub.clear()
    again = cli("--json", "stage", profile, "--hosts", "h0", *env["common"])
    assert again.code == 0, again.stdout + again.stderr
    assert shard.read_bytes() == original
    whole = [s.path for s in hub.file_gets() if s.range is None]  # (ranges: the check reading shard headers)
    assert whole == [f"/{TARGET}/resolve/{COMMITS[TARGET]}/model.safetensors"]
    # the re-fetch is counted, not reported as "nothing to fetch" (issue 34)
    staged = {s["repo"]: s for s in again.json()["hosts"][0]["staged"]}
    assert (staged[TARGET]["fetched"], staged[TARGET]["refetched"], staged[TARGET]["refetched_bytes"]) == (
        0,
        ["model.safetensors"],
        len(original),
    )
    hub.clear()
    third = cli("--json", "stage", profile, "--hosts", "h0", *env["common"])  # whole again: nothing asked of the Hub
    assert third.code == 0 and not [s for s in hub.log if s.path.startswith("/api/")]
    assert all(s["refetched"] == [] for s in third.json()["hosts"][0]["staged"])
    corrupt()
    shown = cli("stage", profile, "--hosts", "h0", "-o", "wide", *env["common"])
    assert shown.code == 0 and shard.read_bytes() == original, shown.stdout + shown.stderr
    assert "re-fetched 1 file" in shown.stdout and "did not match the Hub's checksum" in shown.stdout, shown.stdout


def test_an_unpinned_profile_staged_starts_offline_at_the_commit_it_staged(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """No revision in the profile: staging resolves `main` to a commit, fetches it by that commit, and
    points the cache's `refs/main` at it, so the engine, started offline, resolves the name."""
    cache = tmp_path / "h2-cache"
    path = Path(hub_profile(env, hub, cache=str(cache)))
    data = yaml.safe_load(path.read_text())
    data["target"].pop("revision")
    data["drafter"].pop("revision")
    data["target"]["allow_unpinned"] = data["drafter"]["allow_unpinned"] = True
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = cli("--json", "deploy", str(path), "--hosts", "h2", "--no-verify", "--skip-check", *env["common"])
    try:
        assert result.code == 0, result.stdout + result.stderr
        for repo in (TARGET, DRAFTER):
            ref = cache / ("models--" + repo.replace("/", "--")) / "refs" / "main"
            assert ref.read_text() == COMMITS[repo], repo
        release = lab.hosts["h2"].root / "tiny-llama-demo" / "releases" / result.json()["hosts"][0]["release"]
        assert "export HF_HUB_OFFLINE=1" in (release / "launch.sh").read_text()
        assert cli("--json", "status", str(path), "--hosts", "h2", *env["common"]).json()["hosts"][0]["healthy"]
    finally:
        cli("stop", str(path), "--hosts", "h2", *env["common"])


def test_refusals_come_before_anything_is_stopped(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """An unknown revision, a gated repo without a token and a disk too small: each is refused by
    the stage step, no file body is fetched, and the running release keeps serving."""
    host = lab.hosts["h2"]
    disk = str(tmp_path / "small-disk")
    host.tmpfs = {disk: "4m"}  # a file system only h2 sees (its sshd's mount namespace)
    lab.stop_sshd(host)
    lab.start_sshd(host)
    common = [*env["common"], "--hosts", "h2"]
    try:
        assert cli("deploy", env["v1"], "--no-verify", *common).code == 0
        running = cli("--json", "status", env["v1"], *common).json()["hosts"][0]["current"]

        unknown = hub_profile(env, hub, cache=str(tmp_path / "c1"))
        data = yaml.safe_load(Path(unknown).read_text())
        data["target"]["revision"] = "0" * 40
        Path(unknown).write_text(yaml.safe_dump(data))
        result = cli("--json", "deploy", unknown, "--no-verify", "--skip-check", *common)
        assert result.code == 3 and f"{TARGET} has no revision {'0' * 40}" in result.stdout, result.stdout

        hub.repos[TARGET].gated = True
        gated = hub_profile(env, hub, cache=str(tmp_path / "c2"))
        result = cli("--json", "deploy", gated, "--no-verify", "--skip-check", *common)
        [row] = result.json()["hosts"]
        assert result.code == 3 and "is gated" in row["detail"] and "HF_TOKEN" in row["fix"], result.stdout
        hub.repos[TARGET].gated = False

        small = hub_profile(env, hub, cache=f"{disk}/hf")
        result = cli("--json", "deploy", small, "--no-verify", *common)
        assert result.code == 3 and f"{disk}/hf has" in result.stdout, result.stdout
        assert not Path(disk, "hf").exists()  # what h2 wrote there, only h2 sees

        # refused before any weights were fetched (the operator's check reads configs and header ranges)
        assert [s.path for s in hub.file_gets() if s.path.endswith(".safetensors") and s.range is None] == []
        after = cli("--json", "status", env["v1"], *common).json()["hosts"][0]
        assert after["current"] == running and after["healthy"]
    finally:
        cli("stop", env["v1"], *common)
        host.tmpfs = {}
        lab.stop_sshd(host)
        lab.start_sshd(host)


def test_the_running_server_answers_while_a_deploy_stages(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """Staging happens beside the running release: /health keeps answering for the seconds a slow
    download takes, and the outage is only the switch (reported, not timed against a bound)."""
    common = [*env["common"], "--hosts", "h0"]
    assert cli("deploy", env["v1"], "--no-verify", *common).code == 0
    hub.rate_bytes_per_s = 1_000_000  # 3.7 MB of weights: about four seconds of staging
    with HealthPolls(f"http://{lab.hosts['h0'].address}:{PORT}/health") as health:
        began = time.time()
        result = cli(
            "--json", "deploy", hub_profile(env, hub, cache=str(tmp_path / "h0-cache")), "--no-verify", *common
        )
        health.wait_answered(30)
    assert result.code == 0, result.stdout + result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    staged_at = next(e["time"] for e in events if e.get("event") == "staged")
    assert any(e.get("event") == "stage-progress" and e["total"] > 0 for e in events)
    assert staged_at - began > 2.0  # the download really took a while
    during = [ok for t, ok in health.polls if began <= t <= staged_at]
    assert during and all(during)  # the old server answered throughout
    print(
        f"staging took {staged_at - began:.1f} s with the old server answering; "
        f"/health was then down for {health.longest_gap(since=staged_at):.1f} s"
    )
    assert health.polls[-1][1]  # the new release answers at the end
    cli("stop", env["v1"], *common)


def test_a_link_that_keeps_dropping_fails_the_stage_not_the_running_server(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """Every weights download is cut short: huggingface_hub's own retries give up, the deploy fails
    in its stage step with the old release still serving, and the next stage keeps what was done."""
    common = [*env["common"], "--hosts", "h0"]
    assert cli("deploy", env["v1"], "--no-verify", *common).code == 0
    running = cli("--json", "status", env["v1"], *common).json()["hosts"][0]["current"]
    profile = hub_profile(env, hub, cache=str(tmp_path / "h0-cache"))
    hub.cut_after_bytes, hub.cut_always = 400_000, True
    result = cli("--json", "deploy", profile, "--no-verify", *common)
    [row] = result.json()["hosts"]
    assert result.code == 3 and "staging refused" in row["detail"] and "stage again" in row["fix"], result.stdout
    after = cli("--json", "status", env["v1"], *common).json()["hosts"][0]
    assert after["current"] == running and after["healthy"]

    def target_config_gets() -> int:  # the operator's check reads it once into its own cache; the host once into its
        return len(
            [s for s in hub.file_gets() if s.repo_id == TARGET and s.filename == "config.json" and s.range is None]
        )

    fetched_configs = target_config_gets()
    assert fetched_configs == 2
    hub.cut_after_bytes, hub.cut_always = None, False
    again = cli("--json", "stage", profile, *common)
    assert again.code == 0, again.stdout
    assert target_config_gets() == fetched_configs  # the host's finished file stayed finished
    cli("stop", env["v1"], *common)


def test_the_kimi_example_dry_runs_on_eight_hosts(
    cli: Any, lab: SshLab, serve: Any, example_hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project's own Kimi-K2.5 profile (Hub target and drafter, drafter ids needing an overlay),
    with --dry-run on an inventory of eight hosts: per host, what staging would fetch (sizes from the
    Hub endpoint, which serves the example checkpoints' metadata and sparse shards), the overlay
    built from the drafter's snapshot there, and the launch command: no static refusal, and the proof
    of each host names what it lacks to start it (exit 3, as the deploy would stop there)."""
    root = Path(__file__).resolve().parents[2]
    kimi = yaml.safe_load((root / "profiles" / "kimi-k2.5-tp8.yaml").read_text())
    repos = {}
    for part in ("target", "drafter"):
        repo_id, commit = kimi[part]["model"], kimi[part]["revision"]
        snapshot = example_hub / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit
        repos[repo_id] = HubRepo({p.name: p for p in snapshot.iterdir()}, commit)
    hub = serve(repos, host=lab.gateway("h0"))
    monkeypatch.setenv("HF_HUB_CACHE", str(example_hub))  # the operator's own cache holds the metadata
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(example_hub))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "manifests").mkdir()
    for name in ("profiles/kimi-k2.5-tp8.yaml", "manifests/kimi-k25-eagle3.yaml"):
        (tmp_path / name).write_text((root / name).read_text())
    hosts = [f"kimi-node-{i}" for i in range(8)]
    lines = ["apiVersion: specctl/v1", "kind: Inventory", "hosts:"]
    for i, name in enumerate(hosts):  # eight inventory hosts on the lab's three sshds, each with its own state
        lines += [f"  {name}:", f"    ssh: h{i % 3}", f"    root: {tmp_path / 'roots' / name}"]
    (tmp_path / "hosts.yaml").write_text("\n".join(lines) + "\n")
    profile = tmp_path / "profiles" / "kimi-dry.yaml"
    profile.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": "kimi-k2.5-tp8.yaml",
                "metadata": {"name": "kimi-k2.5-tp8", "version": 4},
                "engine": {
                    "python": sys.executable,
                    "env": {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "host-cache")},
                },
                "hosts": hosts,
            },
            sort_keys=False,
        )
    )
    result = cli(
        "--json",
        "deploy",
        str(profile),
        "--dry-run",
        "--offline",
        "--inventory",
        str(tmp_path / "hosts.yaml"),
        "--ssh-config",
        str(lab.ssh_config),
    )
    # what a deploy would do, said whole: and that it would stop at prove on these hosts (no sglang, no
    # GPUs, no HF_TOKEN here), before stopping anything: exit 3, each host's problems named
    assert result.code == 3, result.stdout + result.stderr
    rows = result.json()["dry_run"]
    assert [r["host"] for r in rows] == hosts
    for row in rows:
        checks = {p["check"] for p in row["prove"]["problems"]}
        assert {"secret", "host-gpu-count"} <= checks and not row["prove"]["ok"], row["prove"]
    total = sum(p.stat().st_size for p in repos[kimi["target"]["model"]].files.values())
    for row in rows:
        stage = {s["repo"]: s for s in row["stage"]}
        assert stage[kimi["target"]["model"]]["fetch"] == total > 500e9  # the sparse shards' real sizes
        assert not row["disk"]["fits"]  # nobody here has 600 GB free: said, not refused
        overlay = row["overlay"]
        assert overlay["links_to"] == (
            f"{tmp_path / 'host-cache'}/models--AQ-MedAI--Kimi-K25-eagle3/snapshots/{kimi['drafter']['revision']}"
        )
        assert overlay["ids"] == [3, 31, 59]  # under 0.5.23's DeepSeek/Kimi rule they capture the trained [2, 30, 58]
        assert "sglang.launch_server" in row["launch"] and "--speculative-draft-model-path" in row["launch"]
    assert hub.file_gets() == []  # a dry run fetches nothing
    text = cli(
        "deploy",
        str(profile),
        "--dry-run",
        "--offline",
        "--inventory",
        str(tmp_path / "hosts.yaml"),
        "--ssh-config",
        str(lab.ssh_config),
    )
    assert text.code == 3 and "DISK" in text.stdout and "SHORT" in text.stdout and "kimi-node-7" in text.stdout
    assert "prove FAILED on kimi-node-0" in text.stdout, text.stdout


def test_a_host_with_its_own_cache_in_the_inventory(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """`hf_home` on one inventory host: staging and that host's launch use it in place of the profile's cache."""
    inventory = yaml.safe_load(Path(env["inventory"]).read_text())
    own = str(tmp_path / "h1-home")
    inventory["hosts"]["h1"]["hf_home"] = own
    Path(env["inventory"]).write_text(yaml.safe_dump(inventory))
    profile = hub_profile(env, hub, cache=str(tmp_path / "profile-cache"))
    result = cli("--json", "deploy", profile, "--hosts", "h1", "--no-verify", *env["common"])
    assert result.code == 0, result.stdout + result.stderr
    assert (
        Path(own) / "hub" / "models--specctl-test--tiny-llama" / "snapshots" / COMMITS[TARGET] / "config.json"
    ).exists()
    assert not (tmp_path / "profile-cache").exists()
    release = lab.hosts["h1"].root / "tiny-llama-demo" / "releases" / result.json()["hosts"][0]["release"]
    launch = (release / "launch.sh").read_text()
    assert f"export HF_HOME={own}" in launch and "HF_HUB_CACHE" not in launch
    cli("stop", profile, "--hosts", "h1", *env["common"])


def test_no_host_stops_until_every_host_has_staged(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """h1 cannot stage (its cache is somewhere it cannot write): h0, which staged, does not stop
    its running release either, and says why."""
    common = [*env["common"], "--hosts", "h0,h1"]
    assert cli("deploy", env["v1"], "--no-verify", *common).code == 0
    before = {r["host"]: r["current"] for r in cli("--json", "status", env["v1"], *common).json()["hosts"]}
    inventory = yaml.safe_load(Path(env["inventory"]).read_text())
    inventory["hosts"]["h1"]["hf_home"] = "/proc/no-cache-here"
    Path(env["inventory"]).write_text(yaml.safe_dump(inventory))
    result = cli("--json", "deploy", hub_profile(env, hub, cache=str(tmp_path / "cache")), "--no-verify", *common)
    rows = {r["host"]: r for r in result.json()["hosts"]}
    assert result.code == 3 and not rows["h0"]["ok"] and not rows["h1"]["ok"], result.stdout
    assert "nothing was stopped" in rows["h0"]["detail"] and "h1" in rows["h0"]["detail"]
    after = {
        r["host"]: (r["current"], r["healthy"]) for r in cli("--json", "status", env["v1"], *common).json()["hosts"]
    }
    assert after == {h: (before[h], True) for h in ("h0", "h1")}
    cli("stop", env["v1"], *common)


def placed_by_hand(cache: Path) -> None:
    """Both repos downloaded where the Hub answers (this machine's own cache, as `hf download` fills
    it), then that cache copied into the host's: blobs/, snapshots/<commit>/, links and all."""
    import huggingface_hub.constants
    from huggingface_hub import snapshot_download

    for name in (TARGET, DRAFTER):
        snapshot_download(name, revision=COMMITS[name])
    shutil.copytree(huggingface_hub.constants.HF_HUB_CACHE, cache, symlinks=True)


@contextmanager
def no_route_to(lab: SshLab, host: str, hub: HubEndpoint) -> Iterator[None]:
    """The host's packets to the Hub answered "host unreachable" (an nftables table in its namespace)."""
    namespace = lab.hosts[host].namespace
    assert namespace is not None
    port = hub.url.rsplit(":", 1)[1]
    script = (
        "table inet specctl_nohub {\n  chain output {\n    type filter hook output priority 0; policy accept;\n"
        f"    ip daddr {hub.host} tcp dport {port} reject with icmpx type host-unreachable\n  }}\n}}\n"
    )
    subprocess.run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=script.encode(), check=True)
    try:
        yield
    finally:
        subprocess.run(
            ["ip", "netns", "exec", namespace, "nft", "delete", "table", "inet", "specctl_nohub"], check=False
        )


def test_a_host_with_no_route_to_the_hub_stages_and_deploys_a_snapshot_placed_by_hand(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """Air-gapped: the snapshots reached h1's cache by a copy, and h1 cannot reach the Hub. `stage
    --offline` recognises them complete (config, index, shard sizes from their headers) and stages
    them "content unverified"; without --offline the host finds the Hub unreachable and does the
    same; `deploy --offline` serves them and records their content ids, unverified, in the release."""
    cache = tmp_path / "h1-cache"
    placed_by_hand(cache)
    profile = hub_profile(env, hub, cache=str(cache))
    common = [*env["common"], "--hosts", "h1"]
    with no_route_to(lab, "h1", hub):
        try:
            hub.clear()
            staged = cli("--json", "stage", profile, "--offline", *common)
            assert staged.code == 0, staged.stdout + staged.stderr
            rows = {s["repo"]: s for s in staged.json()["hosts"][0]["staged"]}
            assert set(rows) == {TARGET, DRAFTER}
            assert all(
                not s["verified"] and "--offline" in s["unverified"] and s["fetched"] == 0 for s in rows.values()
            )
            text = cli("stage", profile, "--offline", *common)
            assert text.code == 0 and "content unverified" in text.stdout, text.stdout
            assert "content unverified: the Hub is not asked (--offline)" in " ".join(text.stderr.split())
            assert "specctl stage --verify" in " ".join(text.stderr.split())
            assert hub.log == []  # nobody asked the Hub

            unreached = cli("--json", "stage", profile, *common)  # the operator asks the Hub; h1 cannot
            assert unreached.code == 0, unreached.stdout + unreached.stderr
            assert all("the Hub did not answer" in s["unverified"] for s in unreached.json()["hosts"][0]["staged"]), (
                unreached.stdout
            )

            hub.clear()
            result = cli("--json", "deploy", profile, "--offline", "--no-verify", *common)
            assert result.code == 0, result.stdout + result.stderr
            assert hub.log == []
            events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
            [event] = [e for e in events if e.get("event") == "staged"]
            assert [c["verified"] for c in event["checkpoints"]] == [False, False]
            release = lab.hosts["h1"].root / "tiny-llama-demo" / "releases" / result.json()["hosts"][0]["release"]
            record = {c["repo"]: c for c in json.loads((release / "checkpoints.json").read_text())["checkpoints"]}
            assert set(record) == {TARGET, DRAFTER} and not any(c["verified"] for c in record.values())
            weights = (MODELS / "tiny-llama" / "model.safetensors").read_bytes()
            files = {f["name"]: f for f in record[TARGET]["files"]}
            assert files["model.safetensors"] == {
                "name": "model.safetensors",
                "size": len(weights),
                "id": "sha256:" + hashlib.sha256(weights).hexdigest(),  # as the cache's blob name claims it
                "verified": False,
            }
            assert cli("--json", "status", profile, *common).json()["hosts"][0]["healthy"]
        finally:
            cli("stop", profile, *common)


def test_an_incomplete_snapshot_placed_by_hand_is_refused_naming_the_file(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    cache = tmp_path / "h2-cache"
    placed_by_hand(cache)
    shard = cache / "models--specctl-test--tiny-llama" / "snapshots" / COMMITS[TARGET] / "model.safetensors"
    with open(shard.resolve(), "r+b") as handle:  # a copy cut short
        handle.truncate(shard.stat().st_size - 1000)
    result = cli(
        "--json", "stage", hub_profile(env, hub, cache=str(cache)), "--offline", *env["common"], "--hosts", "h2"
    )
    [row] = result.json()["hosts"]
    assert result.code == 3 and "model.safetensors is" in row["error"] and "implies" in row["error"], result.stdout


def test_stage_verify_hashes_every_file_again_against_the_hubs_checksums(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path
) -> None:
    """A snapshot staged content-unverified becomes verified; a shard corrupted in place with its size
    and mtime kept (which the hash cache cannot see) is found by --verify and fetched again."""
    cache = tmp_path / "h0-cache"
    placed_by_hand(cache)
    profile = hub_profile(env, hub, cache=str(cache))
    common = [*env["common"], "--hosts", "h0"]
    assert cli("--json", "stage", profile, "--offline", *common).code == 0
    refused = cli("--json", "stage", profile, "--offline", "--verify", *common)
    assert refused.code == 2 and "cannot run offline" in refused.stdout, refused.stdout
    verified = cli("--json", "stage", profile, "--verify", *common)
    assert verified.code == 0, verified.stdout + verified.stderr
    rows = verified.json()["hosts"][0]["staged"]
    assert all(s["verified"] and s["hashed"] == s["bytes"] > 0 and s["fetched"] == 0 for s in rows), rows

    shard = cache / "models--specctl-test--tiny-llama" / "snapshots" / COMMITS[TARGET] / "model.safetensors"
    blob, original = shard.resolve(), shard.read_bytes()
    seen = blob.stat()
    with open(blob, "r+b") as handle:  # bit rot: other bytes, same size, same mtime
        handle.seek(len(original) // 2)
        handle.write(bytes(b ^ 0xFF for b in original[len(original) // 2 : len(original) // 2 + 64]))
    os.utime(blob, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    hub.clear()
    assert cli("--json", "stage", profile, *common).code == 0  # the hash cache vouches for it: nothing fetched
    assert hub.file_gets() == [] or all(s.range for s in hub.file_gets())
    again = cli("stage", profile, "--verify", "-o", "wide", *common)  # what a person reads: the re-fetch is said
    assert again.code == 0, again.stdout + again.stderr
    assert shard.read_bytes() == original
    said = " ".join(again.stdout.split())
    assert "hashed again" in said and "re-fetched 1 file" in said and "did not match the Hub's checksum" in said, said
    assert [s.path for s in hub.file_gets() if s.range is None] == [
        f"/{TARGET}/resolve/{COMMITS[TARGET]}/model.safetensors"
    ]


def _stage_processes(root: Path) -> list[int]:
    """Pids of the fetching stage processes (release/_stage_host.py) working for the host whose state
    root is `root` (the lab's hosts share this machine's process table)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        request = argv[-2] if len(argv) > 1 else b""  # the JSON request, last (cmdline ends in a NUL)
        if b'"mode": "fetch"' in request and f'"root": "{root}"'.encode() in request:
            found.append(int(proc.name))
    return found


@pytest.mark.parametrize("host", ["h0", "local"])
def test_a_stage_dies_with_specctl(
    cli: Any, lab: SshLab, env: dict[str, Any], hub: HubEndpoint, tmp_path: Path, host: str
) -> None:
    """Issue 34: specctl SIGKILLed while the host downloads: the host's stage process, in a process
    group of its own, notices its reader gone (over SSH: the connection; locally: the pipe) and ends
    its group within a few seconds."""
    cache = tmp_path / "h0-cache"
    profile = hub_profile(env, hub, cache=str(cache))
    hub.rate_bytes_per_s = 100_000  # 3.7 MB of weights: about forty seconds of staging
    home = tmp_path / "home"  # the `local` host's state root is ~/.specctl/hosts/local
    root = lab.hosts[host].root if host != "local" else home / ".specctl" / "hosts" / "local"
    child = subprocess.Popen(
        [sys.executable, "-m", "specctl", "stage", profile, "--hosts", host, *env["common"]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "NO_COLOR": "1", "HOME": str(home)},
    )
    staging: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not (staging := _stage_processes(root)) and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.1)
        assert staging, "the host never began to fetch"
        # killed while the weights download (not while it plans: a first event written to a dead
        # reader ended even the old stage), past a progress report or two
        while not list(cache.glob("models--*/blobs/*.incomplete")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.5)
        # still fetching; over SSH the host shell's `timeout` and the fetch it starts both carry the
        # request, and the first look may come before `timeout` has started it
        now = _stage_processes(root)
        assert set(staging) <= set(now), f"the stage ended before specctl was killed: {staging} -> {now}"
        staging = now
        groups = {os.getpgid(pid) for pid in staging}
        assert groups == set(staging), "the fetch does not lead a process group of its own"
        child.kill()  # SIGKILL: specctl cannot say goodbye
        child.wait()
        killed = time.monotonic()
        while (left := _stage_processes(root)) and time.monotonic() - killed < 10:
            time.sleep(0.1)
        assert not left, f"stage processes outlived specctl: {left}"
        print(f"the host's stage ended {time.monotonic() - killed:.1f} s after specctl was SIGKILLed")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pid in _stage_processes(root):  # only what this test's specctl started, on failure
            if pid in staging:
                os.kill(pid, signal.SIGKILL)
