"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ProfileArg = Annotated[Path, typer.Argument(help="Profile YAML file.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
OfflineOpt = Annotated[
    bool, typer.Option("--offline", envvar="HF_HUB_OFFLINE", help="Read Hugging Face metadata from the local cache only.")
]
AssumeOpt = Annotated[
    str | None,
    typer.Option("--assume-convention", metavar="VERSION[:ARCH]",
                 help="Use the capture convention of this engine version (and architecture) instead of the profile's."),
]
EnginePythonOpt = Annotated[
    str | None,
    typer.Option("--engine-python", metavar="PATH",
                 help="Ask the engine installed for this interpreter (its own capture code and parser) instead of the table."),
]
