"""`hfzoo serve` in its own process on a free port, as the serving tests start, wait for and stop it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from tests.helpers.paths import REPO


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve_process(*args: str) -> Iterator[subprocess.Popen]:
    """`hfzoo serve <args>` started on a free port (its URL as `process.url`), stopped at the end."""
    port = _free_port()
    command = [sys.executable, "-m", "hfzoo.cli", "serve", *args, "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    process.url = f"http://127.0.0.1:{port}"
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # uvicorn waits for open requests; a hung one must not outlive the tests
            process.kill()
            process.wait()


def wait_until_serving(process: subprocess.Popen, timeout_s: float = 60) -> str:
    """The URL of the server `process`, once it answers /health."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, f"hfzoo serve exited:\n{process.stdout.read()}"
        try:
            if httpx.get(f"{process.url}/health").status_code == 200:
                return process.url
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"hfzoo serve did not answer /health within {timeout_s:.0f} s"
            time.sleep(0.2)


def refused(response: httpx.Response, status: int, field: str | None) -> str:
    """The message of a refusal with `status` whose JSON body names `field`."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field and error["message"]
    return error["message"]
