"""Rendering a Plan as a POSIX launch script or JSON. Every value is shell-quoted; the only
expansions in a script are the release directory the script itself sets and the `printf` that
spells out characters a terminal would act on, so the script reads safely and runs exactly.
A command longer than a terminal's 80 columns is broken before each option with ` \\`
continuations (the shell joins them back: the same words run), and a comment wraps between words."""

from __future__ import annotations

import itertools
import json
import shlex
import textwrap
from collections.abc import Sequence

from specctl.constants import ADAPTIVE_PATH, HEAD_ADDRESS, HEAD_ADDRESS_VAR, OVERLAY_PATH, RELEASE_DIR_VAR
from specctl.plan.plan import NodePlan, Plan

SCRIPT_COLUMNS = 80  # a rendered line's width where it can be broken: a terminal's, as `render` is read on one
INDENT = "  "  # an option's line under its command; a value too long to share its line goes one step further


def quote(word: str) -> str:
    """Quote one argv word for sh; the paths into the release (the drafter overlay, the adaptive
    tiers) alone keep the release directory's variable expandable, and a scheduler job's
    `${SPECCTL_HEAD_ADDRESS}:port` its head node's address.

    Characters that are not printable (ESC, other controls, bidi overrides) are legal in a value but
    would act on the terminal that shows the script, so they are written as octal escapes of a
    `printf` joined into the same word. Newline and tab stay literal inside single quotes: command
    substitution would strip a trailing newline.
    """
    if word in (OVERLAY_PATH, ADAPTIVE_PATH):
        return word.replace(f"${{{RELEASE_DIR_VAR}}}", f'"${{{RELEASE_DIR_VAR}}}"')
    if word.startswith(HEAD_ADDRESS + ":") and word[len(HEAD_ADDRESS) + 1 :].isdigit():
        return f'"${{{HEAD_ADDRESS_VAR}}}"' + word[len(HEAD_ADDRESS) :]
    if all(map(_shows, word)):
        return shlex.quote(word)
    pieces = []
    for shown, chars in itertools.groupby(word, _shows):
        run = "".join(chars)
        pieces.append(shlex.quote(run) if shown else _printf(run))
    return "".join(pieces)


def _shows(char: str) -> bool:
    """Whether a character may stand in the script as itself."""
    return char.isprintable() or char in "\n\t"


def _printf(text: str) -> str:
    """A double-quoted command substitution that prints exactly the UTF-8 bytes of `text`."""
    octal = "".join(f"\\{byte:03o}" for byte in text.encode())
    return f"\"$(printf '{octal}')\""


def render_sh(plan: Plan, node: NodePlan) -> str:
    """A self-contained launch script for one node."""
    kind = "baseline (no speculation)" if plan.baseline else "speculative"
    lines = [
        "#!/bin/sh",
        *comment(
            f"specctl launch script: profile {plan.profile} v{plan.version}, "
            f"node {node.rank} of {len(plan.nodes)}, {kind}"
        ),
        *comment(f"profile sha256 {plan.sha256}"),
        "set -eu",
        f'{RELEASE_DIR_VAR}="${{{RELEASE_DIR_VAR}:-$(cd "$(dirname "$0")" && pwd)}}"',
    ]
    lines += [f"export {name}={quote(value)}" for name, value in sorted(node.env.items())]
    if plan.secrets:
        lines += comment("passed through from the caller's environment, never written here: " + " ".join(plan.secrets))
    lines += command_lines(node.argv, prefix="exec ")
    return "\n".join(lines) + "\n"


def comment(text: str, width: int = SCRIPT_COLUMNS) -> list[str]:
    """`# text` over as many lines as `width` needs, broken between words only (a digest stays whole)."""
    return textwrap.wrap(
        text, width, initial_indent="# ", subsequent_indent="# ", break_long_words=False, break_on_hyphens=False
    )


def command_lines(argv: Sequence[str], *, prefix: str = "", width: int = SCRIPT_COLUMNS) -> list[str]:
    """`argv` quoted as one sh command: one line when it fits `width`; else the program (with the
    words before its first `--option`) on the first line and each option with its value on a line of
    its own, every line but the last ending in ` \\`. A value that does not fit beside its option
    (or a further value of it) goes on the next line, one step further in. Only whole quoted words
    move, and a backslash-newline between words is nothing to the shell: the command runs the same
    argv. A line is longer than `width` only where it holds one word that is."""
    words = [quote(word) for word in argv]
    one = prefix + " ".join(words)
    if len(one) <= width:
        return [one]
    # units: an option with its first value, or a word of its own (the program, a further value); an
    # option is told by its word as argv has it (quoted, `--output=<x>` starts with a quote)
    units: list[tuple[str, list[str]]] = []
    for word, shown in zip(argv, words, strict=True):
        if units and len(units[-1][1]) == 1 and _starts_option(units[-1][0]) and not _starts_option(word):
            units[-1][1].append(shown)
        else:
            units.append((word, [shown]))
    options = False  # past the program's own words (`python -m module`): each option starts a line
    lines = [prefix + units[0][1][0]]
    for word, unit in units[1:]:
        options = options or word.startswith("--")
        step = INDENT * 2 if options else INDENT
        if options and _starts_option(word):
            lines.append(INDENT + " ".join(unit))
        elif _fits(lines[-1] + " " + " ".join(unit), width):
            lines[-1] += " " + " ".join(unit)
        else:
            lines.append(step + " ".join(unit))
        if len(unit) == 2 and not _fits(lines[-1], width):  # the value, on a line of its own
            lines[-1] = lines[-1][: -len(unit[1]) - 1]
            lines.append(step + unit[1])
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


def _fits(line: str, width: int) -> bool:
    return len(line) + 2 <= width  # with the ` \\` it may end with


def _starts_option(word: str) -> bool:
    """An option's name (`--port`, `-m`), not a value such as `-1`."""
    return word.startswith("--") or (len(word) > 1 and word[0] == "-" and word[1].isalpha())


def render_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n"
