"""``/docs/``: the dashboard links to the documentation, which ``relay api`` serves from
the built site (``make docs``), and nothing outside that folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from relay.api import docs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    built = tmp_path / "site"
    (built / "guides" / "receiving").mkdir(parents=True)
    (built / "index.html").write_text("<h1>relay docs</h1>")
    (built / "guides" / "receiving" / "index.html").write_text("<h1>Receiving</h1>")
    (tmp_path / "secret.txt").write_text("not the docs")
    monkeypatch.setattr(docs, "SITE", built)
    return built


def test_the_dashboard_links_to_the_docs() -> None:
    page = (ROOT / "relay" / "ui" / "index.html").read_text()
    assert '<a id="docs" href="/docs/"' in page


async def test_the_built_site_is_served_under_docs(
    site: Path, make_store: Any, make_api: Any
) -> None:
    api = await make_api(await make_store())
    async with api.session.get(api.url + "/docs", allow_redirects=False) as r:
        assert r.status == 302 and r.headers["Location"] == "/docs/"
    for path, text in (("/docs/", "relay docs"), ("/docs/guides/receiving/", "Receiving")):
        async with api.session.get(api.url + path) as r:
            assert r.status == 200 and r.content_type == "text/html", path
            assert text in await r.text()
    for path in ("/docs/nothing/", "/docs/%2e%2e/secret.txt", "/docs/..%2fsecret.txt"):
        async with api.session.get(api.url + path) as r:
            assert r.status == 404, path
            assert (await r.json())["error"] == "not_found"


async def test_without_a_built_site_docs_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_store: Any, make_api: Any
) -> None:
    monkeypatch.setattr(docs, "SITE", tmp_path / "absent")
    api = await make_api(await make_store())
    async with api.session.get(api.url + "/docs/") as r:
        assert r.status == 404
        assert "make docs" in (await r.json())["message"]
