"""The engine double's process: what `python -m specctl.engines.reference ARGS` becomes on a fast-tier host.

Run as `python -S -I _engine_stub.py CONTROLLER ARGS` (standard library only, no site: it starts in
milliseconds). It tells the test's controller (an abstract Unix socket named CONTROLLER) who it is,
then does what the controller answers: print the start-up log lines the engine would print (on
stderr, which the launch script sends to server.log), then either exit with a status (a crash at
start, or an exit during start-up) or print the ready lines once the controller serves HTTP for it,
and live until it is killed. The controller serves only while this process lives: its socket
closes when the process does.
"""

import json
import os
import socket
import sys
import time


def log(line: str) -> None:
    sys.stderr.write(time.strftime("[%Y-%m-%d %H:%M:%S] ") + line + "\n")
    sys.stderr.flush()


def main() -> int:
    address, argv = sys.argv[1], sys.argv[2:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("\0" + address)
    hello = {
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "argv": argv,
        "cwd": os.getcwd(),
        "release_dir": os.environ.get("SPECCTL_RELEASE_DIR", ""),
        "host": os.environ.get("SPECCTL_FAKE_HOST", ""),
    }
    sock.sendall((json.dumps(hello) + "\n").encode())
    reader = sock.makefile("r")
    while True:
        line = reader.readline()
        if not line:
            return 0  # the controller went away (the test ended): nothing to serve
        order = json.loads(line)
        for text in order.get("log", []):
            log(text)
        if order.get("sleep_s"):
            time.sleep(order["sleep_s"])
        if "exit" in order:
            return int(order["exit"])
        if order.get("wait"):
            break
    while reader.readline():  # serving until killed (or the controller closes)
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
