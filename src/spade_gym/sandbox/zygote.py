"""The zygote: a clean interpreter that pre-imports the worker and forks one worker per request.

Forking from the host would copy its memory (model weights, API keys, open files) into code a
language model wrote. :class:`spade_gym.sandbox.client.Zygote` starts this script in a cleared
environment; for each request on its control socket it receives the worker's two pipe ends
(``SCM_RIGHTS``), forks, and replies with the child's pid.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import types


def _import_sandbox(package_dir: str) -> types.ModuleType:
    """Import ``spade_gym.sandbox.worker`` without running ``spade_gym/__init__`` (gymnasium, numpy)."""
    package = types.ModuleType("spade_gym")
    package.__path__ = [package_dir]
    sys.modules["spade_gym"] = package
    from spade_gym.sandbox import worker

    return worker


def main() -> None:
    config = json.loads(sys.argv[1])
    sys.path[:0] = [p for p in config["sys_path"] if p not in sys.path]
    worker = _import_sandbox(config["package_dir"])
    control = socket.socket(fileno=int(config["control_fd"]))
    os.environ.clear()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the host's terminal is the host's
    control.sendall(b'{"ready": true}')
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, 1 << 16, 2)
        except OSError:
            break
        if not message:
            break
        request = json.loads(message)
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            control.sendall(b'{"error": "expected two descriptors"}')
            continue
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.setsid()
                worker.serve(fds[0], fds[1], request["config"])
            finally:
                os._exit(1)
        for fd in fds:
            os.close(fd)
        control.sendall(json.dumps({"pid": pid}).encode())
    os._exit(0)


if __name__ == "__main__":
    main()
