"""`--json` output is strict JSON (no NaN, no Infinity: null, and where it was), and a stream of JSON
lines ends in one JSON line, its error included (issue 34)."""

from __future__ import annotations

import io
import json
import math
from typing import Any

from specctl.cli._errors import report
from specctl.cli._output import Output
from specctl.errors import HostError


def strict(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_value_that_is_not_finite_is_null_and_said_where() -> None:
    out = Output(json_mode=True, stdout=io.StringIO(), stderr=io.StringIO(), environ={})
    out.result({"hosts": [{"accept_length": math.nan, "window": {"end": math.inf, "ok": 1.5}}], "low": -math.inf})
    data = strict(out.stdout.getvalue())  # type: ignore[attr-defined]
    assert data["hosts"][0] == {"accept_length": None, "window": {"end": None, "ok": 1.5}} and data["low"] is None
    assert data["not_finite"] == {
        "hosts[0].accept_length": "NaN",
        "hosts[0].window.end": "Infinity",
        "low": "-Infinity",
    }
    out.stream({"value": math.nan}, "text")
    line = out.stdout.getvalue().splitlines()[-1]  # type: ignore[attr-defined]
    assert strict(line) == {"value": None, "not_finite": {"value": "NaN"}}


def test_a_stream_ends_in_one_json_line_an_error_included() -> None:
    out = Output(json_mode=True, stdout=io.StringIO(), stderr=io.StringIO(), environ={})
    out.stream({"host": "h0", "state": "ok"}, "h0 ok")
    code = report(HostError("h0: connection lost", host="h0", fix="check the host"), out)
    lines = out.stdout.getvalue().splitlines()  # type: ignore[attr-defined]
    assert code == 3 and len(lines) == 2, lines
    assert strict(lines[-1])["error"]["message"] == "h0: connection lost"
    internal = Output(json_mode=True, stdout=io.StringIO(), stderr=io.StringIO(), environ={})
    internal.stream({"host": "h0", "state": "ok"}, "h0 ok")
    assert report(RuntimeError("boom"), internal) == 70
    last = internal.stdout.getvalue().splitlines()[-1]  # type: ignore[attr-defined]
    assert strict(last)["error"]["type"] == "InternalError" and "boom" in strict(last)["error"]["message"]
