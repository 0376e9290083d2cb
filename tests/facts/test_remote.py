"""The host-side checkpoint reader, run for real (this machine's `local` transport, a real interpreter):
it gives the same facts as the operator-side reader, refuses broken files with the host named, and
the comparison of hosts' copies says which hosts differ and in what."""

from __future__ import annotations

import dataclasses
import os
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from examples.hub import eagle3_tensors, llama_tensors, write_checkpoint
from specctl.errors import CheckpointError, HostError
from specctl.facts.checkpoint import read_local
from specctl.facts.remote import HostCheckpoint, differences, read_all, read_on_host
from specctl.flows.demo import MODELS
from specctl.hosts.local import local_transport
from tests.factory import DRAFTER_CONFIG, TARGET_CONFIG, Scenario

PYTHON = sys.executable


def on_host(path: Path, revision: str | None = None) -> Any:
    return read_on_host(local_transport(), PYTHON, str(path), revision)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-llama-eagle3"])
def test_the_shipped_models_read_on_a_host_equal_the_local_reader(name: str) -> None:
    assert on_host(MODELS / name) == read_local(MODELS / name)


def test_an_indexed_sharded_checkpoint_with_a_revision(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "t", TARGET_CONFIG, llama_tensors(TARGET_CONFIG), shards=3)
    (path / "tokenizer.json").write_text("{}")
    (path / "extra.safetensors").symlink_to(path / "model-00001-of-00003.safetensors")  # not in the index: not read
    meta = on_host(path, "abc")
    assert meta == read_local(path, "abc") and meta.revision == "abc"
    assert (meta.architecture, meta.num_hidden_layers, meta.hidden_size) == ("LlamaForCausalLM", 32, 256)
    assert "model-00003-of-00003.safetensors" in meta.files and "extra.safetensors" in meta.files
    [answer] = read_all(local_transport(), PYTHON, [str(path)]).values()
    assert answer.shards == tuple(f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3))


def test_a_drafter_without_an_index_reads_every_shard_present(tmp_path: Path) -> None:
    config = {**DRAFTER_CONFIG, "target_hidden_size": 256}
    path = write_checkpoint(tmp_path / "d", config, eagle3_tensors(config, 256))
    meta = on_host(path)
    assert meta == read_local(path)
    assert (meta.fc_weight_shape, meta.d2t_length) == ((256, 768), 200)


def test_a_truncated_header_is_refused_with_the_host_and_the_shard(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "t", TARGET_CONFIG, [("a", "F32", (2, 2))])
    shard = path / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:20])
    with pytest.raises(
        CheckpointError, match=r"on host local: .*model\.safetensors: file ends inside the header"
    ) as info:
        on_host(path)
    assert info.value.source == str(path) and "truncated" in (info.value.fix or "")
    shard.write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match="shorter than the 8-byte header length"):
        on_host(path)


def test_an_oversized_or_garbage_header_is_refused(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "t", TARGET_CONFIG, [("a", "F32", (2, 2))])
    shard = path / "model.safetensors"
    shard.write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(CheckpointError, match="exceeds the format's limit"):
        on_host(path)
    header = b'{"a": {"dtype": "F32", "shape": "x", "data_offsets": [0]}}'
    shard.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(CheckpointError, match="malformed safetensors header entry 'a'"):
        on_host(path)
    shard.write_bytes(struct.pack("<Q", 4) + b"[1] ")
    with pytest.raises(CheckpointError, match="not a JSON object"):
        on_host(path)


