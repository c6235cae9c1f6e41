"""The workload page's dynamic-tiering panel in headless Chromium, on a running service."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from tests.dashboard.test_dashboard import VIEWER, browser, page, service, sign_in  # noqa: F401
from tests.tiering.conftest import profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_workload_page_shows_tiering_advice(service: tuple[str, str], page: Page) -> None:  # noqa: F811
    base, token = service
    bundle = json.loads((EXAMPLES / "xsbench.json").read_text())
    bundle["workload"]["name"] = "xsbench-tiered"
    bundle["tiering"] = json.loads(profile("warm-background").model_dump_json())
    httpx.post(
        f"{base}/v1/profiles", json=bundle, headers={"Authorization": f"Bearer {token}"}
    ).raise_for_status()
    sign_in(page, base, token)
    page.goto(f"{base}/dashboard/#/workload/xsbench-tiered")
    panel = page.locator("#w-tiering")
    expect(panel).to_contain_text("Fast tier", timeout=20_000)
    expect(panel.get_by_role("table").first).to_contain_text("× dominant reuse")
    expect(panel).to_contain_text("importance")
    page.goto(f"{base}/dashboard/#/workload/graph500")
    expect(page.locator("#w-tiering")).to_contain_text("No tiering profile", timeout=20_000)


def test_a_real_programs_agent_bundle_shows_tiering_advice(
    service: tuple[str, str],  # noqa: F811
    page: Page,  # noqa: F811
) -> None:
    """examples/tiering/hashjoin.json: the agent's `--tiering` profile of a real C program."""
    base, token = service
    bundle = json.loads((EXAMPLES / "tiering" / "hashjoin.json").read_text())
    httpx.post(
        f"{base}/v1/profiles", json=bundle, headers={"Authorization": f"Bearer {token}"}
    ).raise_for_status()
    sign_in(page, base, token)
    page.goto(f"{base}/dashboard/#/workload/{bundle['workload']['name']}")
    panel = page.locator("#w-tiering")
    expect(panel).to_contain_text("Fast tier", timeout=20_000)
    expect(panel.get_by_role("table").first).to_contain_text("(in use)")


def test_viewer_is_told_it_may_not_ask(service: tuple[str, str], page: Page) -> None:  # noqa: F811
    base, _ = service
    sign_in(page, base, VIEWER)
    page.goto(f"{base}/dashboard/#/workload/graph500")
    expect(page.locator("#w-tiering")).to_contain_text("may not ask", timeout=20_000)
