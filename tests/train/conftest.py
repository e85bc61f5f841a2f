"""Helpers for worker-library tests: spawn N real ranks of a script, and a real S3 server (versitygw)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import build, free_port, versitygw

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def spawn_ranks(
    script: str, world: int, *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> list[subprocess.CompletedProcess[str]]:
    """Run ``world`` ranks of ``scripts/<script>`` with the Kubeflow env set by hand; wait for all."""
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / script), *args],
            env={
                **os.environ,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "OMP_NUM_THREADS": "1",
                **(env or {}),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, ""))
    return results


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
