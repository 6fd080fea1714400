"""Headless Chromium for the browser tests (Playwright), and where screenshots go."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# `make screenshots` sets RELAY_SCREENSHOTS=docs/screenshots to refresh the docs'
# pictures; otherwise they go to a temp folder so a test run leaves the tree clean.
SHOTS = Path(os.environ.get("RELAY_SCREENSHOTS") or tempfile.mkdtemp(prefix="relay-shots-"))
XSS = "<script>window.__xss=1</script>"
UI_TIMEOUT_MS = 15_000


def chromium_installed() -> bool:
    return Path(CHROMIUM).exists()


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    """Debian's Chromium under Playwright; FAILS the test (never skips) when it is missing."""
    if not chromium_installed():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: the dashboard tests need Debian's chromium "
            "(apt-get install chromium; .ci/run installs it)",
            pytrace=False,
        )
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("playwright is missing: pip install -e '.[test]' (make setup)", pytrace=False)
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()
