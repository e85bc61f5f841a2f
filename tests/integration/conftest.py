"""Fixtures of the integration tests: a real etcd serving the v2 API, for torchrun's etcd rendezvous."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tools.kube_rig import cache_dir, free_port, versions

from tests.conftest import ROOT


def etcd_binary() -> Path:
    return cache_dir() / "etcd" / f"etcd-{versions()['ETCD_V2_VERSION']}" / "bin" / "etcd"


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real etcd 3.5 with its v2 API enabled, on free localhost ports; yields its client URL."""
    build = subprocess.run(["bash", str(ROOT / "tools" / "etcd-v2-build.sh")], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"cannot build the etcd test server:\n{build.stderr[-3000:]}", pytrace=False)
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


def etcd_v2_keys(client: str) -> list[str]:
    """Every key etcd's v2 store holds, recursively."""
    tree = json.loads(urllib.request.urlopen(client + "/v2/keys/?recursive=true", timeout=5).read())
    keys: list[str] = []
    todo = [tree["node"]]
    while todo:
        node = todo.pop()
        keys.append(node.get("key", "/"))
        todo += node.get("nodes", [])
    return keys
