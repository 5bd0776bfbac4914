"""A nats-server for tests: JetStream on a free loopback port and a temporary
store, and JetStream streams made over the plain NATS protocol (no client
library needed).

As a program it runs a command beside a server, for the C tests::

    python3 nats_helper.py --stream RILL:rill.> -- ./test_nats

starts the server, creates the streams, runs the command with RILL_NATS_URL
set, stops the server and exits with the command's status.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

START_TIMEOUT_S = 20.0


def server_binary() -> str | None:
    """The nats-server to run: $NATS_SERVER or the one on PATH."""
    return shutil.which(os.environ.get("NATS_SERVER", "nats-server"))


def required() -> bool:
    """Whether tests must fail, rather than skip, without nats-server."""
    return os.environ.get("RILL_REQUIRE_NATS", "") not in ("", "0")


def binary_or_skip() -> str:
    """For a pytest test that needs the bridge and a server: the nats-server
    to run; skips the test (or fails it, under RILL_REQUIRE_NATS) when the
    loaded librill has no bridge or nats-server is not installed."""
    import pytest

    from rill import nats

    if not nats.AVAILABLE:
        if required():
            pytest.fail("RILL_REQUIRE_NATS is set but the loaded librill has no NATS bridge")
        pytest.skip("the loaded librill was built without the nats feature (ffi/install.sh --with-nats)")
    binary = server_binary()
    if binary is None:
        if required():
            pytest.fail("RILL_REQUIRE_NATS is set but nats-server is not on PATH")
        pytest.skip("nats-server is not installed (apt-get install nats-server)")
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class NatsServer:
    """A nats-server with JetStream; `stop()` kills it and removes its store."""

    def __init__(self, binary: str) -> None:
        self.port = _free_port()
        self.store = tempfile.mkdtemp(prefix="rill-nats-")
        self.url = f"nats://127.0.0.1:{self.port}"
        self._proc = subprocess.Popen(
            [binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", self.store],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self._proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"nats-server exited at start ({self._proc.returncode})") from None
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"nats-server did not accept connections on {self.port}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        shutil.rmtree(self.store, ignore_errors=True)

    def create_stream(self, name: str, subjects: list[str]) -> None:
        """Creates a file-backed stream with a JetStream API request."""
        request = json.dumps({"name": name, "subjects": subjects, "storage": "file"}).encode()
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            f = s.makefile("rb")
            if not f.readline().startswith(b"INFO "):
                raise RuntimeError("no INFO from nats-server")
            inbox = b"_INBOX.rill-test"
            s.sendall(
                b'CONNECT {"verbose":false,"pedantic":false}\r\n'
                + b"SUB "
                + inbox
                + b" 1\r\n"
                + b"PUB $JS.API.STREAM.CREATE."
                + name.encode()
                + b" "
                + inbox
                + b" "
                + str(len(request)).encode()
                + b"\r\n"
                + request
                + b"\r\n"
            )
            while True:
                line = f.readline()
                if not line:
                    raise RuntimeError("nats-server closed the connection")
                if line.startswith(b"PING"):
                    s.sendall(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    raise RuntimeError(line.decode().strip())
                elif line.startswith(b"MSG "):
                    size = int(line.split()[-1])
                    reply = json.loads(f.read(size + 2)[:size])
                    if "error" in reply:
                        raise RuntimeError(f"creating stream {name}: {reply['error']}")
                    return


def main(argv: list[str]) -> int:
    streams: list[tuple[str, list[str]]] = []
    while argv and argv[0] != "--":
        if argv[0] == "--stream" and len(argv) > 1:
            stream, _, subject_list = argv[1].partition(":")
            streams.append((stream, subject_list.split(",")))
            argv = argv[2:]
        else:
            print(f"usage: nats_helper.py [--stream NAME:SUBJ,...]... -- COMMAND...; got {argv[0]!r}", file=sys.stderr)
            return 2
    command = argv[1:]
    binary = server_binary()
    if binary is None:
        print("nats-server is not installed", file=sys.stderr)
        return 1
    server = NatsServer(binary)
    try:
        for name, subjects in streams:
            server.create_stream(name, subjects)
        return subprocess.call(command, env={**os.environ, "RILL_NATS_URL": server.url})
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
