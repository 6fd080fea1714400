"""Headless Chromium for the browser tests (Playwright), and where screenshots go."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
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


@pytest.fixture(scope="module")
def cdp() -> Iterator[str]:
    """One headless Chromium for the module; yields its DevTools websocket address."""
    if not chromium_installed():
        pytest.fail(f"Chromium not found at {CHROMIUM} (apt-get install chromium)", pytrace=False)
    profile = tempfile.mkdtemp(prefix="relay-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_ARGS, "--remote-debugging-port=0", f"--user-data-dir={profile}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if m := re.search(r"DevTools listening on (ws://\S+)", line):
                yield m.group(1)
                break
        else:
            pytest.fail("Chromium did not print its DevTools address", pytrace=False)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@asynccontextmanager
async def context(cdp_url: str, **options: Any) -> AsyncIterator[Any]:
    """A fresh browser context (own cookies and storage) on the module's Chromium."""
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=UI_TIMEOUT_MS)
    async with async_playwright() as pw:
        browser = await pw.chromium.connect_over_cdp(cdp_url)
        ctx = await browser.new_context(**options)
        ctx.set_default_timeout(UI_TIMEOUT_MS)
        try:
            yield ctx
        finally:
            await ctx.close()
            await browser.close()  # only the connection: the module's Chromium goes on


def _console_error(errors: list[Any], message: Any) -> None:
    # Chromium logs every non-2xx answer as an error: an API refusal (401 of an expired
    # session, 404 of another app's event) is the page's to handle, not an error of it,
    # and neither is the browser's own request for a favicon. A page file that fails to
    # load (a module, a style sheet) counts.
    url = message.location.get("url", "")
    if message.type != "error" or "/v1/" in url or url.endswith("/favicon.ico"):
        return
    errors.append(f"{message.text} ({url})")


def watch(page: Any) -> dict[str, list[Any]]:
    """Uncaught page errors and console errors (a CSP refusal is one), and every
    request's URL and Referer, for the token checks."""
    seen: dict[str, list[Any]] = {"errors": [], "requests": []}
    page.on("pageerror", lambda e: seen["errors"].append(e))
    page.on("console", lambda m: _console_error(seen["errors"], m))
    page.on("request", lambda r: seen["requests"].append((r.url, r.headers.get("referer"))))
    return seen


async def sign_in(page: Any, url: str, at: str = "/ui/", *, click: bool = False) -> None:
    """Open the dashboard page ``at`` of the API on ``url`` and sign in with the tests'
    operator token, by keyboard (``click``: with the mouse, on the form's button)."""
    await page.goto(url + at)
    await page.fill("#token", "test-token")
    if click:
        await page.click("#signin-form button[type=submit]")
    else:
        await page.keyboard.press("Enter")
