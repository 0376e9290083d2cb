"""An SSH failure reaches the user as specctl's own error with its fix, never as paramiko's log lines
and tracebacks (which Python prints on stderr when nothing configured logging)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.conftest import ROOT


def test_a_server_that_does_not_speak_ssh_is_one_error_with_its_fix(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_garbage() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"this is not ssh\r\n")
            conn.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    (tmp_path / "ssh_config").write_text(f"Host odd\n  HostName 127.0.0.1\n  Port {port}\n  User root\n")
    (tmp_path / "hosts.yaml").write_text("apiVersion: specctl/v1\nkind: Inventory\nhosts:\n  odd:\n    ssh: odd\n")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "specctl", "--json", "hosts", "--check"]
            + ["--inventory", str(tmp_path / "hosts.yaml"), "--ssh-config", str(tmp_path / "ssh_config")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "SPECCTL_DEBUG"},
            timeout=120,
        )
    finally:
        server.close()
    assert done.returncode == 3, done.stdout + done.stderr
    assert "cannot connect to 127.0.0.1" in done.stdout and "Error reading SSH protocol banner" in done.stdout
    assert "Traceback" not in done.stderr and "paramiko" not in done.stderr, done.stderr
