"""Kubernetes' rules for names (DNS-1035 and DNS-1123), shared by validation and the local state directory.

Kept free of heavy imports: the CLI checks a name given on the command line before it loads anything else.
"""

from __future__ import annotations

import re

DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def job_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a job (DNS-1123 subdomain rules, as the API server's), or None."""
    if not name:
        return "a job name is required"
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        return (
            f"{name!r} is not a valid job name: expected a DNS-1123 name (lowercase letters, digits, '-' and "
            "'.', starting and ending with a letter or digit)"
        )
    return None
