"""The dashboard's web app: two pages and the small JSON API they poll, over a ``JobClient`` (local jobs,
or a cluster's), the same client the CLI uses.

Read-only unless started with actions allowed; then ``POST /api/jobs/<name>/delete`` and
``POST /api/jobs/<name>/scale?workers=N`` (an elastic job) work with the token printed at start-up
(``Authorization: Bearer <token>``), and nothing else writes. Every request must name a host the dashboard
answers to, and a write must not come from another site's page (``guard.py``).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import plotly
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from torchjob.sdk.client import JobClient
from torchjob.sdk.errors import JobNotFoundError, SdkError
from torchjob.sdk.local_client import LocalClient
from torchjob.ui import views
from torchjob.ui.guard import LOOPBACK_NAMES, OriginGuard

_HERE = resources.files("torchjob.ui")
_PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
# A log request returns at most this much (the page asks again at once for the rest).
_LOG_CHUNK = 256 * 1024
_NEEDS_TOKEN = "actions need the token torchjob ui printed (--allow-actions)"


def create_app(client: JobClient, token: str | None = None, hosts: Sequence[str] = LOOPBACK_NAMES) -> Starlette:
    """The dashboard over ``client``. ``token``: allow the delete action to whoever presents it. ``hosts``: the
    host names it answers to (``guard.allowed_hosts``)."""
    pages = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")), autoescape=True, undefined=jinja2.StrictUndefined
    )

    def page(name: str, **values: Any) -> HTMLResponse:
        return HTMLResponse(pages.get_template(name).render(actions=token is not None, **values))

    def job_list(request: Request) -> Response:
        return page("jobs.html", rows=[views.job_row(s) for s in client.list()])

    def job_page(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            detail = views.job_detail(client.get_wire(name))
        except JobNotFoundError as err:
            return HTMLResponse(pages.get_template("missing.html").render(message=str(err)), status_code=404)
        return page("job.html", job=detail, local=isinstance(client, LocalClient))

    def api_jobs(request: Request) -> Response:
        return JSONResponse([views.job_row(s) for s in client.list()])

    def api_job(request: Request) -> Response:
        return JSONResponse(views.job_detail(client.get_wire(request.path_params["name"])))

    def api_metrics(request: Request) -> Response:
        name = request.path_params["name"]
        if not isinstance(client, LocalClient):
            client.get_wire(name)  # 404 for a job that does not exist
            return JSONResponse({})  # a cluster's per-rank metrics stay in its Pods: trainerStatus only
        return JSONResponse(views.chart_series(client.metrics(name)))

    def api_logs(request: Request) -> Response:
        name, query = request.path_params["name"], request.query_params
        replica, offset = query.get("replica", ""), int(query.get("offset", "0") or 0)
        attempt = int(query["attempt"]) if query.get("attempt") else None
        if isinstance(client, LocalClient):
            path = client.log_files(name, attempt).get(replica)
            if path is None:
                client.check_replica(name, replica)
                return JSONResponse({"text": "", "offset": 0})
            with open(path, "rb") as log:
                log.seek(offset)
                data = log.read(_LOG_CHUNK)
            return JSONResponse({"text": data.decode(errors="replace"), "offset": offset + len(data)})
        text = client.logs(name, replica, attempt)  # a Pod's log, fetched whole: the offset counts characters
        return JSONResponse({"text": text[offset:], "offset": len(text)})

    def authorized(request: Request) -> bool:
        given = request.headers.get("authorization", "").removeprefix("Bearer ")
        return token is not None and hmac.compare_digest(given.encode(), token.encode())

    def api_delete(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": _NEEDS_TOKEN}, 403)
        client.delete(request.path_params["name"])
        return JSONResponse({"deleted": request.path_params["name"]})

    def api_scale(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": _NEEDS_TOKEN}, 403)
        workers = request.query_params.get("workers", "")
        if not workers.isdigit():
            return JSONResponse({"error": f"workers: expected a whole number, got {workers!r}"}, 400)
        client.scale(request.path_params["name"], int(workers))
        return JSONResponse({"scaled": request.path_params["name"], "workers": int(workers)})

    def plotly_js(request: Request) -> Response:
        return FileResponse(_PLOTLY_JS, media_type="text/javascript")

    def not_found(request: Request, err: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(err)}, 404)
        return HTMLResponse(pages.get_template("missing.html").render(message=str(err)), status_code=404)

    def refused(request: Request, err: Exception) -> Response:
        return JSONResponse({"error": str(err)}, 400)

    routes = [
        Route("/", job_list),
        Route("/jobs/{name}", job_page),
        Route("/api/jobs", api_jobs),
        Route("/api/jobs/{name}", api_job),
        Route("/api/jobs/{name}/metrics", api_metrics),
        Route("/api/jobs/{name}/logs", api_logs),
        Route("/api/jobs/{name}/delete", api_delete, methods=["POST"]),
        Route("/api/jobs/{name}/scale", api_scale, methods=["POST"]),
        Route("/static/plotly.min.js", plotly_js),
        Mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static"),
    ]
    handlers = {JobNotFoundError: not_found, SdkError: refused, ValueError: refused}
    guards = [Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts)), Middleware(OriginGuard, hosts=hosts)]
    return Starlette(routes=routes, exception_handlers=handlers, middleware=guards)
