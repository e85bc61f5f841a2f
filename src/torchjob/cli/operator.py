"""``torchjob operator``: run the operator that reconciles PyTorchJobs on a cluster (what deploy/ runs).

``torchjob crd`` prints the CustomResourceDefinition (``torchjob crd | kubectl apply -f -``); where
Kubeflow's own CRD is installed already, keep it: the operator works with it as it is.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from types import FrameType

from torchjob.backends.kubernetes.crd import crd_manifest, elasticjob_crd_manifest
from torchjob.cli.common import add_target_options


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("operator", help="run the Kubernetes operator for PyTorchJobs")
    add_target_options(p, cluster_only=True)
    p.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (the default)")
    p.add_argument("--workers", type=int, default=4, help="jobs reconciled in parallel (default 4)")
    p.add_argument("--health-port", type=int, help="serve /healthz and /readyz on this port")
    p.add_argument(
        "--managed-by",
        action="append",
        metavar="VALUE",
        help="also reconcile jobs whose runPolicy.managedBy is VALUE (unset and Kubeflow's own always are)",
    )
    p.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: act only while holding the Lease torchjob-operator",
    )
    p.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "torchjob-system"),
        help="namespace of the leader election Lease (default $POD_NAMESPACE, else torchjob-system)",
    )
    p.add_argument(
        "--report-address",
        metavar="HOST:PORT",
        help="hear torchjob.train's progress reports from Pods here (hang detection and trainerStatus on a "
        "cluster); e.g. 0.0.0.0:8443",
    )
    p.add_argument(
        "--report-url",
        metavar="URL",
        help="the URL Pods reach --report-address by (default https://HOST:PORT), e.g. "
        "https://torchjob-operator.torchjob-system.svc:8443; an https URL is served with a certificate the "
        "operator issues from its own CA (kept in --report-secret) and gives to its Pods",
    )
    p.add_argument(
        "--report-secret",
        metavar="NAMESPACE/NAME",
        default="torchjob-system/torchjob-report-tls",
        help="the Secret that keeps the report endpoint's CA and certificate (default %(default)s)",
    )
    p.set_defaults(handler=handle)

    c = verbs.add_parser("crd", help="print the PyTorchJob (or ElasticJob) CustomResourceDefinition (YAML)")
    c.add_argument("--kind", choices=("PyTorchJob", "ElasticJob"), default="PyTorchJob", help="default %(default)s")
    c.set_defaults(handler=print_crd)


def handle(args: argparse.Namespace) -> int:
    # Late: the operator's parts and the Kubernetes client take 0.3 s to import (cli/__init__.py).
    from torchjob.backends.kubernetes.cluster import connect
    from torchjob.controller.leader import ElectionSettings
    from torchjob.controller.operator import DEFAULT_MANAGED_BY, OperatorSettings
    from torchjob.controller.operator_main import run_operator

    if args.workers < 1:
        print("torchjob: --workers: must be at least 1", file=sys.stderr)
        return 2
    try:
        report_address = _host_port(args.report_address) if args.report_address else None
    except ValueError as err:
        print(f"torchjob: --report-address: {err}", file=sys.stderr)
        return 2
    if args.report_url and not args.report_url.startswith(("http://", "https://")):
        print(f"torchjob: --report-url: expected an http:// or https:// URL, got {args.report_url!r}", file=sys.stderr)
        return 2
    namespace, _, name = args.report_secret.partition("/")
    report_secret = (namespace, name)
    if not namespace or not name or "/" in name:
        print(f"torchjob: --report-secret: expected NAMESPACE/NAME, got {args.report_secret!r}", file=sys.stderr)
        return 2
    if args.report_url and report_address is None:
        print("torchjob: --report-url: needs --report-address (where the operator listens)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = OperatorSettings(
        namespace=None if args.all_namespaces else args.namespace,
        workers=args.workers,
        managed_by=(*DEFAULT_MANAGED_BY, *(args.managed_by or [])),
        health_port=args.health_port,
        election=ElectionSettings(namespace=args.lease_namespace) if args.leader_elect else None,
        report_address=report_address,
        report_url=args.report_url,
        report_secret=report_secret,
    )

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    # `kill -USR1` prints every thread's stack: how to see where a stuck operator is stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        run_operator(connect(args.kubeconfig, args.context), settings)
    except KeyboardInterrupt:
        logging.getLogger("torchjob.operator").info("stopped")
    return 0


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT with a port from 1 to 65535, got {value!r}")
    return host, int(port)


def print_crd(args: argparse.Namespace) -> int:
    import yaml

    manifest = elasticjob_crd_manifest() if args.kind == "ElasticJob" else crd_manifest()
    print(yaml.safe_dump(manifest, sort_keys=False), end="")
    return 0
