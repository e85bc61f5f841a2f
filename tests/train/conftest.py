"""The worker-library tests' fixtures: a real S3 server (versitygw). Their ranks are spawned by the scenario kit
(``tests/support/ranks.py``)."""

from __future__ import annotations

import secrets
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.support.servers import build, free_port, versitygw


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real S3-compatible server on localhost; yields the environment a client needs to reach it."""
    failed = build("s3-server-build.sh")
    if failed:
        pytest.fail(f"cannot build the S3 test server:\n{failed}", pytrace=False)
    root = tmp_path_factory.mktemp("s3")
    (root / "data").mkdir()
    (root / "meta").mkdir()
    access, secret, port = "torchjob-test", secrets.token_hex(16), free_port()
    server = subprocess.Popen(
        [
            str(versitygw()),
            "--access",
            access,
            "--secret",
            secret,
            "--port",
            f"127.0.0.1:{port}",
            "--quiet",
            "posix",
            "--sidecar",
            str(root / "meta"),
            str(root / "data"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the S3 test server did not start", pytrace=False)
            time.sleep(0.1)
    yield {
        "AWS_ACCESS_KEY_ID": access,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    server.terminate()
    server.wait(10)
