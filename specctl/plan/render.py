"""Rendering a Plan as a POSIX launch script or JSON. Every value is shell-quoted; the only
expansion in a script is the release directory the script itself sets."""

from __future__ import annotations

import json
import shlex

from specctl.constants import OVERLAY_PATH, RELEASE_DIR_VAR
from specctl.plan.plan import NodePlan, Plan


def quote(word: str) -> str:
    """Quote one argv word for sh; the overlay path alone keeps its variable expandable."""
    if word == OVERLAY_PATH:
        return OVERLAY_PATH.replace(f"${{{RELEASE_DIR_VAR}}}", f'"${{{RELEASE_DIR_VAR}}}"')
    return shlex.quote(word)


def render_sh(plan: Plan, node: NodePlan) -> str:
    """A self-contained launch script for one node."""
    kind = "baseline (no speculation)" if plan.baseline else "speculative"
    lines = [
        "#!/bin/sh",
        f"# specctl launch script: profile {plan.profile} v{plan.version}, node {node.rank} of {len(plan.nodes)}, {kind}",
        f"# profile sha256 {plan.sha256}",
        "set -eu",
        f'{RELEASE_DIR_VAR}="${{{RELEASE_DIR_VAR}:-$(cd "$(dirname "$0")" && pwd)}}"',
    ]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(node.env.items())]
    if plan.secrets:
        lines.append("# passed through from the caller's environment, never written here: " + " ".join(plan.secrets))
    lines.append("exec " + " ".join(quote(word) for word in node.argv))
    return "\n".join(lines) + "\n"


def render_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n"
