"""`logs` on the local host: the last lines, `--json` as one object per line, and `-f` reading only
what the file gained (by byte offset), across partial lines and a file that was replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specctl.flows.demo import write_inputs

RUN = "20261130T210811Z-53f951"


@pytest.fixture
def served(tmp_path: Path) -> dict[str, Any]:
    """A profile whose current release on `local` (state in tmp_path) has a server log."""
    v1, _ = write_inputs(tmp_path / "work", 31999)
    state = tmp_path / "state"
    release = state / "tiny-llama-demo" / "releases" / RUN
    release.mkdir(parents=True)
    (state / "tiny-llama-demo" / "current").symlink_to(f"releases/{RUN}")
    log = release / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(1, 6)))
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(f"apiVersion: specctl/v1\nkind: Inventory\nhosts:\n  local: {{root: {state}}}\n")
    return {"profile": str(v1), "log": log, "common": ["--inventory", str(inventory)]}


def test_the_last_lines(cli: Any, served: dict[str, Any]) -> None:
    result = cli("logs", served["profile"], "-n", "2", *served["common"])
    assert result.code == 0 and result.stdout == "line 4\nline 5\n"
    served["log"].write_text("no newline at the end")
    assert cli("logs", served["profile"], *served["common"]).stdout == "no newline at the end\n"


def test_json_is_one_object_per_line(cli: Any, served: dict[str, Any]) -> None:
    import json

    for args in (["--json", "logs"], ["logs", "--json"]):
        result = cli(*args, served["profile"], "-n", "3", *served["common"])
        assert result.code == 0
        assert [json.loads(line) for line in result.stdout.splitlines()] == [
            {"host": "local", "line": f"line {i}"} for i in (3, 4, 5)
        ]


def test_follow_reads_only_what_the_file_gained(
    cli: Any, served: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from specctl.cli import hosts_cmds
    from specctl.hosts import local

    log: Path = served["log"]
    sent: list[list[str]] = []
    real_run = local._run

    def recording(argv: Any, **kwargs: Any) -> Any:
        sent.append(list(argv))
        return real_run(argv, **kwargs)

    def append(text: str) -> None:
        with log.open("a") as out:
            out.write(text)

    monkeypatch.setattr(local, "_run", recording)
    grows = iter(
        [
            lambda: append("line 6\nhalf of line"),  # a partial line waits for its end
            lambda: append(" 7\n"),
            lambda: log.write_text("restarted\n"),  # replaced by a shorter file: read from its start
            lambda: None,
        ]
    )

    def pause() -> None:
        step = next(grows, None)
        if step is None:
            raise KeyboardInterrupt
        step()

    monkeypatch.setattr(hosts_cmds, "_pause", pause)
    result = cli("logs", served["profile"], "-f", "-n", "1", *served["common"])
    assert result.code == 130
    assert result.stdout == "line 5\nline 6\nhalf of line 7\nrestarted\n"
    reads = [argv for argv in sent if argv[:2] == ["sh", "-c"] and argv[-2] == str(log)]
    offsets = [int(argv[-1]) for argv in reads[1:]]  # after the first read, each asks from where the last ended
    assert offsets[:3] == [35, 54, 57] and all("tail -c +" in argv[2] for argv in reads[1:])
