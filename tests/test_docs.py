"""The README and docs/ stay true: every internal link resolves (files and #anchors as GitHub renders
them), every `specctl ...` line in a code block parses with the real command-line parser, every example
YAML file they name validates, the field reference is generated from the models, and (lab) the
README's quick tour runs as written, each line with the exit status its comment states."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer._click.core import Command  # typer 0.29 carries its own click
from typer._click.exceptions import ClickException
from typer.core import TyperGroup

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
_ALTERNATIVE = re.compile(r"\s*\|\s*")
_COMMENT = re.compile(r"(^|\s)#.*$")  # a comment starts a word, as the shell reads it
_EXIT = re.compile(r"#.*\bexit (\d+)\b")


def blocks(text: str) -> Iterator[tuple[str, list[str]]]:
    """Each fenced code block: its info string and its lines."""
    info: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if _FENCE.match(line):
            if info is None:
                info, lines = line.strip().lstrip("`~").strip(), []
            else:
                yield info, lines
                info = None
        elif info is not None:
            lines.append(line)


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code removed."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append(_CODE_SPAN.sub("", line))
    return out


def anchors(page: Path) -> set[str]:
    """The #anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated heading suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text(encoding="utf-8")) if page.suffix == ".md" else []:
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    # inline code removed first, but code spans in link text (`[`x`](y)`) keep the link
    return [m.group(1) for line in prose(text.replace("`", "")) for m in _LINK.finditer(line)]


def command_lines(page: Path) -> list[str]:
    """`specctl ...` lines of the page's shell code blocks, continuations joined, comments kept."""
    out = []
    for info, lines in blocks(page.read_text(encoding="utf-8")):
        if info not in ("", "sh", "bash", "console", "shell"):
            continue
        joined: list[str] = []
        for line in lines:
            if joined and joined[-1].rstrip().endswith("\\"):
                joined[-1] = joined[-1].rstrip()[:-1] + " " + line.strip()
            else:
                joined.append(line)
        out += [
            line.strip().removeprefix("$ ") for line in joined if line.strip().removeprefix("$ ").startswith("specctl ")
        ]
    return out


def variants(line: str) -> list[list[str]]:
    """The argv lists a synopsis line stands for: without its optional `[...]` parts, and with each
    one (its first alternative of `a | b`), so every option it names is parsed once."""
    line = _COMMENT.sub("", line)
    groups = list(_OPTIONAL.finditer(line))

    def keeping(kept: int | None) -> str:
        """The line with every optional part dropped but the one at index `kept` (its first alternative)."""
        parts, at = [], 0
        for index, group in enumerate(groups):
            parts.append(line[at : group.start()])
            first = _ALTERNATIVE.split(group.group(1).strip())[0]
            parts.append(f" {first} " if index == kept else " ")
            at = group.end()
        return "".join(parts) + line[at:]

    out = [keeping(None)] + [keeping(index) for index in range(len(groups))]
    argvs = []
    for text in out:
        argv = shlex.split(text)[1:]
        for stop in (">", "|", "&&", ";"):
            if stop in argv:
                argv = argv[: argv.index(stop)]
        argvs.append(argv)
    return argvs


def parse(argv: list[str]) -> None:
    """Parse `specctl ARGV` with the application's own click command, invoking nothing."""
    from specctl.cli.app import build, named_command

    command: Command = typer.main.get_command(build(named_command(argv)))
    ctx = command.make_context("specctl", list(argv), resilient_parsing=False)
    while isinstance(command, TyperGroup):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            return
        name, sub, args = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        command, ctx = sub, sub.make_context(name, args, parent=ctx, resilient_parsing=False)


