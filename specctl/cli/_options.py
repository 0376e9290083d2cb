"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.text import Text

from specctl.cli._output import Output
from specctl.errors import InputError

if TYPE_CHECKING:
    from specctl.facts.remote import ReadOnHosts
    from specctl.flows.static import CheckReport
    from specctl.hosts.inventory import HostSpec
    from specctl.profile import Profile

ProfileArg = Annotated[Path, typer.Argument(help="Profile YAML file.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
OfflineOpt = Annotated[
    bool,
    typer.Option("--offline", envvar="HF_HUB_OFFLINE", help="Read Hugging Face metadata from the local cache only."),
]
AssumeOpt = Annotated[
    str | None,
    typer.Option(
        "--assume-convention",
        metavar="VERSION[:ARCH]",
        help="Use the capture convention of this engine version (and architecture) instead of the profile's.",
    ),
]
EnginePythonOpt = Annotated[
    str | None,
    typer.Option(
        "--engine-python",
        metavar="PATH",
        help="Ask the engine installed for this interpreter (its own capture code and parser) instead of the table.",
    ),
]


def _or_root(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """The subcommand's own value; else the same option given before it (`specctl --ledger X runs`),
    which wins over the environment variable because it was typed."""
    source = ctx.get_parameter_source(param.name) if param.name else None
    if param.name is None or (
        source is not None and source.name == "COMMANDLINE"
    ):  # typer's click is its own copy: by name
        return value
    given: str | None = ctx.find_root().params.get(param.name)
    return given if given is not None else value


HostsOpt = Annotated[
    str | None, typer.Option("--hosts", "--host", help="Hosts or groups, comma-separated (default: the profile's).")
]
InventoryOpt = Annotated[
    str | None,
    typer.Option(
        "--inventory",
        "-i",
        envvar="SPECCTL_INVENTORY",
        callback=_or_root,
        help="Inventory file (default ./hosts.yaml).",
    ),
]
SshConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--ssh-config",
        envvar="SPECCTL_SSH_CONFIG",
        callback=_or_root,
        help="ssh_config to use (default ~/.ssh/config).",
    ),
]
LedgerOpt = Annotated[
    str | None,
    typer.Option(
        "--ledger", envvar="SPECCTL_LEDGER", callback=_or_root, help="Ledger file (default: the XDG data directory)."
    ),
]
AcceptOpt = Annotated[
    bool, typer.Option("--accept-new-host-key", help="Add an unknown host key to known_hosts (never a changed one).")
]
# `-o` is the output format in every command (`-o json`, `-o wide`), as kubectl and Helm users read it;
# where it once named a file to write, that spelling stays for one release (see `out_file`)
LegacyOutOpt = Annotated[
    str | None,
    typer.Option("-o", "--output", metavar="FILE", hidden=True, help="Deprecated: use --out FILE; -o json is --json."),
]
FormatOpt = Annotated[
    Literal["normal", "wide", "json"],
    typer.Option(
        "-o",
        "--output",
        help="normal: what fits the terminal; wide: every column, and each host's gates; json: as --json.",
    ),
]
ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why (recorded with the run).")]
# a choice, so a typo is a usage error (exit 2) before anything reads a checkpoint or reaches a host
BaselineOpt = Annotated[
    Literal["auto", "ledger", "skip"],
    typer.Option("--baseline", help="auto: run a baseline when none matches; ledger: only a recorded one; skip."),
]


def command_output(ctx: typer.Context, json_mode: bool) -> Output:
    """The command's output sink, in JSON mode when the command or the root said --json."""
    output: Output = ctx.obj
    output.json_mode = output.json_mode or json_mode
    return output


def out_file(output: Output, out: Path | None, legacy: str | None) -> Path | None:
    """The file `--out` names. `-o json`, `-o wide` and `-o normal` are the output format (the command
    reads `wide` itself); `-o FILE` and `--output FILE`, the old spelling, still write FILE for one
    release, with a note on stderr naming --out."""
    if legacy is None or legacy in ("normal", "wide"):
        return out
    if legacy == "json":
        output.json_mode = True
        return out
    if out is not None:
        raise InputError(f"--out {out} and -o {legacy} both name a file to write", fix="pass --out FILE only")
    output.err.print(
        Text(
            f"note: -o/--output FILE is deprecated and goes in the next release; use --out {legacy} "
            "(-o is the output format, as in -o json)"
        )
    )
    return Path(legacy)


def selected_hosts(profile_hosts: list[str], hosts: str | None, inventory: str | None) -> list[HostSpec]:
    """--hosts (names and groups, comma-separated), else the profile's hosts, resolved in the inventory."""
    from specctl.hosts.inventory import inventory_path, resolve_hosts

    names = [h.strip() for h in hosts.split(",") if h.strip()] if hosts else profile_hosts
    if not names:
        raise InputError(
            "no hosts: the profile lists none and --hosts was not given",
            fix="add `hosts:` to the profile or pass --hosts",
        )
    return resolve_hosts(names, inventory_path(inventory))


OnOpt = Annotated[
    str | None,
    typer.Option(
        "--on",
        metavar="HOST",
        help="Read checkpoints given as host paths on this inventory host (over SSH), even when this machine has them.",
    ),
]


def facts_on_hosts(
    on: str | None, inventory: str | None, ssh_config: str | None, accept_new_host_key: bool
) -> ReadOnHosts:
    """Where check reads host-path checkpoints this machine cannot see: `--on HOST` (always there),
    else the first of the profile's hosts."""
    from specctl.facts.remote import ReadOnHosts
    from specctl.hosts.inventory import inventory_path, resolve_hosts

    def hosts(profile: Profile) -> list[HostSpec]:
        return resolve_hosts([on] if on else profile.hosts, inventory_path(inventory))

    return ReadOnHosts(hosts, ssh_config, accept_new_host_key, forced=on is not None)


def engines_as_judge(
    report: CheckReport, hosts: list[HostSpec], ssh_config: str | None, accept_new_host_key: bool
) -> CheckReport:
    """The report judged by each host's own engine (one probe per build), when the engine can be asked."""
    from specctl.flows.host_probe import judged, probes_on_hosts

    if not hosts or not probes_on_hosts(report.inputs):
        return report
    transports = {h.name: h.transport(ssh_config=ssh_config, accept_new_host_key=accept_new_host_key) for h in hosts}
    return judged(report, transports, report.inputs.profile.engine.python)
