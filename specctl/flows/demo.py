"""`specctl demo`: the product's own workflow, end to end on this machine.

In a work directory it writes two versions of a profile for the shipped tiny models (v1 serves the
drafter on the layers it was trained on; v2 "fixes" its ids to a same-width wrong list, the seed
incident in miniature), an inventory naming the `local` host with its state directory inside the
work directory, and a ledger. Then it runs the flows the commands run, on the `local` host (the
same release, staging and verify code as an SSH host):

    check v1                  ok
    deploy v1                 verified (accept length gate 3.0), recorded verified
    baseline v1               the target without speculation: speedup has something to divide by
    deploy v2 --skip-check    verify fails on accept length; the host rolls back to v1 by itself
    watch --once              under users' chat traffic (the domain the drafter knows): ok
    watch --once --on-degraded plain
                              the traffic moves to document tasks: accept length about 2, degraded,
                              and the host falls back to serving without speculation
    runs, diff                what the ledger recorded, and what changed between the two deploys
    check v2                  the static check that would have refused v2 before it started
    stop                      nothing is left running

The gate is on accept length only: about 3.5 against 1.9 on any machine, where speedup on a shared
CPU swings too much to gate on (it is shown as measured).
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specctl.cancel import NEVER, CancelToken
from specctl.errors import InputError
from specctl.flows import static
from specctl.flows.report import HostReport
from specctl.flows.session import Context
from specctl.hosts.inventory import HostSpec, resolve_hosts
from specctl.hosts.local import LOCAL
from specctl.plan.findings import Finding, Severity

MODELS = Path(__file__).resolve().parents[1] / "engines" / "reference" / "models"
TARGET, DRAFTER = "tiny-llama", "tiny-llama-eagle3"
NAME = "tiny-llama-demo"
WATCH_WINDOW_S = 12.0  # each watch step's window: a dozen looks, a few dozen requests
WRONG_IDS = [-1, 1, 3]  # same width: the embedding and layers 1 and 3 instead of 1, 3 and 4
MIN_ACCEPT_LENGTH = 3.0  # v1 measures about 3.5, v2 about 1.9: decided within the first 8 requests
MARKER = ".specctl-demo"  # a work directory the demo made, so it may start it afresh
STARTUP_BUDGET_S = 120.0  # the tiny models answer in 1-3 s, more on a loaded machine


def write_inputs(workdir: Path, port: int, *, gates: bool = False, requests: int = 8) -> tuple[Path, Path]:
    """The demo's manifest and two profile versions, with absolute paths to the shipped models;
    `gates` adds the accept-length gate (the tests that deploy v2 on its own leave it out)."""
    manifest_src = yaml.safe_load((MODELS / f"{DRAFTER}.manifest.yaml").read_text())
    target, drafter = str(MODELS / TARGET), str(MODELS / DRAFTER)
    manifest_src["drafter"] = {"model": drafter}
    manifest_src["target"] = {**manifest_src["target"], "model": target}
    manifest_src["target"].pop("revision", None)
    manifest_src["target"].pop("allow_unpinned", None)
    (workdir / "manifests").mkdir(parents=True, exist_ok=True)
    (workdir / "profiles").mkdir(parents=True, exist_ok=True)
    (workdir / "manifests" / "tiny-llama-eagle3.yaml").write_text(yaml.safe_dump(manifest_src, sort_keys=False))
    verify: dict[str, Any] = {"workload": "chat-small", "requests": requests, "max_new_tokens": 64}
    if gates:
        verify["min_accept_length"] = MIN_ACCEPT_LENGTH
    v1: dict[str, Any] = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "metadata": {"name": NAME, "version": 1, "description": "the shipped tiny models on the reference engine"},
        "target": {"model": target},
        "drafter": {"model": drafter, "manifest": "../manifests/tiny-llama-eagle3.yaml"},
        "speculative": {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
        "parallel": {"tp": 1},
        "hardware": {"gpu": "cpu", "gpus_per_node": 1},
        "engine": {"name": "reference", "version": "0.5.23", "python": _python(), "host": "127.0.0.1", "port": port},
        "verify": verify,
        "hosts": [LOCAL],
    }
    v2 = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "extends": "tiny-llama-v1.yaml",
        "metadata": {"name": NAME, "version": 2, "description": "ids 'fixed' to a same-width wrong list"},
        "drafter": {"layer_ids": WRONG_IDS},
    }
    (workdir / "profiles" / "tiny-llama-v1.yaml").write_text(yaml.safe_dump(v1, sort_keys=False))
    (workdir / "profiles" / "tiny-llama-v2.yaml").write_text(yaml.safe_dump(v2, sort_keys=False))
    return workdir / "profiles" / "tiny-llama-v1.yaml", workdir / "profiles" / "tiny-llama-v2.yaml"


def write_inventory(workdir: Path) -> Path:
    """hosts.yaml naming `local` (this machine, no SSH) with its state directory in the work
    directory, so nothing lands in ~/.specctl and the printed commands find the same releases."""
    path = workdir / "hosts.yaml"
    inventory = {
        "apiVersion": "specctl/v1",
        "kind": "Inventory",
        "hosts": {LOCAL: {"root": str((workdir / "hosts" / LOCAL).absolute())}},
    }
    path.write_text(
        "# `local` is built in; it is named here only to keep its releases in this directory\n"
        + yaml.safe_dump(inventory, sort_keys=False)
    )
    return path


def _python() -> str:
    import sys

    return sys.executable


@dataclass(frozen=True)
class DemoStep:
    """One step of the demo: the command line that does the same, and what it returned, as data
    (what that command prints under --json)."""

    name: str  # check-v1, deploy-v1, baseline, deploy-v2, runs, diff, check-v2, stop
    command: str
    data: dict[str, Any]


@dataclass
class DemoResult:
    """The whole demo as data: the steps in order, the headline numbers and the commands to try next."""

    workdir: str
    ledger: str
    inventory: str
    profiles: dict[str, str]
    steps: list[DemoStep] = field(default_factory=list)
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)  # v1, baseline, v2: the headline numbers
    next_commands: list[str] = field(default_factory=list)

    @property
    def as_expected(self) -> bool:
        """v1 passed its verify, v2 failed its own and was rolled back to v1; watch found v1 ok on chat,
        then degraded once the traffic moved, and fell back to plain decoding."""
        first, wrong = self.summary.get("v1", {}), self.summary.get("v2", {})
        ok, shifted = self.summary.get("watch", {}), self.summary.get("watch-shift", {})
        return (
            bool(first.get("passed"))
            and wrong.get("passed") is False
            and bool(wrong.get("rolled_back_to"))
            and ok.get("state") == "ok"
            and shifted.get("state") == "degraded"
            and str(shifted.get("action") or "").startswith("plain")
        )

    def step(self, name: str) -> DemoStep:
        return next(s for s in self.steps if s.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workdir": self.workdir,
            "ledger": self.ledger,
            "inventory": self.inventory,
            "profiles": self.profiles,
            "steps": [{"step": s.name, "command": s.command, **s.data} for s in self.steps],
            "summary": self.summary,
            "as_expected": self.as_expected,
            "next": self.next_commands,
        }


@contextmanager
def traffic(url: str, workload: str, clients: int = 2) -> Iterator[None]:
    """Users' requests from a built-in workload, `clients` at a time, until the block ends (what
    `watch` measures; a request refused while the server is being replaced is tried again)."""
    from specctl.verdict.client import EngineClient
    from specctl.verdict.engine_errors import EngineHTTPError
    from specctl.verdict.measure import Prompts
    from specctl.verdict.workload import load_workload

    stop = threading.Event()
    prompts = Prompts(load_workload(workload))

    def user(offset: int) -> None:
        client = EngineClient(url, timeout_s=60)
        i = offset
        while not stop.is_set():
            try:
                prompts.send(client, i, max_new_tokens=64, temperature=0.0)
            except EngineHTTPError:
                stop.wait(0.5)
            i += clients

    users = [threading.Thread(target=user, args=(n,), daemon=True) for n in range(clients)]
    for thread in users:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in users:
            thread.join(timeout=60)


def need_reference_engine() -> None:
    """The demo serves on the reference engine, which needs torch: say how to get it before
    anything starts, rather than leave a server's traceback in a log."""
    missing = [m for m in ("torch", "numpy") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(
            f"the demo runs the reference engine, which needs {' and '.join(missing)} (not installed here)",
            fix="pip install 'specctl[reference]'",
        )


def prepare(workdir: Path) -> None:
    """Make the work directory, or start a previous demo's afresh (its servers stopped, its ledger
    and releases removed); a directory with anything else in it is refused."""
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / MARKER).exists() and not (workdir / "profiles" / "tiny-llama-v1.yaml").exists():
            raise InputError(
                f"{workdir} is not empty and not a demo work directory",
                fix="pass --workdir with a new or empty directory",
            )
        state = workdir / "hosts" / LOCAL
        if state.is_dir():
            from specctl.flows.servers import Reach, stop

            stopped = stop(
                Reach(), NAME, [HostSpec(LOCAL, str(state.absolute()), None, None, {})], command="specctl demo"
            )
            if isinstance(stopped[LOCAL], str):
                raise InputError(
                    f"cannot stop the previous demo's server: {stopped[LOCAL]}",
                    fix=f"stop it (specctl stop {workdir / 'profiles' / 'tiny-llama-v1.yaml'}"
                    f" --inventory {workdir / 'hosts.yaml'}), or pass another --workdir",
                )
            shutil.rmtree(state)
        for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
            (workdir / name).unlink(missing_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).touch()


