"""``torchjob ui``: a web dashboard of jobs, read from the same records and API as the CLI (no second source
of truth): every job with its state, progress and age; one job's attempts, restarts and repairs on a timeline
with their causes; per-rank loss and throughput charts and each replica's log, both following the job live.

``views.py`` shapes what the page shows (pure), ``app.py`` serves it (Starlette, plotly.js from the plotly
package, no build step and nothing fetched from the internet), ``templates/`` and ``static/`` are the page.
"""
