"""Running the engine probe with the engine's own interpreter: here (`check --engine-python`), or on
hosts over SSH (`flows/host_probe.py`, which shares the question and the reading of the answer)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from typing import Any

from specctl.engines import ProbeReport
from specctl.engines.capture_frame import positions_of
from specctl.plan.inputs import Inputs
from specctl.plan.plan import build_plan
from specctl.plan.resolve import resolve_capture

PROBE_TIMEOUT_S = 180


def run_probe(python: str, script: str, request: dict[str, Any], timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run `python script` with the request on stdin; an unusable answer comes back as {"error": ...}."""
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [python, script], input=json.dumps(request), capture_output=True, text=True, timeout=timeout_s
        )
    except FileNotFoundError:
        return {"error": f"interpreter {python} not found"}
    except subprocess.TimeoutExpired:
        return {"error": f"the probe did not answer within {timeout_s:.0f} s"}
    return answer_of(result.returncode, result.stdout, result.stderr, time.perf_counter() - start, timeout_s=timeout_s)


def answer_of(rc: int, stdout: str, stderr: str, wall_s: float, *, timeout_s: float) -> dict[str, Any]:
    """The probe's answer from how it ended; an unusable one as {"error": ...}."""
    if rc == 124:
        return {"error": f"the probe did not answer within {timeout_s:.0f} s"}
    if rc == 127:
        return {"error": f"the engine interpreter was not found ({stderr.strip()[:200]})"}
    if rc != 0:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        return {"error": f"the probe exited with {rc}: {tail}"}
    try:
        answer: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "the probe's answer is not JSON"}
    answer.setdefault("seconds", {})["wall"] = round(wall_s, 3)
    return answer


def probe_question(inputs: Inputs) -> tuple[dict[str, Any], str | None]:
    """What to ask the engine about these inputs (the ids in play, the candidates for the needed
    layers, every node's launch flags), and the architecture it is asked about."""
    engine, profile = inputs.engine, inputs.profile
    table_view = resolve_capture(inputs)
    argvs = [node.argv for node in build_plan(inputs, table_view).nodes]
    ids = [
        i
        for i in (
            table_view.config_ids if table_view else None,
            tuple(profile.drafter.layer_ids) if profile.drafter and profile.drafter.layer_ids else None,
        )
        if i
    ]
    needed = sorted(set(positions_of(inputs.manifest.capture.layers))) if inputs.manifest else None
    architecture = inputs.architecture if profile.drafter is not None else None
    return engine.probe_request(architecture, inputs.num_layers, ids, needed, argvs), architecture


def with_answer(inputs: Inputs, python: str, architecture: str | None, answer: dict[str, Any]) -> Inputs:
    """The inputs with the engine's own answers: its version, its capture rule, its parser's verdict."""
    report: ProbeReport = inputs.engine.probe_report(python, architecture, inputs.num_layers, answer)
    if report.convention is None:
        return dataclasses.replace(inputs, probe=report)
    return dataclasses.replace(inputs, probe=report, convention=report.convention, convention_error=None)


def with_probe(inputs: Inputs, python: str) -> Inputs:
    """The inputs with the answers of the engine installed for `python` on this machine."""
    question, architecture = probe_question(inputs)
    return with_answer(inputs, python, architecture, run_probe(python, str(inputs.engine.probe_script()), question))