def test_missing_directory_config_and_shard_are_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"on host local: checkpoint directory .*/nope does not exist") as info:
        on_host(tmp_path / "nope")
    assert "copy the checkpoint to" in (info.value.fix or "") and "on local" in (info.value.fix or "")
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match="is not a directory"):
        on_host(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="config.json not found"):
        on_host(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot parse"):
        on_host(tmp_path / "empty")
    path = write_checkpoint(tmp_path / "t", TARGET_CONFIG, llama_tensors(TARGET_CONFIG), shards=2)
    (path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="shard model-00002-of-00002.safetensors listed in"):
        on_host(path)


def test_a_fifo_for_config_is_an_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    os.mkfifo(tmp_path / "m" / "config.json")
    with pytest.raises(CheckpointError, match="not a regular file"):
        on_host(tmp_path / "m")


def test_both_checkpoints_in_one_round_trip_each_with_its_own_answer(tmp_path: Path) -> None:
    good = write_checkpoint(tmp_path / "t", TARGET_CONFIG, [("a", "F32", (2, 2))])
    found = read_all(local_transport(), PYTHON, [str(good), str(tmp_path / "gone")])
    assert found[str(good)].meta is not None and found[str(good)].error is None
    assert found[str(tmp_path / "gone")].kind == "missing"


def test_an_interpreter_the_host_lacks_is_a_host_error(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="not found"):
        read_on_host(local_transport(), str(tmp_path / "no-python"), str(MODELS / "tiny-llama"))


def copies(tmp_path: Path, **configs: dict[str, Any]) -> list[HostCheckpoint]:
    """One checkpoint per host name, each read for real, renamed to its host."""
    out = []
    for host, config in configs.items():
        path = write_checkpoint(tmp_path / host, config, llama_tensors(config))
        [answer] = read_all(local_transport(), PYTHON, [str(path)]).values()
        out.append(dataclasses.replace(answer, host=host, path="/data/models/t"))
    return out


def test_differences_name_the_hosts_and_what_differs(tmp_path: Path) -> None:
    wider = {**TARGET_CONFIG, "hidden_size": 512}
    same = copies(tmp_path / "a", h0=TARGET_CONFIG, h1=TARGET_CONFIG)
    assert differences(same) is None
    text = differences(copies(tmp_path / "b", h0=TARGET_CONFIG, h1=TARGET_CONFIG, h2=wider))
    assert text is not None and text.startswith("/data/models/t: h0+h1 vs h2: ")
    assert "config.json hidden_size: 256 on h0, 512 on h2" in text
    assert "header tensors (" in text and "on h2" in text
    missing = HostCheckpoint(
        "h3", "/data/models/t", kind="missing", problem="checkpoint directory /data/models/t does not exist"
    )
    text = differences([*same, missing])
    assert text == "/data/models/t: h0+h1 vs h3: on h3: checkpoint directory /data/models/t does not exist"


def test_check_on_a_named_host_reads_there_and_says_so(tmp_path: Path, cli: Any) -> None:
    """`check --on local`: the facts come from the reader script even though this machine has the
    files, the checks pass on them, and the report says where they were read."""
    scenario = Scenario(tmp_path)
    scenario.profile["engine"]["python"] = PYTHON
    profile = scenario.write()
    result = cli("--json", "check", str(profile), "--on", "local")
    assert result.code == 0, result.stdout + result.stderr
    data = result.json()
    [source] = [f for f in data["findings"] if f["code"] == "facts-source"]
    assert (
        source["severity"] == "info" and source["message"] == "checkpoint facts: target and drafter read on host local"
    )
    assert data["facts"]["target"] == {"model": str(tmp_path / "target"), "where": "host local", "hosts": ["local"]}
    plain = cli("--json", "check", str(profile)).json()
    assert plain["facts"]["drafter"]["where"] == "this machine" and "facts-source" not in {
        f["code"] for f in plain["findings"]
    }
    on_host = {"facts-source", "host-engine-probe"}  # --on also asks the host's engine (not installed here: said)
    assert "host-engine-probe" in {f["code"] for f in data["findings"]}
    assert [f for f in plain["findings"] if f["code"] not in on_host] == [
        f for f in data["findings"] if f["code"] not in on_host
    ]


def test_an_unreadable_path_with_no_host_to_read_it_on_keeps_the_local_error(tmp_path: Path, cli: Any) -> None:
    scenario = Scenario(tmp_path)
    scenario.profile["target"]["model"] = "/nonexistent/specctl-test/target"
    scenario.profile["hosts"] = ["gpu-0"]  # no inventory names it
    result = cli("--json", "check", str(scenario.write()))
    assert result.code == 1
    [finding] = [f for f in result.json()["findings"] if f["code"] == "checkpoint-unreadable"]
    assert (
        "does not exist" in finding["message"]
        and "not read on the profile's host either: unknown host" in finding["message"]
    )
    assert "--on HOST" in finding["fix"]
    assert result.json()["facts"]["target"]["where"] == "this machine"
