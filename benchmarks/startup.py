"""Cold start of `specctl check`, `render` and `validate` on a local checkpoint, against the import
floor of the CLI libraries, a typer app that does nothing, and bare Python, all measured in one run.

    python benchmarks/startup.py [--repeat 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import interleaved, wall  # noqa: E402
from tests.factory import Scenario  # noqa: E402

FLOOR = "import typer, yaml, rich.console; from pydantic import BaseModel"  # the import floor the goal is set against
# A typer app that does nothing, with check's parameters and the root's: typer 0.29 coerces every
# parameter through a pydantic TypeAdapter, which no import floor counts and no typer CLI avoids.
TYPER_APP = """
from pathlib import Path
from typing import Annotated
import typer, yaml, rich.console
from pydantic import BaseModel
app = typer.Typer()
@app.callback()
def root(json_mode: Annotated[bool, typer.Option("--json")] = False,
         inventory: Annotated[str | None, typer.Option("--inventory", "-i")] = None,
         ssh_config: Annotated[str | None, typer.Option("--ssh-config")] = None,
         ledger: Annotated[str | None, typer.Option("--ledger")] = None,
         version: Annotated[bool, typer.Option("--version")] = False) -> None:
    pass
@app.command()
def check(ctx: typer.Context, profile: Path, json_mode: Annotated[bool, typer.Option("--json")] = False,
          offline: Annotated[bool, typer.Option("--offline")] = False,
          assume_convention: Annotated[str | None, typer.Option("--assume-convention")] = None,
          engine_python: Annotated[str | None, typer.Option("--engine-python")] = None) -> None:
    pass
app()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    py = sys.executable
    specctl = str(Path(py).parent / "specctl")
    env = {**os.environ, "NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode; compile ours once, as pip would
    with tempfile.TemporaryDirectory() as tmp:
        profile = str(Scenario(Path(tmp)).write())
        typer_app = Path(tmp) / "typer_app.py"
        typer_app.write_text(TYPER_APP)
        cases = {
            "python -c pass": lambda: wall([py, "-c", "pass"], env),
            "import floor": lambda: wall([py, "-c", FLOOR], env),
            "typer app floor": lambda: wall([py, str(typer_app), "check", profile], env),
            "specctl check": lambda: wall([specctl, "check", profile], env),
            "specctl render": lambda: wall([specctl, "render", profile], env),
            "specctl validate": lambda: wall([specctl, "validate", profile], env),
        }
        medians = interleaved(cases, args.repeat)
    floor, bare = medians["import floor"], medians["python -c pass"]
    rows = {name: {"median_s": round(t, 4), "x_floor": round(t / floor, 2), "x_bare_python": round(t / bare, 2)}
            for name, t in medians.items()}
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'case':<18} {'median':>9} {'x floor':>8} {'x python':>9}")
        for name, row in rows.items():
            print(f"{name:<18} {row['median_s'] * 1000:>7.1f}ms {row['x_floor']:>8.2f} {row['x_bare_python']:>9.2f}")
        print(f"goal: check <= 1.5x the import floor ({FLOOR!r}); repeat={args.repeat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
