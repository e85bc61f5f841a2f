"""What the add-ons share: a Kubernetes controller built from its Go module, run as a plain process beside the
cluster with what its Deployment would have had (a kubeconfig, a serving certificate from the cluster's CA), and
its webhooks registered as its module ships them but reached at a ``url`` on the host's loopback, where the API
server runs. Only the webhooks of the API groups asked for are registered, so nothing else in the cluster waits
on the process, and `stop` removes them.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kuberig import pki, processes, toolchain
from kuberig.cluster.handle import Cluster
from kuberig.images.registry import serving_http


@functools.cache
def module_dir(module: str, version: str) -> Path:
    """Where the Go module cache holds ``module@version`` (its build downloaded it); asked of ``go`` once."""
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOPATH": str(toolchain.gopath())},
    )
    return Path(json.loads(found.stdout)["Dir"])


def required_version(module: Path, dependency: str) -> str:
    """The version of ``dependency`` that the module at ``module`` requires (its go.mod)."""
    return (module / "go.mod").read_text().split(f"{dependency} ", 1)[1].split()[0]


def apply_crds(rig: Cluster, files: list[Path]) -> None:
    """Apply the CRDs of ``files`` (taking over fields another manager set) and wait until each is served.
    Polled rather than ``kubectl wait``, which fails at once on a CRD whose status has no conditions yet."""
    names = []
    for crd in files:
        rig.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        names += [d["metadata"]["name"] for d in yaml.safe_load_all(crd.read_text()) if d]
    established = '{.status.conditions[?(@.type=="Established")].status}'

    def served() -> bool:
        found = (rig.kubectl("get", "crd", name, "-o", f"jsonpath={established}", check=False) for name in names)
        return all(result.stdout == "True" for result in found)

    processes.wait_for("the CRDs established", served, 60)


def serving_certificate(rig: Cluster, name: str, *directories: Path) -> None:
    """``tls.crt``/``tls.key`` for 127.0.0.1, signed by the cluster's CA, in each directory."""
    pki.issue_certificate(rig.directory, name, name, server_ips=("127.0.0.1",))
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(rig.directory / f"{name}.crt", directory / "tls.crt")
        shutil.copy(rig.directory / f"{name}.key", directory / "tls.key")


def webhook_configurations(
    manifests: Path, name: str, port: int, ca_bundle: bytes, groups: set[str]
) -> list[dict[str, Any]]:
    """The webhook configurations of ``manifests`` with only the webhooks whose rules name ``groups``, each
    reaching ``https://127.0.0.1:PORT`` at its own path, named ``NAME-mutating`` and ``NAME-validating``."""
    found = []
    for document in yaml.safe_load_all(manifests.read_text()):
        kept = []
        for hook in document.get("webhooks") or []:
            hook_groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if hook_groups and hook_groups <= groups:
                url = f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}"
                kept.append({**hook, "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()}})
        suffix = "mutating" if document["kind"].startswith("Mutating") else "validating"
        meta = {"name": f"{name}-{suffix}"}
        found.append(
            {"apiVersion": document["apiVersion"], "kind": document["kind"], "metadata": meta, "webhooks": kept}
        )
    return found


@dataclass
class Controller:
    """A controller process beside the cluster, and the webhook configurations registered for it."""

    rig: Cluster
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    webhooks: list[str] = field(default_factory=list)
    on_stop: list[Callable[[], None]] = field(default_factory=list)

    def register_webhooks(self, configurations: list[dict[str, Any]], directory: Path) -> None:
        for configuration in configurations:
            path = directory / f"{configuration['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(configuration))
            self.rig.kubectl("apply", "-f", str(path))
            self.webhooks.append(f"{configuration['kind'].lower()}/{configuration['metadata']['name']}")

    def wait_ready(self, health_url: str, timeout: float = 120) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                return serving_http(health_url)
            return False

        processes.wait_for(f"{self.name} {health_url}", ready, timeout)

    def stop(self) -> None:
        for kind_and_name in self.webhooks:
            self.rig.kubectl("delete", kind_and_name, "--ignore-not-found", check=False)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        for undo in self.on_stop:
            undo()


def launch(rig: Cluster, name: str, argv: list[str], directory: Path) -> Controller:
    """Start ``argv`` with the cluster's admin kubeconfig, its output in ``DIRECTORY/NAME.log``."""
    log = directory / f"{name}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=rig.env())
    return Controller(rig, name, process, log)
