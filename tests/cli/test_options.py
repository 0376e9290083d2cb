"""Options that every command shares: named once, given before or after the command, validated
before anything reads a checkpoint or reaches a host."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import typer

from specctl.cli.app import COMMAND_MODULES, build, named_command
from tests.cli.test_runs import seed_story

CONNECTING = ("hosts", "deploy", "status", "logs", "stop", "unlock", "verify", "baseline", "rollback")


def _options(command: str) -> dict[str, Any]:
    group = typer.main.get_command(build())
    cmd = group.commands[command]  # type: ignore[attr-defined]
    return {opt: param for param in cmd.params for opt in getattr(param, "opts", [])}


def test_the_command_map_names_every_command_and_each_narrow_app_holds_its_command() -> None:
    every = typer.main.get_command(build()).commands  # type: ignore[attr-defined]
    assert set(every) == set(COMMAND_MODULES)
    for command in COMMAND_MODULES:
        narrow = typer.main.get_command(build(command)).commands  # type: ignore[attr-defined]
        assert command in narrow and len(narrow) < len(every)


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["check", "p.yaml"], "check"),
        (["--json", "-i", "hosts.yaml", "--ledger", "l.db", "deploy", "p.yaml"], "deploy"),
        (["--inventory=hosts.yaml", "runs"], "runs"),
        (["-i", "check", "status"], "status"),  # "check" is the inventory's file name here
        (["--help"], None),
        (["chekc", "p.yaml"], None),
        ([], None),
    ],
)
def test_the_named_command_skips_the_roots_options(args: list[str], command: str | None) -> None:
    assert named_command(args) == command


def test_a_typo_is_answered_by_the_whole_application(cli: Any) -> None:
    result = cli("chekc", "p.yaml")
    assert result.code == 2 and "chekc" in result.stderr


def test_version(cli: Any) -> None:
    from importlib.metadata import version

    result = cli("--version")
    assert result.code == 0 and result.stdout == f"specctl {version('specctl')}\n"
    assert cli("--json", "--version").json() == {"version": version("specctl")}


@pytest.mark.parametrize("command", CONNECTING)
def test_every_command_that_connects_can_accept_a_new_host_key(command: str) -> None:
    assert "--accept-new-host-key" in _options(command)


@pytest.mark.parametrize("command", [*CONNECTING, "runs"])
def test_hosts_are_named_one_way(command: str) -> None:
    options = _options(command)
    assert "--hosts" in options and "--host" in options and options["--hosts"] is options["--host"]


def test_the_ledger_may_be_named_before_or_after_the_command(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specctl.ledger.ledger import Ledger

    first, second = tmp_path / "a.db", tmp_path / "b.db"
    ids_a = seed_story(first)
    other = Ledger(second)
    other.begin("20261130T000000Z-b0b0b0", "verify", command="c")
    other.close()

    def ids(*args: str) -> list[str]:
        result = cli("--json", *args)
        assert result.code == 0, result.stderr
        return [r["id"] for r in result.json()["runs"]]

    assert ids("--ledger", str(first), "runs") == ids("runs", "--ledger", str(first)) == ids_a
    assert ids("--ledger", str(first), "runs", "--ledger", str(second)) == [
        "20261130T000000Z-b0b0b0"
    ]  # the command's own wins
    monkeypatch.setenv("SPECCTL_LEDGER", str(second))
    assert ids("runs") == ["20261130T000000Z-b0b0b0"]
    assert ids("--ledger", str(first), "runs") == ids_a  # typed beats the environment
    assert cli("--json", "--ledger", str(first), "show", ids_a[2][-6:]).json()["id"] == ids_a[2]


def test_the_inventory_may_be_named_before_the_command(cli: Any, tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("apiVersion: specctl/v1\nkind: Inventory\nhosts:\n  gpu-a: {ssh: a}\n  gpu-b: {ssh: b}\n")
    for args in (
        ["--inventory", str(inventory), "hosts"],
        ["-i", str(inventory), "hosts"],
        ["hosts", "--inventory", str(inventory)],
    ):
        result = cli("--json", *args)
        assert result.code == 0, result.stderr
        assert [h["name"] for h in result.json()["hosts"]] == ["gpu-a", "gpu-b"]
    for args in (["hosts", "gpu-b"], ["hosts", "--hosts", "gpu-b"]):
        assert [h["name"] for h in cli("--json", "-i", str(inventory), *args).json()["hosts"]] == ["gpu-b"]
    missing = cli("--inventory", str(tmp_path / "nope.yaml"), "hosts")
    assert missing.code == 2 and "nope.yaml not found" in missing.stderr


def test_root_options_reach_every_command_that_takes_them() -> None:
    """A subcommand's --ledger, --inventory and --ssh-config fall back to the root's: each has the callback."""
    from specctl.cli._options import _or_root

    group = typer.main.get_command(build())
    seen = set()
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        for param in cmd.params:
            if param.name in ("ledger", "inventory", "ssh_config"):
                assert param.callback is not None, (name, param.name)
                seen.add(param.name)
    assert seen == {"ledger", "inventory", "ssh_config"}
    assert _or_root.__doc__


@pytest.mark.parametrize("command", ["deploy", "verify"])
def test_a_baseline_typo_fails_before_anything_is_read(
    cli: Any, command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from specctl.flows import static

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("static.check ran: the choice was validated too late")

    monkeypatch.setattr(static, "check", never)
    result = cli(command, str(tmp_path / "p.yaml"), "--baseline", "autoo")
    assert result.code == 2
    assert (
        "autoo" in result.stderr and "auto" in result.stderr and "ledger" in result.stderr and "skip" in result.stderr
    )


def test_the_baseline_choices_are_the_flows_modes() -> None:
    from specctl.cli._options import BaselineOpt
    from specctl.flows.baseline import BASELINE_MODES

    choice = typing.get_args(BaselineOpt)[0]
    assert typing.get_args(choice) == BASELINE_MODES


def test_o_is_the_output_format_in_every_command() -> None:
    """`-o json` / `-o wide`, as kubectl and Helm read it; a file to write is `--out`, and the old `-o FILE`
    is a hidden spelling kept for one release."""
    group = typer.main.get_command(build())
    commands = [
        (f"{name} {sub}", subcommand)
        for name, command in group.commands.items()  # type: ignore[attr-defined]
        for sub, subcommand in getattr(command, "commands", {"": command}).items()
    ]
    seen = []
    for name, command in commands:
        options = {opt: param for param in command.params for opt in getattr(param, "opts", [])}
        if "-o" not in options:
            continue
        param, seen = options["-o"], [*seen, name.strip()]
        if param.hidden:
            assert param.name == "legacy_out" and "--out" in options, name
        else:
            assert "json" in typing.get_args(param.type_descriptor.annotation), name
    assert {"runs", "tune", "manifest import"} <= set(seen)


def test_tune_o_file_still_names_the_file_with_a_note(cli: Any, tmp_path: Path) -> None:
    result = cli("tune", str(tmp_path / "missing.yaml"), "-o", str(tmp_path / "next.yaml"))
    note = " ".join(result.stderr.split())
    assert result.code == 2 and f"deprecated and goes in the next release; use --out {tmp_path / 'next.yaml'}" in note
