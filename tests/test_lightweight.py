"""validate, check and render on local checkpoints never import torch, paramiko, matplotlib or prometheus_client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys
from specctl.cli.app import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split('.')[0] in {
    'torch', 'paramiko', 'fabric', 'invoke', 'httpx', 'sqlite3', 'huggingface_hub', 'safetensors', 'matplotlib',
    'prometheus_client',
})
print('MODULES=' + __import__('json').dumps(heavy), file=sys.stderr)
sys.exit(code)
"""


def loaded(*args: str, env: dict[str, str]) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    line = next(x for x in result.stderr.splitlines() if x.startswith("MODULES="))
    return list(json.loads(line.removeprefix("MODULES=")))


def test_check_render_validate_stay_light(tmp_path: Path) -> None:
    from tests.factory import Scenario

    profile = Scenario(tmp_path).write()
    env = {**os.environ, "NO_COLOR": "1"}
    k8s = ["render", str(profile), "--target", "k8s", "--model-mount", str(tmp_path)]
    for args in (["check", str(profile)], ["render", str(profile)], k8s, ["validate", str(profile)]):
        assert loaded(*args, env=env) == [], args
