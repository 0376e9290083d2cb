"""The specctl application: wires the command groups and maps errors to exit codes (0 success,
1 a check or gate failed, 2 bad input, 3 a host failed, 4 deployed but rolled back)."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from typing import IO, TYPE_CHECKING, Annotated

import typer

from specctl.cli._output import Output

if TYPE_CHECKING:
    from typer import _click  # typer's own copy of click: what its commands are

# the module that registers each command: a command line that names one builds only that module's
# commands (typer builds every parameter of every command it is given; half the cold start)
COMMAND_MODULES = {
    "validate": "profiles",
    "check": "profiles",
    "render": "profiles",
    "demo": "demo",
    "hosts": "hosts_cmds",
    "deploy": "hosts_cmds",
    "status": "hosts_cmds",
    "logs": "hosts_cmds",
    "stop": "hosts_cmds",
    "unlock": "hosts_cmds",
    "stage": "hosts_cmds",
    "verify": "verify_cmds",
    "baseline": "verify_cmds",
    "rollback": "verify_cmds",
    "tune": "tune_cmds",
    "watch": "watch_cmds",
    "runs": "runs_cmds",
    "show": "runs_cmds",
    "diff": "runs_cmds",
    "manifest": "manifest",
    "schema": "schema_cmds",
}
_ROOT_VALUE_OPTIONS = frozenset({"--inventory", "-i", "--ssh-config", "--ledger"})


def _version(ctx: typer.Context, value: bool) -> None:
    """--version: the installed distribution's version, then exit."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    from specctl import __version__

    try:
        number = version("specctl")
    except PackageNotFoundError:  # run from a source tree that was never installed
        number = __version__
    output = ctx.obj if isinstance(ctx.obj, Output) else Output()
    output.result({"version": number}, f"specctl {number}")
    raise typer.Exit(0)


def _root(
    ctx: typer.Context,
    json_mode: Annotated[
        bool, typer.Option("--json", help="Machine-readable JSON on stdout, for every command.")
    ] = False,
    # the same options every command takes, given once before it: the command's own value wins
    inventory: Annotated[
        str | None, typer.Option("--inventory", "-i", help="Inventory file, for every command that reaches hosts.")
    ] = None,
    ssh_config: Annotated[
        str | None, typer.Option("--ssh-config", help="ssh_config, for every command that reaches hosts.")
    ] = None,
    ledger: Annotated[
        str | None, typer.Option("--ledger", help="Ledger file, for every command that reads or writes it.")
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_version, help="Print the version and exit.")
    ] = False,
) -> None:
    if not isinstance(ctx.obj, Output):
        ctx.obj = Output()
    ctx.obj.json_mode = ctx.obj.json_mode or json_mode


def build(command: str | None = None) -> typer.Typer:
    """The application: every command, or only the module that registers `command`."""
    app = typer.Typer(
        name="specctl",
        help="Deploy, verify and roll back EAGLE-3 speculative decoding on SGLang, from versioned profiles.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    every = dict.fromkeys(COMMAND_MODULES.values())  # the order of the help's command list
    for name in [COMMAND_MODULES[command]] if command in COMMAND_MODULES else every:
        module = importlib.import_module(f"specctl.cli.{name}")
        if name == "manifest":
            app.add_typer(module.app, name="manifest")
        else:
            module.register(app)
    return app


@functools.cache
def _click_command(module: str | None) -> _click.Command:
    """The parser of one command module (None: of all), built once per process: typer reads every
    parameter's annotations to build it, the most of a command's start-up, and a program that runs
    the CLI again and again inside itself (the tests) would pay it on every run. Click's commands
    keep no state between runs: each run has a context of its own."""
    command = next((name for name, owner in COMMAND_MODULES.items() if owner == module), None)
    return typer.main.get_command(build(command))


def named_command(args: list[str]) -> str | None:
    """The command a command line names, skipping the root's options; None when it names none
    (help, --version, a typo: the whole application answers those)."""
    values_follow = False
    for arg in args:
        if values_follow:
            values_follow = False
        elif arg in _ROOT_VALUE_OPTIONS:
            values_follow = True
        elif not arg.startswith("-"):
            return arg if arg in COMMAND_MODULES else None
    return None


def main(argv: list[str] | None = None, *, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    """Console-script entry point: run the app, print any specctl error in one place, exit with its code.

    Without `argv` this is the process (`specctl`, `python -m specctl`): a SIGINT or SIGTERM stops the
    command cleanly and it exits 128 + the signal's number (130, 143). With `argv`, a Python program
    runs the CLI inside itself (the tests do): the signal is also passed on to that program once the
    command has unwound and reported (cancel.passed_on), so one Ctrl-C stops the program too."""
    if argv is None:
        return _main(sys.argv[1:], stdout, stderr)
    from specctl.cancel import passed_on

    with passed_on():
        return _main(argv, stdout, stderr)


def _main(args: list[str], stdout: IO[str] | None, stderr: IO[str] | None) -> int:
    from specctl.cli._errors import report
    from specctl.hosts.connections import held

    # pydantic scans every installed distribution for plugins at the first model; specctl uses none
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _quiet_paramiko()
    output = Output(json_mode="--json" in args, stdout=stdout or sys.stdout, stderr=stderr or sys.stderr)
    try:
        completing = any(key.endswith("_COMPLETE") for key in os.environ)  # shell completion needs every command
        command = _click_command(None if completing else COMMAND_MODULES.get(named_command(args) or ""))
        with held():  # one connection per host for the whole command, closed when it ends
            result = command.main(args=args, standalone_mode=False, obj=output)
        if isinstance(result, int):  # click returns a typer.Exit's code when not standalone
            return result
    except typer.Exit as exc:
        return int(exc.exit_code)
    except SystemExit as exc:
        return int(exc.code or 0)
    except typer.Abort:
        output.err.print("aborted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):  # a usage error from the argument parser
            show(file=output.stderr)
            return code
        return report(exc, output)
    return 0


def _quiet_paramiko() -> None:
    """paramiko logs its own failures (a bad banner, a reset connection) at ERROR, with tracebacks, from
    its threads; with no logging configured Python prints them on stderr, around specctl's own report
    of the same failure with its fix. A program that configured logging keeps what it chose, and
    SPECCTL_DEBUG=1 keeps paramiko's lines."""
    import logging

    paramiko_log = logging.getLogger("paramiko")
    if os.environ.get("SPECCTL_DEBUG") == "1" or paramiko_log.handlers or logging.getLogger().handlers:
        return
    paramiko_log.addHandler(logging.NullHandler())
    paramiko_log.propagate = False


if __name__ == "__main__":
    sys.exit(main())
