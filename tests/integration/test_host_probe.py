"""The host's engine as judge, on real sshd hosts with the real sglang 0.5.23 code (the CPU
environment of `make sglang-env`): each host's own interpreter answers the capture probe and the
flag parse, one probe per distinct build, and a host whose sglang was patched is named before
anything is stopped."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.flows import static
from specctl.flows.host_probe import probe_cache, probe_fleet
from specctl.hosts.ssh import ssh_transport
from specctl.hosts.ssh_destination import SshOptions, resolve
from tests.integration.sshd import SshLab

pytestmark = pytest.mark.conformance
ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("h0", "h1", "h2")


def llama_profile(tmp_path: Path, python: str) -> Path:
    """The Llama example with its engine interpreter the sglang CPU environment, on the lab's hosts."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "llama-3.1-8b-eagle3.yaml").write_text(
        (ROOT / "manifests" / "llama-3.1-8b-eagle3.yaml").read_text()
    )
    data = yaml.safe_load((ROOT / "profiles" / "llama-3.1-8b-b200.yaml").read_text())
    data["engine"]["python"] = python
    data["hosts"] = list(HOSTS)
    path = tmp_path / "profiles" / "llama.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def patched_llama(python: str, tmp_path: Path) -> tuple[str, Path]:
    """sglang's llama.py with the +1 of its EAGLE-3 setter removed: a local patch nobody wrote down."""
    original = (
        subprocess.run(
            [python, "-c", "import importlib.util as u; print(u.find_spec('sglang').submodule_search_locations[0])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        + "/srt/models/llama.py"
    )
    text = Path(original).read_text()
    setter = text.index("def set_eagle3_layers_to_capture")
    patched, count = re.subn(r"\[val \+ 1 for val in layer_ids\]", "[val for val in layer_ids]", text[setter:], count=1)
    assert count == 1, "the setter this test patches moved"
    patched = text[:setter] + patched
    (tmp_path / "llama.py").write_text(patched)
    return original, tmp_path / "llama.py"


def test_one_probe_per_build_and_the_patched_host_is_named(
    lab: SshLab, sglang_python: str, hub_env: Path, tmp_path: Path, cli: Any
) -> None:
    if lab.hosts["h2"].namespace is None:
        pytest.skip("a host's own sglang file needs a mount namespace of its own")
    profile = llama_profile(tmp_path, sglang_python)
    inputs = static.check(profile, offline=True).inputs
    options = SshOptions(config_path=str(lab.ssh_config), connect_timeout_s=5)
    transports = {name: ssh_transport(name, resolve(name, options), options) for name in HOSTS}
    original, patched = patched_llama(sglang_python, tmp_path)
    host = lab.hosts["h2"]
    host.binds = {original: str(patched)}
    lab.stop_sshd(host)
    lab.start_sshd(host)
    try:
        cache = probe_cache()  # this machine's cache (under the test's own XDG_CACHE_HOME): the commands' too
        fleet = probe_fleet(inputs, transports, sglang_python, cache=cache)
        assert fleet.builds["h0"] == fleet.builds["h1"] != fleet.builds["h2"]
        assert fleet.builds["h0"].version == fleet.builds["h2"].version == "0.5.23"  # same version, another build
        assert fleet.probed == 2  # one probe per build, not per host
        said = fleet.disagreement()
        assert said is not None and said.startswith("h0, h1 (sglang 0.5.23") and "vs h2 (sglang 0.5.23" in said
        agrees = fleet.report("h0")
        assert agrees is not None and not agrees.disagreements  # the unpatched build agrees with the table
        patched_report = fleet.report("h2")
        assert patched_report is not None and patched_report.disagreements  # and the patched one does not

        again = probe_fleet(inputs, transports, sglang_python, cache=cache)
        assert again.probed == 0 and again.disagreement() == said  # nothing changed: answered from the cache

        common = [
            "--inventory",
            str(lab.inventory(tmp_path / "hosts.yaml", sglang_python)),
            "--ssh-config",
            str(lab.ssh_config),
            "--offline",
        ]
        on_h2 = cli("--json", "check", str(profile), "--on", "h2", *common)
        codes = {f["code"] for f in on_h2.json()["findings"]}
        assert "probe-disagrees" in codes and "host-engines" in codes, on_h2.stdout
        on_h0 = cli("--json", "check", str(profile), "--on", "h0", *common)
        codes = {f["code"] for f in on_h0.json()["findings"]}
        assert "probe-agrees" in codes and "probe-disagrees" not in codes, on_h0.stdout

        refused = cli("deploy", str(profile), "--dry-run", *common)  # before anything is read or stopped on a host
        assert refused.code == 1 and "host-engines-disagree" in refused.stderr and "h2" in refused.stderr, (
            refused.stderr
        )
        assert len(list(cache.iterdir())) == 2  # the commands asked the same of the same builds: no probe of their own
    finally:
        host.binds = {}
        lab.stop_sshd(host)
        lab.start_sshd(host)
