"""kubectl against one cluster: the handle every layer above the control plane talks to the API through."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kuberig import toolchain


@dataclass
class Kubectl:
    kubeconfig: Path

    def env(self) -> dict[str, str]:
        """This process's environment with ``KUBECONFIG`` pointing at the cluster (for clients run beside it)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS``; with ``check``, a failure raises with kubectl's own error text."""
        result = subprocess.run(
            [str(toolchain.kubectl()), *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        self.kubectl("apply", *(["-n", namespace] if namespace else []), "-f", "-", input=text)

    def ready(self) -> bool:
        return self.kubectl("get", "--raw=/readyz", check=False).returncode == 0
