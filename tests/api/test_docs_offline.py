"""/docs and /redoc work on a machine without the internet: their pages reference only assets the
service serves itself, and in a browser whose every request off this machine is refused, Swagger
UI and ReDoc render the API. The URLs `tmc serve --demo` prints are the ones checked."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Route, expect, sync_playwright

from tests.services import ROOT, free_port, wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class References(HTMLParser):
    """Every URL a page loads by itself: src and href attributes, and url('...') in scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_data(self, data: str) -> None:
        self.urls += re.findall(r"""url:\s*['"]([^'"]+)['"]""", data)


def references(html: str) -> list[str]:
    parser = References()
    parser.feed(html)
    return parser.urls


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_pages_reference_only_local_assets(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "http://" not in response.text and "https://" not in response.text
    assert "default-src 'self'" in response.headers["content-security-policy"]
    urls = references(response.text)
    assert urls, response.text
    for url in urls:
        assert url.startswith("/"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        kind = asset.headers["content-type"]
        if url.endswith(".js"):
            assert kind.startswith(("text/javascript", "application/javascript")), kind
            assert len(asset.content) > 100_000  # the real bundle, not a placeholder
        elif url.endswith(".css"):
            assert kind.startswith("text/css"), kind
        elif url.endswith(".png"):
            assert kind == "image/png"
        else:
            assert url == "/openapi.json" and kind == "application/json"


def test_the_docs_assets_are_not_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not any(p.startswith(("/docs", "/redoc")) for p in paths)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`tmc serve --demo` as a person starts it; yields what it printed once it answers."""
    tmp = tmp_path_factory.mktemp("docs")
    port = free_port()
    out = tmp / "stdout.txt"
    tmc = Path(sys.executable).parent / "tmc"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [
                str(tmc),
                "serve",
                "--demo",
                "--create",
                "--port",
                str(port),
                "--database",
                f"sqlite:///{tmp / 'tmc.db'}",
            ],
            stdout=sink,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200, 120, "tmc serve")
            time.sleep(0.2)
            yield out.read_text()
        finally:
            proc.terminate()
            proc.wait(20)


def test_the_banner_points_to_pages_that_render_offline(served: str) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (./dev test installs it)")
    pages = sorted(set(re.findall(r"http://127\.0\.0\.1:\d+/(?:docs|redoc|dashboard/)", served)))
    assert [urlsplit(p).path for p in pages] == ["/dashboard/", "/docs", "/redoc"], served
    refused: list[str] = []

    def offline(route: Route) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.route("**/*", offline)
            for url in pages:
                assert page.goto(url) is not None
            docs, redoc = (u for u in pages if not u.endswith("/dashboard/"))
            page.goto(docs)
            expect(page.locator(".swagger-ui .info .title")).to_contain_text("tmc", timeout=30_000)
            expect(page.locator(".opblock-tag-section").first).to_be_visible()
            page.goto(redoc)
            expect(page.locator("h1").first).to_contain_text("tmc", timeout=30_000)
            expect(page.get_by_text("/recommend").first).to_be_attached()
        finally:
            browser.close()
    assert refused == []
