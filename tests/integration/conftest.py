"""Fixtures of the integration tests: a real etcd serving the v2 API, for torchrun's etcd rendezvous."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.servers import build, etcd_binary, free_port


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real etcd 3.5 with its v2 API enabled, on free localhost ports; yields its client URL."""
    failed = build("etcd-v2-build.sh")
    if failed:
        pytest.fail(f"cannot build the etcd test server:\n{failed}", pytrace=False)
    data = tmp_path_factory.mktemp("etcd")
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [
            str(etcd_binary()),
            "--enable-v2",
            f"--data-dir={data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--log-level=error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if json.loads(urllib.request.urlopen(client + "/health", timeout=2).read())["health"] == "true":
                break
        except (OSError, ValueError, KeyError):
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            pytest.fail("the etcd test server did not start", pytrace=False)
        time.sleep(0.1)
    yield client
    server.terminate()
    server.wait(10)
