"""Rendering a Plan as a POSIX launch script or JSON. Every value is shell-quoted; the only
expansions in a script are the release directory the script itself sets and the `printf` that
spells out characters a terminal would act on, so the script reads safely and runs exactly."""

from __future__ import annotations

import itertools
import json
import shlex

from specctl.constants import ADAPTIVE_PATH, HEAD_ADDRESS, HEAD_ADDRESS_VAR, OVERLAY_PATH, RELEASE_DIR_VAR
from specctl.plan.plan import NodePlan, Plan


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
        f"# specctl launch script: profile {plan.profile} v{plan.version}, "
        f"node {node.rank} of {len(plan.nodes)}, {kind}",
        f"# profile sha256 {plan.sha256}",
        "set -eu",
        f'{RELEASE_DIR_VAR}="${{{RELEASE_DIR_VAR}:-$(cd "$(dirname "$0")" && pwd)}}"',
    ]
    lines += [f"export {name}={quote(value)}" for name, value in sorted(node.env.items())]
    if plan.secrets:
        lines.append("# passed through from the caller's environment, never written here: " + " ".join(plan.secrets))
    lines.append("exec " + " ".join(quote(word) for word in node.argv))
    return "\n".join(lines) + "\n"


def render_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n"
