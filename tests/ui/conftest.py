"""The dashboard served by ``torchjob ui`` as a user runs it, driven by a real headless browser: Debian's
chromium through Playwright (tools/browser-build.sh installs it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.support.dashboard import CHROMIUM, Dashboard

__all__ = ["Dashboard"]


@pytest.hookimpl(tryfirst=True)  # before xdist's hook reads the marker (see tests/node/conftest.py)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/ui/" in str(item.path):
            item.add_marker(pytest.mark.xdist_group("browser"))  # one browser per run


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run tools/bootstrap --test-servers", pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()
