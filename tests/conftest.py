"""Shared fixtures: a pinned environment, real checkpoint directories, the CLI run in-process, and the
two tiers (docs/development.md): `lab` marks what starts sshd, Slurm, a reference engine server, torch
models or real sglang code; everything else is the fast tier, which runs against the fakes of
tests/fakes/ (the engine double, several hosts on local transports, stand-in scheduler commands).

Under SPECCTL_TEST_TIER=fast (`make test-fast`) the lab's modules are not even imported, and a lab
test, a lab fixture or a real engine started by a release fails loudly: a fast test cannot start
sshd, slurmd or an engine by accident."""

from __future__ import annotations

import io
import json
import os
import signal
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

pytest_plugins = ["tests._hygiene"]  # a run stopped by SIGINT or SIGTERM leaves nothing behind

# --- the tiers -------------------------------------------------------------------------------------

TIER = os.environ.get("SPECCTL_TEST_TIER", "")
FAST = TIER == "fast"
# what starts sshd, Slurm daemons, a reference engine server, torch models or real sglang code
LAB_DIRS = ("tests/integration/", "tests/engines/reference/")
LAB_FIXTURES = frozenset({"lab", "slurm_lab", "slurm", "ssh_options", "sglang_python"})
LAB_WHY = (
    "is a lab test (sshd, Slurm, a reference engine or real sglang code) but the fast tier is selected "
    "(SPECCTL_TEST_TIER=fast): run it with `make test`, or give it the fakes of tests/fakes/"
)


def _relative(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background by a shell inherits SIGINT ignored, and so would every run and
    command its tests start and then stop with SIGINT, as a person's Ctrl-C would (tests/cli/test_signals.py,
    tests/integration/test_hygiene.py): the suite takes Python's own handler back, and its children the
    default."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # xdist hands the groups out in the order of the items (LONG_GROUPS first), not by their number of tests
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast tier does not import the lab's modules (torch, fastapi and the sshd/Slurm helpers)."""
    if FAST and any((_relative(collection_path) + "/").startswith(d) for d in LAB_DIRS):
        return True
    return None


def is_lab(item: pytest.Item) -> bool:
    where = _relative(Path(str(item.path)))
    return (
        any(where.startswith(d) for d in LAB_DIRS)
        or item.get_closest_marker("conformance") is not None
        or item.get_closest_marker("lab") is not None
        or bool(LAB_FIXTURES & set(getattr(item, "fixturenames", ())))
    )


