"""The dashboard in headless Chromium (Debian's package, never a downloaded browser), clicking
through every page of a running service loaded with demo data."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from api.auth import Role, token_hash
from api.db import make_engine, make_session_factory, unit_of_work
from api.demo import ensure_operator_token, load_demo
from api.migrate import upgrade_to_head
from api.orm import ApiToken
from api.settings import Settings
from tests.services import ROOT, uvicorn_server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Screenshots are test artefacts; TMC_SCREENSHOTS=docs/screenshots refreshes the committed ones.
SHOTS = Path(os.environ.get("TMC_SCREENSHOTS", ROOT / ".artifacts" / "screenshots"))
VIEWER = "tmc_dashboard_viewer"
AGENT = "tmc_dashboard_agent"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{tmp / 'tmc.db'}"
    reports = tmp / "reports"
    reports.mkdir()
    (reports / "bench-latency.md").write_text("# Recommendation latency\n\npaper-77: 0.55 ms\n")
    upgrade_to_head(url)
    sessions = make_session_factory(make_engine(Settings(database_url=url)))
    load_demo(sessions)
    token = ensure_operator_token(sessions, None)
    with unit_of_work(sessions) as session:
        session.add(ApiToken(name="viewer", role=Role.viewer, token_hash=token_hash(VIEWER)))
        session.add(ApiToken(name="agent", role=Role.agent, token_hash=token_hash(AGENT)))
    env = {"TMC_DATABASE_URL": url, "TMC_REPORTS_DIR": str(reports)}
    with uvicorn_server(env) as base:
        for objective in ("cheapest", "slo:5%"):
            httpx.post(
                f"{base}/recommend",
                json={"workload": "graph500", "objective": objective},
                headers={"Authorization": f"Bearer {token}"},
            ).raise_for_status()
        yield base, token


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (./dev test installs it)")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert errors == [], errors


def sign_in(page: Page, base: str, token: str) -> None:
    page.goto(f"{base}/dashboard/")
    page.get_by_label("API token (operator or viewer)").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("navigation", name="Pages")).to_be_visible()


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_every_page_renders_with_data(service: tuple[str, str], page: Page) -> None:
    base, token = service
    sign_in(page, base, token)

    expect(page.get_by_role("heading", name="Cluster")).to_be_visible()
    expect(page.get_by_role("meter", name="DRAM utilization")).to_be_visible()
    expect(page.locator("#cluster-history polyline")).to_have_count(4)
    # At least 16 nodes x 4 resources: wait until the 64th cell is drawn.
    expect(page.locator("#cluster-heat rect[data-cell]").nth(16 * 4 - 1)).to_be_attached()
    expect(page.get_by_text("stranding resources")).to_be_visible()
    shot(page, "cluster")

    page.get_by_role("link", name="Workloads").click()
    expect(page.get_by_role("link", name="graph500")).to_be_visible()
    shot(page, "workloads")
    page.get_by_role("link", name="graph500").click()
    expect(page.get_by_role("heading", name="Workload graph500")).to_be_visible()
    expect(page.locator("#w-slowdown rect[data-cell]")).to_have_count(77)
    expect(page.locator("#w-cost rect[data-cell]")).to_have_count(77)
    # The charts draw one after another: wait for the points, do not count them mid-draw.
    expect(page.locator("#w-pareto circle[data-point]")).to_have_count(77)
    expect(page.locator("#w-decision tr.chosen")).to_have_count(1)
    shot(page, "workload")

    page.get_by_role("link", name="Decisions").click()
    expect(page.get_by_text("2 decision(s)")).to_be_visible()
    page.get_by_label("Objective").fill("slo:5%")
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("1 decision(s)")).to_be_visible()
    page.locator("#decision-list summary").first.click()
    expect(page.get_by_role("table", name="Inputs")).to_be_visible()
    shot(page, "decisions")

    page.get_by_role("link", name="Nodes").click()
    expect(page.get_by_role("table", name="16 nodes")).to_be_visible()
    # The demo reserves 28 + 20 + 12 + 32 ways on local-0..3 and 16 + 24 on pooled-0..1.
    expect(page.locator(".bitmap span.on")).to_have_count(28 + 20 + 12 + 32 + 16 + 24)
    shot(page, "nodes")

    page.get_by_role("link", name="Reports").click()
    page.get_by_role("link", name="bench-latency.md").click()
    expect(page.locator("#report-body pre")).to_contain_text("0.55 ms")
    shot(page, "reports")


def test_keyboard_only_navigation(service: tuple[str, str], page: Page) -> None:
    base, token = service
    page.goto(f"{base}/dashboard/")
    # The token field has focus on arrival; Enter submits.
    page.keyboard.type(token)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Cluster")).to_be_visible()
    # The page moves focus to its main region once rendered; wait for that before tabbing.
    page.wait_for_function("document.activeElement && document.activeElement.id === 'main'")
    page.get_by_role("link", name="Workloads").focus()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Nodes"
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Nodes")).to_be_visible()
    expect(page.get_by_role("link", name="Nodes")).to_have_attribute("aria-current", "page")


def test_viewer_reads_agent_is_refused(service: tuple[str, str], page: Page) -> None:
    base, _ = service
    sign_in(page, base, VIEWER)
    expect(page.locator("#cluster-history polyline")).to_have_count(4)
    page.get_by_role("button", name="Sign out").click()
    page.get_by_label("API token (operator or viewer)").fill(AGENT)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("may not read the dashboard")
    page.get_by_label("API token (operator or viewer)").fill("tmc_wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("Unknown or revoked token")


def test_every_form_control_has_a_label(service: tuple[str, str], page: Page) -> None:
    base, token = service
    sign_in(page, base, token)
    page.get_by_role("link", name="Decisions").click()
    expect(page.get_by_role("button", name="Apply")).to_be_visible()
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select')]
            .filter(el => !el.labels || el.labels.length === 0).map(el => el.id)"""
    )
    assert unlabelled == []
