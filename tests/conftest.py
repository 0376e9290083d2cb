"""Shared fixtures: a pinned environment, real checkpoint directories, and the CLI run in-process."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for examples.hub, the checkpoint builder shared with `make demo`

from examples.hub import build_models
from tests.hub_endpoint import HubEndpoint, HubRepo


@pytest.fixture(autouse=True)
def _pinned_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Output and state never depend on the developer's terminal or home directory."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    for var in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPECCTL_DEBUG", raising=False)
    monkeypatch.delenv("SPECCTL_LEDGER", raising=False)


@pytest.fixture(scope="session")
def sglang_python() -> str:
    """SPECCTL_SGLANG_PYTHON (`make test` sets it); a missing environment skips, or fails under CI=true."""
    python = os.environ.get("SPECCTL_SGLANG_PYTHON", "")
    if not python or not Path(python).exists():
        message = "SPECCTL_SGLANG_PYTHON does not name the sglang CPU environment (make sglang-env)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return python


@pytest.fixture(scope="session")
def example_hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example models of examples/models.json as a Hugging Face cache (sparse weights)."""
    cache = tmp_path_factory.mktemp("hub")
    models = json.loads((ROOT / "examples" / "models.json").read_text())["models"]
    build_models(cache, models)
    return cache


@pytest.fixture
def hub_env(example_hub: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(example_hub))
    import huggingface_hub.constants  # it reads HF_HUB_CACHE once, when first imported

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(example_hub))
    return example_hub


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(*args: str) -> CliResult:
    """Run `specctl ARGS` in-process with captured output."""
    from specctl.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli() -> Iterator[Any]:
    yield run_cli


Serve = Callable[..., HubEndpoint]


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Serve]:
    """Start an endpoint and point huggingface_hub at it (env and every place that caches the endpoint)."""
    started: list[HubEndpoint] = []

    def _serve(repos: dict[str, HubRepo], **kwargs: Any) -> HubEndpoint:
        endpoint = HubEndpoint(repos, **kwargs).start()
        started.append(endpoint)
        url, cache = endpoint.url, tmp_path / "hf-cache"
        for name, value in {
            "HF_ENDPOINT": url,
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_CACHE": str(cache),
            "HF_HOME": str(tmp_path / "hf-home"),
        }.items():
            monkeypatch.setenv(name, value)
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
            monkeypatch.delenv(name, raising=False)
        import huggingface_hub.constants as constants  # read HF_* once, at first import
        import huggingface_hub.hf_api as hf_api
        from huggingface_hub.utils import _detect_agent

        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # conftest pins HF_HUB_OFFLINE=1
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
        monkeypatch.setattr(hf_api.api, "endpoint", url)  # huggingface_hub.model_info & co. are bound to it
        # The first request of a process also GETs /api/agent-harnesses (best-effort user-agent telemetry, cached
        # under HF_HOME): pin the empty registry so request logs do not depend on test order.
        monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "hf-home" / ".agent_harnesses.json"))
        monkeypatch.setattr(_detect_agent, "_registry", _detect_agent._EMPTY_REGISTRY)
        return endpoint

    yield _serve
    for endpoint in started:
        endpoint.stop()