# The lab groups that take longest, longest first (seconds of their tests, 2026-12-05, `--durations=0` on two
# workers: 1308 s in all), the Slurm lab beside the probe's sglang imports: xdist hands the groups out in the
# order of the items, so these start first and the groups left out (20 s at most) fill in at the end, rather
# than a long one starting last on one worker while the other has finished.
LONG_GROUPS = (
    "slurm",  # 191
    "tests/integration/test_reliability.py",  # 163
    "tests/engines/sglang/test_probe_conformance.py",  # 109
    "tests/integration/test_verify.py",  # 108
    "tests/integration/test_staging.py",  # 90
    "tests/integration/test_faults.py",  # 74
    "tests/integration/test_watch.py",  # 74
    "tests/engines/sglang/test_capture_table_conformance.py",  # 65
    "tests/test_demo.py",  # 62
    "tests/integration/test_tune.py",  # 60
    "tests/integration/test_deploy.py",  # 59
    "tests/engines/sglang/test_flag_catalog.py",  # 45
    "tests/engines/reference/test_metrics.py",  # 28
    "tests/integration/test_ssh_transport.py",  # 26
    "tests/engines/reference/test_speculate.py",  # 23
    "tests/engines/sglang/test_chat_ids_conformance.py",  # 20
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`lab` on everything that needs the labs, before `-m "not lab"` deselects; each lab test in its
    xdist group, the long groups first."""
    groups: dict[int, str] = {}
    for item in items:
        lab = is_lab(item)
        if lab and item.get_closest_marker("lab") is None:
            item.add_marker(pytest.mark.lab)
        if uses_slurm(item):  # one Slurm lab at a time: its daemons use Slurm's fixed ports and node names
            groups[id(item)] = _grouped(config, item, "slurm")
        elif lab:  # a lab file's tests run in order on one worker: some leave state (a lock) the next clears
            groups[id(item)] = _grouped(config, item, _relative(Path(str(item.path))))
    rank = {name: i for i, name in enumerate(LONG_GROUPS)}
    items.sort(key=lambda item: rank.get(groups.get(id(item), ""), len(rank)))  # stable: a file keeps its order


def _grouped(config: pytest.Config, item: pytest.Item, group: str) -> str:
    """The test in xdist group `group`. pytest-xdist (3.8) tells its scheduler a test's group by a
    `@group` suffix it writes to `item._nodeid`, which pytest 9.2 no longer reads (an item's id is
    `item._id`): the suffix was lost and `--dist loadgroup` spread the tests of a file, and the Slurm
    tests, over the workers one by one. The suffix is written where this pytest reads it."""
    item.add_marker(pytest.mark.xdist_group(group))
    if getattr(config.option, "loadgroup", False) and hasattr(item, "_id"):  # an xdist worker, --dist loadgroup
        from _pytest.nodeid import NodeId

        if not item.nodeid.endswith(f"@{group}"):
            item._id = NodeId.parse(f"{item.nodeid}@{group}")
        if not item.nodeid.endswith(f"@{group}"):
            raise pytest.UsageError(f"{item.nodeid}: its xdist group {group!r} does not reach the scheduler")
    return group


def uses_slurm(item: pytest.Item) -> bool:
    return "slurm" in Path(str(item.path)).name or bool({"slurm", "slurm_lab"} & set(getattr(item, "fixturenames", ())))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if FAST and item.get_closest_marker("lab") is not None:
        pytest.fail(f"{item.nodeid} {LAB_WHY}", pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    if FAST and fixturedef.argname in LAB_FIXTURES:
        pytest.fail(f"fixture {fixturedef.argname!r} {LAB_WHY}", pytrace=False)


def lab_missing(why: str) -> None:
    """A lab test whose machinery is missing: a skip on a developer's machine, a failure under CI=true."""
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture(autouse=True)
def _no_real_engine_in_the_fast_tier(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In the fast tier a release whose launch script runs a real engine (a Python interpreter given
    `-m specctl.engines.reference` or `-m sglang.launch_server`, not the engine double) is not started."""
    if not FAST:
        yield
        return
    from tests.fakes.engine import launches_a_real_engine

    refused: list[str] = []
    from specctl.release import release as rel

    start = rel.start

    def guarded(release: Any, **kwargs: Any) -> int:
        why = launches_a_real_engine(Path(release.path("launch.sh")))
        if why:
            refused.append(why)
            pytest.fail(f"the fast tier starts no real engine: {why}", pytrace=False)
        return start(release, **kwargs)

    monkeypatch.setattr(rel, "start", guarded)
    yield
    assert not refused, refused


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


@pytest.fixture(autouse=True)
def _connections_closed() -> Iterator[None]:
    """What a test reaches outside a CLI command (a flow called directly) is held as a command holds
    it, one connection per host, and closed when the test ends: no SSH connection outlives its test."""
    from specctl.hosts.connections import held

    with held():
        yield


@pytest.fixture(scope="session")
def sglang_python() -> str:
    """SPECCTL_SGLANG_PYTHON (`make test` sets it); a missing environment skips, or fails under CI=true."""
    python = os.environ.get("SPECCTL_SGLANG_PYTHON", "")
    if not python or not Path(python).exists():
        lab_missing("SPECCTL_SGLANG_PYTHON does not name the sglang CPU environment (make sglang-env)")
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


# --- the fakes of the fast tier (tests/fakes/) -----------------------------------------------------


@pytest.fixture
def fake_engine(tmp_path: Path) -> Iterator[Any]:
    """The engine double's controller; profiles name `fake_engine.python` as engine.python."""
    from tests.fakes.engine import FakeEngine

    with FakeEngine(tmp_path / "fake-engine") as engine:
        yield engine


@pytest.fixture
def fake_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_engine: Any) -> Any:
    """Inventory hosts reached through local transports, each with its own root and address."""
    from tests.fakes.hosts import FakeHosts

    return FakeHosts(tmp_path, monkeypatch, fake_engine)