def run_demo(
    workdir: Path,
    *,
    port: int = 31000,
    requests: int = 24,
    cancel: CancelToken = NEVER,
    on_step: Callable[[DemoStep], None] = lambda step: None,
    progress: Callable[[str, str], None] = lambda host, text: None,
) -> DemoResult:
    """Check, deploy, baseline, deploy the broken version, read the ledger, check again, stop."""
    from specctl.flows.baseline import baseline
    from specctl.flows.deploy import deploy
    from specctl.flows.servers import Reach, stop
    from specctl.ledger.history import brief, metrics, run_diff
    from specctl.ledger.ledger import Ledger
    from specctl.verdict import gates
    from specctl.verdict.points import baseline_rows

    need_reference_engine()
    workdir = workdir.absolute()
    prepare(workdir)
    v1, v2 = write_inputs(workdir, port, gates=True, requests=requests)
    inventory = write_inventory(workdir)
    ledger_file = workdir / "ledger.db"
    [host] = resolve_hosts([LOCAL], inventory)
    result = DemoResult(str(workdir), str(ledger_file), str(inventory), {"v1": str(v1), "v2": str(v2)})
    ctx = Context(
        Ledger(ledger_file),
        "specctl demo",
        budget_s=STARTUP_BUDGET_S,
        cancel=cancel,
        on_progress=progress,
        on_note=progress,
    )

    def step(name: str, command: str, data: dict[str, Any]) -> None:
        done = DemoStep(name, command, data)
        result.steps.append(done)
        on_step(done)

    def check(name: str, profile: Path) -> static.CheckReport:
        report = static.check(profile)
        findings = [f.to_dict() for f in report.findings]
        p = report.inputs.profile
        step(
            name,
            _line("check", profile),
            {
                "profile": str(profile),
                "name": p.metadata.name,
                "version": p.metadata.version,
                "ok": not _errors(report.findings),
                "findings": findings,
            },
        )
        return report

    def as_command(line: str) -> str:
        """What the ledger records as the run's command (and the host's lock as its holder)."""
        ctx.command = f"{line}  # by specctl demo"
        return line

    def watch_step(name: str, report: static.CheckReport, *extra: str) -> list[dict[str, Any]]:
        """One window of `watch --once` (WATCH_WINDOW_S long), judged and acted on as the command does."""
        from specctl.flows.watch import WatchOptions, watch

        line = as_command(
            _line(
                "watch",
                report.inputs.profile_path,
                "--once",
                "--window",
                f"{WATCH_WINDOW_S}s",
                *extra,
                "--inventory",
                inventory,
                "--ledger",
                ledger_file,
            )
        )
        on = extra[extra.index("--on-degraded") + 1] if "--on-degraded" in extra else "alert"
        opts = WatchOptions(window_s=WATCH_WINDOW_S, once=True, on_degraded=on, look_every_s=1.0)
        rows: list[dict[str, Any]] = []
        watch(ctx, report, [host], opts, on_window=lambda results: rows.extend(r.to_dict() for r in results))
        step(name, line, {"profile": report.inputs.profile.metadata.name, "hosts": rows})
        return rows

    def deploy_step(name: str, report: static.CheckReport, *extra: str) -> HostReport:
        line = as_command(
            _line("deploy", report.inputs.profile_path, *extra, "--inventory", inventory, "--ledger", ledger_file)
        )
        [outcome] = deploy(ctx, report, [host], skip_check="--skip-check" in extra)
        p = report.inputs.profile
        step(name, line, {"profile": p.metadata.name, "version": p.metadata.version, "hosts": [outcome.__dict__]})
        return outcome

    try:
        report1 = check("check-v1", v1)
        if _errors(report1.findings):
            raise InputError(
                f"the demo's v1 fails its own checks: {', '.join(sorted({f.code for f in _errors(report1.findings)}))}",
                fix="report this: the shipped tiny models should pass",
            )
        first = deploy_step("deploy-v1", report1)
        line = as_command(_line("baseline", v1, "--inventory", inventory, "--ledger", ledger_file))
        base_run, measured = baseline(ctx, report1, host)
        base_tput = gates.throughput(measured[1])
        step("baseline", line, {"baselines": baseline_rows(host.name, base_run, measured)})
        report2 = static.check(v2)
        second = deploy_step("deploy-v2", report2, "--skip-check")
        url = f"http://127.0.0.1:{port}"
        with traffic(url, "chat-small"):
            watched = watch_step("watch", report1)
        with traffic(url, "text-tasks"):  # the traffic moves to a domain the drafter was not trained on
            shifted = watch_step("watch-shift", report1, "--on-degraded", "plain")

        found = ctx.ledger.runs()
        step("runs", _line("runs", "--ledger", ledger_file), {"runs": [{**brief(r), **metrics(r)} for r in found]})
        deploys = [r for r in found if r.kind == "deploy"]
        a, b = (ctx.ledger.get(r.id) for r in (deploys[0], deploys[-1]))
        step(
            "diff",
            _line("diff", _short(a.id), _short(b.id), "--ledger", ledger_file),
            {"a": a.id, "b": b.id, **run_diff(a, b)},
        )
        check("check-v2", v2)
    finally:  # whatever happened, nothing of the demo keeps running
        line = as_command(_line("stop", v1, "--inventory", inventory))
        stopped = stop(Reach(), NAME, [host], command=ctx.command)
        ctx.ledger.close()
    step("stop", line, {"stopped": stopped})
    base_value = base_tput.estimate if base_tput else None
    result.summary = {
        "v1": {"label": "v1: trained layers", **_headline(first, base_value)},
        "baseline": {
            "label": "baseline: no speculation",
            "run": base_run,
            "accept_length": None,
            "acceptance_rate": None,
            "output_tokens_per_s": base_value,
            "speedup": 1.0 if base_value else None,
            "passed": None,
        },
        "v2": {"label": f"v2: wrong layers {WRONG_IDS}", **_headline(second, base_value)},
        "watch": {"label": "watch: chat traffic", **_watched(watched)},
        "watch-shift": {"label": "watch: doc tasks", **_watched(shifted)},
    }
    result.next_commands = _next(v1, v2, inventory, ledger_file, first=a.id, second=b.id)
    return result