def test_the_readme_fits_on_a_screen_and_starts_with_the_two_set_up_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    info, first = next(blocks(text))
    assert [line.split("#")[0].strip() for line in first] == ["make demo", "make test"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_internal_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or ROOT not in (where, *where.parents):
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(where):
            broken.append(f"{target}: no heading #{anchor} in {where.relative_to(ROOT)}")
    assert not broken, broken


def test_anchors_are_the_ones_github_renders() -> None:
    page = ROOT / "docs" / "performance.md"
    assert {"performance", "specctl-itself", "the-reference-engine"} <= anchors(page)
    assert "the-guarantee-and-how-it-is-kept" in anchors(ROOT / "docs" / "faults.md")


def specctl_lines() -> list[tuple[str, str]]:
    return [(page.relative_to(ROOT).as_posix(), line) for page in PAGES for line in command_lines(page)]


def test_every_specctl_line_in_a_code_block_parses() -> None:
    lines = specctl_lines()
    assert len(lines) > 25  # the collection itself works
    failed = []
    for where, line in lines:
        if "--install-completion" in line:  # its callback installs; it is not for a test to run
            continue
        for argv in variants(line):
            try:
                parse(argv)
            except ClickException as exc:
                failed.append(f"{where}: {line!r} as {argv}: {exc.format_message()}")
    assert not failed, "\n".join(failed)


def test_a_line_that_does_not_parse_is_caught() -> None:
    with pytest.raises(ClickException):
        parse(["render", "profiles/p.yaml", "--no-such-flag"])
    with pytest.raises(ClickException):
        parse(["deploy", "profiles/p.yaml", "--max-failures", "N"])
    assert variants("specctl rollback [PROFILE] [--to RUN | --to P@V]  # x") == [
        ["rollback"],
        ["rollback", "PROFILE"],
        ["rollback", "--to", "RUN"],
    ]


def example_files() -> list[Path]:
    """Every YAML file of this repository the README and docs name, by link or in text."""
    found: set[Path] = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for name in re.findall(r"[\w./-]+\.ya?ml\b", text) + links(page):
            for base in (ROOT, page.parent):
                path = (base / name.partition("#")[0]).resolve()
                if path.is_dir() and ROOT in path.parents:
                    found.update(path.glob("*.yaml"))
                elif path.is_file() and path.suffix in (".yaml", ".yml") and ROOT in path.parents:
                    found.add(path)
    return sorted(p for p in found if ".cache" not in p.parts and "tests" not in p.relative_to(ROOT).parts)


def test_the_example_yaml_files_the_docs_show_validate() -> None:
    files = example_files()
    names = {p.relative_to(ROOT).as_posix() for p in files}
    assert {"examples/fleet/hosts.yaml", "examples/fleet/llama-3.1-8b.yaml", "profiles/kimi-k2.5-tp8.yaml"} <= names
    result = run_cli("validate", *map(str, files))
    assert result.code == 0, result.stdout + result.stderr


def test_the_field_reference_is_generated_from_the_models() -> None:
    spec = importlib.util.spec_from_file_location("gen_field_docs", ROOT / "scripts" / "gen_field_docs.py")
    assert spec and spec.loader
    gen: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = (ROOT / "docs" / "profiles.md").read_text(encoding="utf-8")
    assert gen.updated(page) == page, "docs/profiles.md is stale: run python scripts/gen_field_docs.py"
    for field in (
        "`drafter.layer_ids`",
        "`capture.layers`",
        "`clusters.<key>.srun_args`",
        "`hosts.<key>.ssh.proxy_jump`",
    ):
        assert field in page


def tour() -> list[str]:
    """The quick tour's code block in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick tour", 1)[1]
    return next(blocks(section))[1]


def test_every_command_of_the_quick_tour_states_its_exit_status() -> None:
    commands = [line for line in tour() if line.startswith("specctl ")]
    assert len(commands) >= 8
    assert all(_EXIT.search(line) for line in commands), commands


def run_tour(env: dict[str, str]) -> dict[str, tuple[int | None, int]]:
    """Every line of the README's quick tour in one bash, from the repository root, after a demo left
    its work directory where the tour's `D=` says: {line: (exit status seen, status its comment states)}
    for each line that did not exit as stated. The demo's own test calls it (one demo for both)."""
    script, expected = [], {}
    for index, line in enumerate(tour()):
        status = _EXIT.search(line)
        if status:
            expected[index] = int(status.group(1))
            command = _COMMENT.sub("", line)
            script.append(f"{command} >/dev/null 2>&1; echo tour {index} $?")
        else:
            script.append(line)
    env = {**env, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"}
    env.pop("HF_HUB_CACHE", None)
    ran = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    seen = {int(i): int(code) for _, i, code in (w.split() for w in ran.stdout.splitlines() if w.startswith("tour "))}
    return {tour()[i]: (seen.get(i), want) for i, want in expected.items() if seen.get(i) != want}
