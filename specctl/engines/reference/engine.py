"""The reference engine as specctl sees it: SGLang's flags, conventions and HTTP API, started as
`python -m specctl.engines.reference` instead of `python -m sglang.launch_server`.

Only the rendered command differs from a real sglang deploy. A profile names
it with `engine.name: reference` and `engine.version` = the sglang version it emulates. This
module must not import torch: it sits on the path of `check` and `render`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specctl.engines.base import LaunchArgv, LaunchSpec
from specctl.engines.sglang.engine import SGLangEngine

MODULE = "specctl.engines.reference"


class ReferenceEngine(SGLangEngine):
    """SGLang's knowledge with the reference engine's launcher."""

    name = "reference"

    def distribution(self) -> str:
        return "specctl"

    def pins_installed_version(self) -> bool:
        return False  # it emulates the version named by --emulate-sglang-version; drift checks what it reports

    def prove_script(self) -> Path:
        return Path(__file__).parent / "_prove_host.py"  # its own launch parser, not sglang's

    def build_script(self) -> Path | None:
        return None  # it emulates sglang's rules from specctl's own table: there is no host build to ask

    def container_image(self, version: str) -> str | None:
        return None  # a rehearsal engine: no image is published; a pod runs whatever image --image names

    def chat_ids_command(self, python: str, argv: Sequence[str]) -> list[str]:
        return [python, "-m", "specctl.engines.reference.tokenizer"]  # one byte-level tokenizer for every model

    def argv(self, spec: LaunchSpec) -> LaunchArgv:
        argv = super().argv(spec)
        emulate = ["--emulate-sglang-version", spec.engine_version] if spec.engine_version else []
        end = len(argv.words)
        return argv.replaced(1, 3, ["-m", MODULE]).replaced(end, end, emulate)


REFERENCE = ReferenceEngine()