def _watched(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One watch window's numbers: its state, accept length and what watch did."""
    [row] = rows
    interval = (row.get("verdict") or {}).get("interval") or {}
    return {"state": row["state"], "accept_length": interval.get("estimate"), "action": row.get("action")}


def _errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


def _short(run_id: str) -> str:
    from specctl.ledger.history import short_ids

    return short_ids([run_id])[run_id]


def _headline(outcome: HostReport, baseline_tput: float | None) -> dict[str, Any]:
    """A deploy's numbers from its verdict, with speedup against the baseline (shown, never gated)."""
    summary = (outcome.verdict or {}).get("summary") or {}

    def estimate(key: str) -> float | None:
        value = summary.get(key)
        return float(value["estimate"]) if isinstance(value, dict) else None

    tput = estimate("output_tokens_per_s")
    return {
        "run": outcome.release,
        "accept_length": estimate("accept_length"),
        "acceptance_rate": estimate("acceptance_rate"),
        "output_tokens_per_s": tput,
        "speedup": tput / baseline_tput if tput and baseline_tput else None,
        "passed": outcome.passed,
        "rolled_back_to": outcome.rolled_back_to,
    }


def _line(verb: str, *args: str | Path) -> str:
    """A command line a step stands for, quoted for a shell."""
    return shlex.join(["specctl", verb, *(str(a) for a in args)])


def _next(v1: Path, v2: Path, inventory: Path, ledger: Path, *, first: str, second: str) -> list[str]:
    """What to try next in the work directory, with its inventory and ledger named."""
    where: list[str | Path] = ["--inventory", inventory]
    return [
        _line("runs", "--ledger", ledger),
        _line("show", _short(second), "--ledger", ledger),
        _line("diff", _short(first), _short(second), "--ledger", ledger),
        _line("check", v2),
        _line("deploy", v1, *where, "--ledger", ledger),
        _line("status", v1, *where),
        _line("logs", v1, "-f", *where),
        _line("verify", v1, *where, "--ledger", ledger),
        _line("stop", v1, *where),
    ]
