"""``torchjob ui [--port 8265] [--host 127.0.0.1] [--allow-host NAME] [--cluster] [--allow-actions]``: the web
dashboard.

It binds to loopback unless told otherwise, answers only requests that name loopback, its bound address or an
``--allow-host`` (a page on another site that re-points its name at 127.0.0.1 gets nothing), and serves no
write action unless ``--allow-actions`` is given; then deleting a job needs the token it prints, and no page of
another site may send it.
"""

from __future__ import annotations

import argparse
import secrets
import socket
import sys

from torchjob.cli.common import add_target_options, client
from torchjob.sdk.errors import SdkError


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("ui", help="serve a web dashboard of the jobs (local ones, or a cluster's with --cluster)")
    p.add_argument("--port", type=int, default=8265, help="port to serve on (default 8265; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests that name this host (repeatable; '*': any, which turns the check off)",
    )
    p.add_argument(
        "--allow-actions", action="store_true", help="allow deleting jobs from the page, with a token printed here"
    )
    add_target_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from torchjob.ui.app import create_app
        from torchjob.ui.guard import allowed_hosts, host_problem
    except ImportError as err:
        raise SdkError(f"torchjob ui needs its web packages ({err.name}): pip install 'torchjob[ui]'") from None
    if not 0 <= args.port <= 65535:
        print(f"torchjob: --port: expected 0 to 65535, got {args.port}", file=sys.stderr)
        return 2
    token = secrets.token_urlsafe(18) if args.allow_actions else None
    problems = [p for p in map(host_problem, args.allow_host) if p]
    if problems:
        print(f"torchjob: {problems[0]}", file=sys.stderr)
        return 2
    hosts = allowed_hosts(args.host, args.allow_host)
    app = create_app(client(args), token, hosts)
    # Bound here, so that the address (a free port with --port 0) is printed before the first request.
    try:
        listener = socket.create_server((args.host, args.port))
    except OSError as err:
        raise SdkError(f"cannot serve on {args.host}:{args.port}: {err.strerror}") from None
    host, port = listener.getsockname()[:2]
    if token is not None:
        print(f"torchjob: actions allowed with the token {token}", file=sys.stderr, flush=True)
    print(f"torchjob: dashboard at http://{host}:{port}/", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[listener])
    return 0
