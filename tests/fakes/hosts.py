"""Several hosts on this machine for the fast tier: the SSH connection replaced by a local transport.

An inventory host that `FakeHosts` names is reached without SSH: its commands run here (the real `sh`,
the real release, lock and process scripts), each host with its own state root under the test's
tmp_path and its own loopback address (127.0.0.N: its servers' ports are its own, as on separate
machines). Its commands see SPECCTL_FAKE_HOST (so the engine double knows whose server it is) and
SPECCTL_FAKE_HOST_ADDRESS (so the port fact binds that host's address). Only `HostSpec.transport` is
replaced; inventory parsing, groups, sessions and every flow above it are the real code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.hosts import local
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Completed, OnOutput, Transport


class FakeHosts:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: Any = None) -> None:
        self.tmp = tmp_path
        self.engine = engine
        self.hosts: dict[str, tuple[Path, str]] = {}  # name -> (state root, address)
        self.down: set[str] = set()  # hosts whose connection fails
        self.sent: list[tuple[str, list[str]]] = []
        fake = self

        original = HostSpec.transport

        def transport(spec: HostSpec, **kwargs: Any) -> Transport:
            if spec.name in fake.hosts:
                return fake.transport(spec.name)
            return original(spec, **kwargs)

        monkeypatch.setattr(HostSpec, "transport", transport)

    def add(self, *names: str) -> FakeHosts:
        for name in names:
            root = self.tmp / "hosts" / name
            root.mkdir(parents=True, exist_ok=True)
            address = f"127.0.0.{len(self.hosts) + 2}"
            self.hosts[name] = (root, address)
            if self.engine is not None:
                self.engine.add_host(name, str(root), address)
        return self

    def root(self, name: str) -> Path:
        return self.hosts[name][0]

    def transport(self, name: str) -> Transport:
        _, address = self.hosts[name]

        def run(
            argv: Sequence[str],
            *,
            timeout_s: float,
            env: Mapping[str, str] | None,
            stdin: bytes | None,
            on_stdout: OnOutput | None = None,
        ) -> Completed:
            self.sent.append((name, [str(a) for a in argv]))
            if name in self.down:
                from specctl.errors import ConnectionLost

                raise ConnectionLost(f"{name}: connection refused (fake host down)", host=name)
            here = {**(env or {}), "SPECCTL_FAKE_HOST": name, "SPECCTL_FAKE_HOST_ADDRESS": address}
            return local._run(argv, timeout_s=timeout_s, env=here, stdin=stdin, on_stdout=on_stdout)

        return Transport(name, address, run)

    def inventory(self, path: Path | None = None, groups: Mapping[str, list[str]] | None = None) -> Path:
        path = path or self.tmp / "hosts.yaml"
        data: dict[str, Any] = {
            "apiVersion": "specctl/v1",
            "kind": "Inventory",
            "hosts": {name: {"root": str(root)} for name, (root, _) in self.hosts.items()},
        }
        if groups:
            data["groups"] = dict(groups)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path
