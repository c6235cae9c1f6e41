"""The dashboard in headless Chromium (Debian's package, never a downloaded browser), clicking
through every page of a running service loaded with demo data."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from PIL import Image
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from api.auth import Role, token_hash
from api.demo import ensure_operator_token, load_demo
from api.migrate import upgrade_to_head
from api.settings import Settings
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import ApiToken
from tests.services import ROOT, uvicorn_server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Screenshots are test artefacts; TMC_SCREENSHOTS=docs/screenshots refreshes the committed ones.
SHOTS = Path(os.environ.get("TMC_SCREENSHOTS", ROOT / ".artifacts" / "screenshots"))
VIEWER = "tmc_dashboard_viewer"
AGENT = "tmc_dashboard_agent"


REPORTS_COMMITTED = "2026-01-02T03:04:05+00:00"


def commit_all(folder: Path, when: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    who = ["-c", "user.name=tmc", "-c", "user.email=tmc@localhost"]
    for args in (["init", "-q"], ["add", "-A"], [*who, "commit", "-q", "-m", "reports"]):
        subprocess.run(["git", "-C", str(folder), *args], check=True, env=env, timeout=60)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{tmp / 'tmc.db'}"
    reports = tmp / "reports"
    reports.mkdir()
    # The real reports, as the benchmarks write them: markdown, its data and its PNG plots, in a
    # checkout where they were committed long before this clone's files were written.
    shutil.copytree(ROOT / "docs" / "reports", reports, dirs_exist_ok=True)
    commit_all(reports, REPORTS_COMMITTED)
    # A report written since, not committed: its own time is its file's.
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
        for workload, objective in (
            ("memcached", "cheapest"),
            ("graph500", "cheapest"),
            ("graph500", "slo:5%"),
        ):
            httpx.post(
                f"{base}/recommend",
                json={"workload": workload, "objective": objective},
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
    # Playwright's own probes (wait_for_function) evaluate strings, which the pages' CSP refuses;
    # the pages themselves are checked under the CSP by strict_page.
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    yield from _watched_page(context)


def _watched_page(context: BrowserContext) -> Iterator[Page]:
    """A page of `context` that fails its test on a script error and, at teardown, prints what
    its requests met (pytest shows it when the test failed)."""
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    # A page that never shows its content usually met a slow or failed API call.
    traffic: list[str] = []
    pg.on("requestfailed", lambda r: traffic.append(f"failed {r.url}: {r.failure}"))
    pg.on(
        "response",
        lambda r: traffic.append(f"{r.status} {r.url}") if r.status >= 400 else None,
    )
    pg.on("requestfinished", lambda r: _note_slow(traffic, r))
    yield pg
    print("dashboard requests that failed or were slow:", traffic or "none")
    print("page at the end:", pg.url, pg.locator("#page").inner_text(timeout=2000)[:500])
    context.close()
    assert errors == [], errors


def _note_slow(traffic: list[str], request: Any) -> None:
    timing = request.timing
    took = timing["responseEnd"] - timing["requestStart"] if timing["responseEnd"] > 0 else -1
    if took > 2000:
        traffic.append(f"slow {took:.0f} ms {request.url}")


def sign_in(page: Page, base: str, token: str) -> None:
    page.goto(f"{base}/dashboard/")
    page.get_by_label("API token (operator or viewer)").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("navigation", name="Pages")).to_be_visible()


def shot(page: Page, name: str, full_page: bool = True) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    if not full_page:
        page.evaluate("window.scrollTo(0, 0)")
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    if "TMC_SCREENSHOTS" in os.environ:
        # The committed ones: a 128-colour palette keeps them a third of the size, still crisp.
        small = Image.open(path).convert("RGB").quantize(128, dither=Image.Dither.NONE)
        small.save(path, optimize=True)


# Cells whose text runs over more than one line: the distinct line tops of the text's boxes.
WRAPPED_CELLS = """() => [...document.querySelectorAll('#page td:not(.prose)')].filter((td) => {
    const range = document.createRange();
    range.selectNodeContents(td);
    const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0)
        .map((r) => Math.round(r.top)));
    return tops.size > 1;
}).map((td) => td.textContent)"""
# An exponent ("7.177e-07") or a size below one in its unit ("0.02 GiB") is unreadable.
UNREADABLE = r"(?<![0-9a-f-])\d\.?\d*e[-+]\d|\b0\.\d+\s?[KMGTP]iB"


# Tables wider than the page at 1280 px: they scroll rather than wrap, but the dashboard's own fit.
OVERFLOWING_TABLES = """() => [...document.querySelectorAll('#page .table-wrap')]
    .filter((w) => w.scrollWidth > w.clientWidth + 1).map((w) => w.querySelector('caption')?.textContent)"""


# Chart labels drawn outside their chart's box are cut off: on screen, each text's box must lie
# within its SVG's.
CLIPPED_LABELS = """() => [...document.querySelectorAll('#page svg[role=img]')].flatMap((svg) => {
    const outer = svg.getBoundingClientRect();
    return [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim()).filter((t) => {
        const r = t.getBoundingClientRect();
        return r.width > 0 && (r.left < outer.left - 1 || r.right > outer.right + 1
            || r.top < outer.top - 1 || r.bottom > outer.bottom + 1);
    }).map((t) => t.textContent);
})"""


def assert_readable(page: Page) -> None:
    """No table value wraps, no table overflows the page, no chart label is cut off, and no
    number is written with an exponent or as a fraction of a unit."""
    assert page.evaluate(WRAPPED_CELLS) == []
    assert page.evaluate(CLIPPED_LABELS) == []
    assert page.evaluate(OVERFLOWING_TABLES) == []
    text = page.locator("#page").inner_text()
    assert re.search(UNREADABLE, text) is None, re.search(UNREADABLE, text)


def latest_decision(base: str, token: str, workload: str) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {token}"}
    listed = httpx.get(
        f"{base}/v1/recommendations", params={"workload": workload, "limit": 1}, headers=auth
    )
    listed.raise_for_status()
    full = httpx.get(f"{base}/v1/recommendations/{listed.json()[0]['id']}", headers=auth)
    full.raise_for_status()
    decision: dict[str, Any] = full.json()["recommendation"]
    return decision


def test_every_page_renders_with_data(service: tuple[str, str], page: Page) -> None:
    base, token = service
    sign_in(page, base, token)

    expect(page.get_by_role("heading", name="Cluster")).to_be_visible()
    expect(page.get_by_role("meter", name="DRAM utilization")).to_be_visible()
    expect(page.locator("#cluster-history polyline")).to_have_count(4)
    # At least 16 nodes x 4 resources: wait until the 64th cell is drawn.
    expect(page.locator("#cluster-heat rect[data-cell]").nth(16 * 4 - 1)).to_be_attached()
    expect(page.get_by_text("stranding resources")).to_be_visible()
    assert_readable(page)
    shot(page, "cluster")

    page.get_by_role("link", name="Workloads").click()
    expect(page.get_by_role("link", name="graph500")).to_be_visible()
    # Each workload's latest recommendation at a glance, with its objective; none for the rest.
    latest = latest_decision(base, token, "graph500")
    wanted = (
        f"slow {latest['chosen']['configuration']['slow_ratio'] * 100:.1f}\u00a0%, "
        f"{latest['chosen']['configuration']['llc_ways']} LLC ways ({latest['objective']})"
    )
    row = page.locator(
        "#workload-list tr", has=page.get_by_role("link", name="graph500", exact=True)
    )
    expect(row.locator("a.latest-decision")).to_have_text(wanted)
    expect(page.locator("#workload-list th").nth(1)).to_have_text("latest recommendation")
    expect(page.locator("#workload-list")).to_contain_text("none yet")
    assert_readable(page)
    shot(page, "workloads")
    page.get_by_role("link", name="graph500").click()
    expect(page.get_by_role("heading", name="Workload graph500")).to_be_visible()
    expect(page.locator("#w-slowdown rect[data-cell]")).to_have_count(77)
    expect(page.locator("#w-cost rect[data-cell]")).to_have_count(77)
    # The charts draw one after another: wait for the points, do not count them mid-draw.
    expect(page.locator("#w-pareto [data-point]")).to_have_count(77)
    expect(page.locator("#w-decision tr.chosen")).to_have_count(1)
    # The heat maps outline the decision's pick (solid) and the cheapest (dashed), each once.
    chosen = latest_decision(base, token, "graph500")["chosen"]["configuration"]
    for heat in ("#w-slowdown", "#w-cost"):
        expect(page.locator(f"{heat} rect[data-chosen]")).to_have_count(1)
        expect(page.locator(f"{heat} rect[data-cheapest]")).to_have_count(1)
        expect(page.locator(f"{heat} rect[data-mark=chosen]")).to_have_count(1)
        title = page.locator(f"{heat} rect[data-chosen] + title").text_content()
        assert title is not None
        assert title.startswith(f"ratio {chosen['slow_ratio']}, {chosen['llc_ways']} ways"), title
        assert "chosen" in title
    expect(page.locator("#heat-legend")).to_contain_text("chosen by the latest decision (slo:5%)")
    expect(page.locator("#heat-legend")).to_contain_text("cheapest")
    # The Pareto chart has ticks on both axes, axis titles with units, and outliers off scale.
    assert page.locator("#w-pareto text.tick-x").count() >= 3
    assert page.locator("#w-pareto text.tick-y").count() >= 3
    expect(page.locator("#w-pareto text.axis-x")).to_have_text("predicted run time (s)")
    expect(page.locator("#w-pareto text.axis-y")).to_contain_text("USD)")
    expect(page.locator("#w-pareto [data-chosen]")).to_have_count(1)
    off = page.locator("#w-pareto [data-offscale]").count()
    assert 0 < off < 77 // 2
    expect(page.locator("#w-pareto text.offscale-note")).to_contain_text(f"{off} point(s) beyond")
    # The frontier spans most of the plot instead of a corner of it.
    spread = page.evaluate(
        """() => {
        const box = document.querySelector('#w-pareto polyline').getBBox();
        const svg = document.querySelector('#w-pareto svg');
        return [box.width / svg.width.baseVal.value, box.height / svg.height.baseVal.value];
    }"""
    )
    assert spread[0] > 0.3 and spread[1] > 0.3, spread
    assert_readable(page)
    shot(page, "workload")

    page.get_by_role("link", name="Decisions").click()
    expect(page.get_by_text("3 decision(s)")).to_be_visible()
    page.get_by_label("Objective").fill("slo:5%")
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("1 decision(s)")).to_be_visible()
    page.locator("#decision-list summary").first.click()
    inputs = page.get_by_role("table", name="Inputs")
    expect(inputs).to_be_visible()
    # Priced at the profile's footprint and vCPUs: no size was given.
    expect(inputs.locator("tr", has_text="priced at")).to_contain_text(
        re.compile(r"iB \(the profile's traced footprint\), \d+ vCPUs")
    )
    # The expanded decision: predicted slowdown, the fast/slow split and the per-structure plan.
    decision = latest_decision(base, token, "graph500")
    assert decision["objective"] == "slo:5%"
    slowdown = f"{'+' if decision['chosen']['slowdown'] >= 0 else '−'}"
    slowdown += f"{abs(decision['chosen']['slowdown']) * 100:.1f}\u00a0%"
    prediction = page.get_by_role("table", name="Prediction")
    expect(prediction.locator("tr", has_text="slowdown vs fastmax")).to_contain_text(slowdown)
    split = page.get_by_role("table", name="Memory split")
    expect(split.locator("tr", has_text="fast (DRAM)")).to_contain_text("iB")
    expect(split.locator("tr", has_text="slow")).to_contain_text("iB")
    expect(page.get_by_role("img", name=re.compile("memory split: .* fast"))).to_be_visible()
    plan = page.get_by_role("table", name=re.compile("^Placement plan"))
    expect(plan.locator("tbody tr")).to_have_count(len(decision["placement"]))
    tiers = {p["tag"]: p for p in decision["placement"]}
    for tag, p in tiers.items():
        tier = "fast" if p["slow_bytes"] == 0 else "slow" if p["fast_bytes"] == 0 else "split"
        expect(plan.locator("tr", has_text=tag).locator("td").nth(2)).to_contain_text(tier)
    # The verification runs behind it (none yet) and the run it asks for next.
    v = decision["verification"]
    assert v is not None and v["runs"] == 0
    expect(page.locator("#verification")).to_contain_text("Verification runs: none yet (up to 4)")
    expect(page.locator("#verification")).to_contain_text(
        f"Next run: slow ratio {v['next_slow_ratio']:.1f}, {v['next_llc_ways']} ways"
    )
    # Kept open across the page's periodic refresh, which replaces the list.
    before = page.locator("#decision-list details").first.element_handle()
    page.wait_for_function("(el) => !el.isConnected", arg=before, timeout=20_000)
    expect(plan).to_be_visible()
    assert_readable(page)
    shot(page, "decisions")

    page.get_by_role("link", name="Nodes").click()
    expect(page.get_by_role("table", name="16 nodes")).to_be_visible()
    # The demo reserves 28 + 20 + 12 + 32 ways on local-0..3 and 16 + 24 on pooled-0..1.
    expect(page.locator(".bitmap span.on")).to_have_count(28 + 20 + 12 + 32 + 16 + 24)
    assert_readable(page)
    shot(page, "nodes")

    page.get_by_role("link", name="Reports").click()
    page.get_by_role("link", name="bench-latency.md").click()
    expect(page.get_by_role("heading", name="Recommendation latency")).to_be_visible()
    expect(page.locator("#report-body article p")).to_have_text("paper-77: 0.55 ms")
    page.get_by_role("link", name="← all reports").click()
    expect(page.get_by_role("link", name="evaluation.md")).to_be_visible()
    # Each report's own time: the commit that wrote it, or the file's own when not committed.
    reports = page.locator("#report-list")
    committed = reports.locator("tr", has=page.get_by_role("link", name="evaluation.md"))
    expect(committed.locator("time")).to_have_text("2026-01-02 03:04\u00a0UTC")
    fresh = reports.locator("tr", has=page.get_by_role("link", name="bench-latency.md"))
    expect(fresh.locator("time")).not_to_have_text("2026-01-02 03:04\u00a0UTC")
    expect(fresh.locator("time")).to_have_attribute("title", "the file's modification time")
    shot(page, "reports")


def test_a_report_renders_as_a_page_with_plots(service: tuple[str, str], page: Page) -> None:
    base, token = service
    sign_in(page, base, token)
    page.get_by_role("link", name="Reports").click()
    page.get_by_role("link", name="evaluation.md").click()
    report = page.locator("#report-body")
    expect(
        page.get_by_role("heading", name="tmc bench: the paper's evaluation in simulation")
    ).to_be_visible()
    expect(page.get_by_role("heading", name="Against the targets")).to_be_visible()
    assert report.locator("article table").count() >= 5
    expect(report.locator("article table").first.locator("th").first).to_have_text("target")
    # SVG plots drawn from evaluation.json (cost over ES and runs, per host), with ticks and units.
    plots = report.locator(".report-plots svg")
    expect(plots).to_have_count(4)
    assert plots.first.locator("text.tick-x").count() >= 3
    expect(plots.first.locator("text.axis-x")).to_have_text("cost over ES (%)")
    assert plots.first.locator("rect[data-bar=tmc]").count() == 6
    # The PNG plots the text links to are shown, loaded through the API with the token.
    images = report.locator("img[data-report-image]")
    expect(images).to_have_count(4)
    page.wait_for_function(
        "() => [...document.querySelectorAll('img[data-report-image]')]"
        ".every((i) => i.complete && i.naturalWidth > 0)"
    )
    assert '"schema"' not in report.inner_text()
    # A link to a plot scrolls to it on the same page.
    page.get_by_role("link", name="run-time prediction error per workload").click()
    expect(page.get_by_role("heading", name="Report evaluation.md")).to_be_visible()
    assert page.evaluate("location.hash") == "#/report/evaluation.md"
    page.wait_for_function("() => window.scrollY > 0")
    # Report tables are the benchmark's own words; still, none of their cells wraps.
    assert page.evaluate(WRAPPED_CELLS) == []
    shot(page, "report", full_page=False)

    # The dynamic-tiering study: its saved-memory plot from tiering.json, per workload and host.
    page.goto(f"{base}/dashboard/#/report/tiering.md")
    expect(page.get_by_role("heading", name="Dynamic tiering study")).to_be_visible()
    tiering = page.locator("#report-body .report-plots svg")
    expect(tiering).to_have_count(1)
    expect(tiering.locator("text.axis-x")).to_have_text("fast memory saved (% of the footprint)")
    assert tiering.locator("rect[data-bar=oracle]").count() >= 5

    # A report in a sub-folder with an embedded plot.
    page.goto(f"{base}/dashboard/#/report/{quote('regimes/regimes.md', safe='')}")
    expect(page.locator("#report-body figure img[data-report-image]")).to_have_count(1)
    page.wait_for_function(
        "() => { const i = document.querySelector('img[data-report-image]');"
        " return i && i.complete && i.naturalWidth > 0; }"
    )


def test_reports_api_serves_listed_files_only(service: tuple[str, str]) -> None:
    base, token = service
    auth = {"Authorization": f"Bearer {token}"}
    listed = {r["name"]: r for r in httpx.get(f"{base}/v1/reports", headers=auth).json()}
    assert listed["evaluation.md"]["format"] == "markdown"
    assert listed["evaluation-packing.png"]["format"] == "image"
    png = httpx.get(f"{base}/v1/reports/evaluation-packing.png", headers=auth)
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG")
    assert listed["regimes/regimes-map.svg"]["format"] == "image"
    svg = httpx.get(f"{base}/v1/reports/regimes/regimes-map.svg", headers=auth)
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert b"<svg" in svg.content[:400]
    assert "default-src 'none'" in svg.headers["content-security-policy"]
    body = httpx.get(f"{base}/v1/reports/evaluation.json", headers=auth).json()
    assert body["format"] == "json" and body["text"].startswith("{")
    for name in ("../tmc.db", "%2e%2e/tmc.db", "regimes/../../tmc.db", "nope.md", ".hidden.md"):
        r = httpx.get(f"{base}/v1/reports/{name}", headers=auth)
        assert r.status_code == 404, (name, r.status_code)
        assert r.headers["content-type"] == "application/problem+json"
    assert httpx.get(f"{base}/v1/reports/evaluation.md").status_code == 401


def test_the_capacity_planner_answers(service: tuple[str, str], page: Page) -> None:
    base, token = service
    sign_in(page, base, token)
    page.get_by_role("link", name="Planner").click()
    expect(page.get_by_role("heading", name="Capacity planner")).to_be_visible()
    # Only the workloads with a decision are offered: their candidates are the options.
    expect(page.get_by_label("Workload", exact=True).first.locator("option")).to_have_count(2)
    page.get_by_label("Workload", exact=True).first.select_option("graph500")
    page.get_by_label("arrivals per hour").first.fill("20000")
    page.get_by_role("button", name="Add workload").click()
    page.get_by_label("Workload", exact=True).nth(1).select_option("memcached")
    page.get_by_label("arrivals per hour").nth(1).fill("30000")
    page.get_by_role("button", name="Plan").click()
    expect(page.locator("#plan-best")).to_contain_text("×", timeout=30_000)
    # The same mix asked of the API directly gives the same answer.
    classes = []
    for workload, rate in (("graph500", 20000), ("memcached", 30000)):
        decision = latest_decision(base, token, workload)
        options = [
            {
                "vcpus": c["configuration"]["vcpus"],
                "dram_bytes": c["configuration"]["dram_bytes"],
                "slow_bytes": c["configuration"]["slow_bytes"],
                "llc_ways": c["configuration"]["llc_ways"],
                "seconds": c["predicted_seconds"],
                "cost": c["cost"],
            }
            for c in decision["within_threshold"]
        ]
        classes.append({"name": workload, "arrivals_per_hour": rate, "options": options})
    asked = httpx.post(
        f"{base}/v1/planner/capacity",
        json={"classes": classes},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    asked.raise_for_status()
    best = asked.json()["best"]
    # CP-SAT under a time limit: only a proven optimum is the same answer twice.
    if best["status"] == "optimal":
        expect(page.locator("#plan-best")).to_contain_text(f"{best['machines']} × {best['kind']}")
    kinds = page.get_by_role("table", name=re.compile("^Machine kinds, cheapest first"))
    expect(kinds.locator("tbody tr")).to_have_count(len(asked.json()["kinds"]))
    if best["status"] == "optimal":
        expect(kinds.locator("tr.chosen td").first).to_have_text(best["kind"])
    chart = page.locator("#plan-answer svg")
    expect(chart).to_have_count(1)
    hostable = [k for k in asked.json()["kinds"] if k["total_hour"] is not None]
    expect(chart.locator("rect[data-bar=plan]")).to_have_count(len(hostable))
    assert chart.locator("text.tick-x").count() >= 2
    assert_readable(page)
    shot(page, "planner")

    # A bad rate is refused with a clear message, before anything is asked.
    page.get_by_label("arrivals per hour").first.fill("-3")
    page.get_by_role("button", name="Plan").click()
    expect(page.get_by_role("alert")).to_contain_text("arrival rate must be between 0")


def test_sign_in_page_has_no_navigation(service: tuple[str, str], page: Page) -> None:
    base, token = service
    page.goto(f"{base}/dashboard/")
    expect(page.get_by_label("API token (operator or viewer)")).to_be_visible()
    expect(page.get_by_role("navigation", name="Pages")).to_be_hidden()
    expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
    expect(page.get_by_role("link", name="Cluster")).to_be_hidden()
    shot(page, "sign-in")
    sign_in(page, base, token)
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("navigation", name="Pages")).to_be_hidden()


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
    # A viewer reads the planner page, but asking it to plan is an operator's right.
    page.get_by_role("link", name="Planner").click()
    page.get_by_role("button", name="Plan").click()
    expect(page.get_by_role("alert")).to_contain_text("may not ask the planner")
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


@pytest.fixture
def strict_page(browser: Browser) -> Iterator[Page]:
    """A page that enforces the dashboard's Content-Security-Policy, as a browser does."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield from _watched_page(context)


def test_the_dashboard_cannot_be_framed_and_loads_only_its_own_assets(
    service: tuple[str, str], strict_page: Page
) -> None:
    page = strict_page
    base, token = service
    refused: list[str] = []
    page.on(
        "console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None
    )
    answer = page.goto(f"{base}/dashboard/")
    assert answer is not None
    policy = answer.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
    # Every page renders under the policy: nothing it needs is refused.
    sign_in(page, base, token)
    for name in ("Cluster", "Workloads", "Decisions", "Nodes", "Planner", "Reports"):
        page.get_by_role("navigation", name="Pages").get_by_role("link", name=name).click()
        expect(page.locator("#page h1, #page h2").first).to_be_visible()
    assert refused == []
    # Another page that frames the dashboard gets nothing of it.
    framer = page.context.new_page()
    framer.on("console", lambda m: refused.append(m.text))
    framer.set_content(f'<iframe id="f" src="{base}/dashboard/" width="600" height="400"></iframe>')
    framer.wait_for_timeout(1000)
    expect(framer.frame_locator("#f").get_by_label("API token (operator or viewer)")).to_have_count(
        0
    )
    assert any("frame-ancestors" in m for m in refused), refused


def test_the_planner_plans_for_the_operators_own_machine_kind(
    service: tuple[str, str], page: Page
) -> None:
    base, token = service
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    sign_in(page, base, token)
    page.get_by_role("link", name="Planner").click()
    expect(page.get_by_role("heading", name="Capacity planner")).to_be_visible()
    # One default for the fill, the API's and the CLI's; one name for the prices, their key.
    expect(page.get_by_label("Fill")).to_have_value("1")
    prices = page.get_by_label("Prices")
    expect(prices.locator("option:checked")).to_have_text("paper-3dxp@1")
    legend = page.locator("#planner-legend")
    for term in ("24G-128P", "greedy", "tenants pay", "Fig. 9's family"):
        expect(legend).to_contain_text(term)
    page.get_by_label("Workload", exact=True).first.select_option("graph500")
    page.get_by_label("arrivals per hour").first.fill("2000")
    page.get_by_label("Machine kinds").select_option("own")
    page.get_by_label("Machine kind", exact=True).first.fill("lab-64G-512L")
    page.get_by_label("CPUs").first.fill("32")
    page.get_by_label("DRAM GiB").first.fill("64")
    page.get_by_label("slow GiB").first.fill("512")
    page.get_by_label("LLC ways").first.fill("48")
    page.get_by_role("button", name="Plan").click()
    expect(page.locator("#plan-best")).to_contain_text("× lab-64G-512L", timeout=30_000)
    expect(page.locator("#plan-best")).to_contain_text("prices paper-3dxp@1")
    kinds = page.get_by_role("table", name=re.compile("^Machine kinds, cheapest first"))
    expect(kinds.locator("tbody tr")).to_have_count(1)
    assert_readable(page)

    # A kind with a bad value is named before anything is asked.
    page.get_by_label("CPUs").first.fill("0")
    page.get_by_role("button", name="Plan").click()
    expect(page.get_by_role("alert")).to_contain_text("lab-64G-512L: CPUs must be")

    # The cluster's registered host kinds are planned for by their names.
    registered = httpx.get(
        f"{base}/v1/cluster/host-kinds", headers={"Authorization": f"Bearer {token}"}
    ).json()
    page.get_by_label("Machine kinds").select_option("cluster")
    page.get_by_role("button", name="Plan").click()
    expect(kinds.locator("tbody tr")).to_have_count(len(registered), timeout=30_000)
    expect(kinds.locator("tbody")).to_contain_text(registered[0]["name"])
    assert missing == [], missing


def test_a_json_reports_fields_are_readable(service: tuple[str, str], page: Page) -> None:
    base, token = service
    sign_in(page, base, token)
    page.goto(f"{base}/dashboard/#/report/tiering.json")
    fields = page.get_by_role("table", name="Fields")
    row = fields.locator("tr", has=page.get_by_text("duration_seconds", exact=True))
    expect(row.locator("td").nth(1)).to_have_text(re.compile(r"^\d[\d.,]*\u00a0(s|min|h)$"))
    assert_readable(page)


def test_a_least_dram_decision_shows_its_verification_state(
    service: tuple[str, str], page: Page
) -> None:
    # Runs last in this module: it adds a decision the planner's tests do not expect.
    base, token = service
    httpx.post(
        f"{base}/recommend",
        json={"workload": "canneal", "objective": "least-dram:10%"},
        headers={"Authorization": f"Bearer {token}"},
    ).raise_for_status()
    sign_in(page, base, token)
    page.get_by_role("link", name="Decisions").click()
    page.get_by_label("Objective").fill("least-dram:10%")
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("1 decision(s)")).to_be_visible()
    page.locator("#decision-list summary").first.click()
    # A run there checks the decision's promise: the state and the next run are shown.
    expect(page.locator("#verification")).to_contain_text("Verification runs:")


def test_a_fleet_larger_than_a_page_is_paged(
    tmp_path_factory: pytest.TempPathFactory, page: Page
) -> None:
    """250 nodes: the Cluster page draws the first page and says so; the Nodes page pages
    through all of them, 200 at a time."""
    from ledger import nodes as ledger_nodes  # noqa: PLC0415
    from ledger.types import NodeCapacity  # noqa: PLC0415
    from model.resources import GIB  # noqa: PLC0415

    url = f"sqlite:///{tmp_path_factory.mktemp('fleet') / 'tmc.db'}"
    upgrade_to_head(url)
    sessions = make_session_factory(make_engine(Settings(database_url=url)))
    token = ensure_operator_token(sessions, None)
    with unit_of_work(sessions) as session:
        for i in range(250):
            capacity = NodeCapacity(f"n{i:03d}", "fleet-kind", 32, 128 * GIB, 0, 16, None)
            ledger_nodes.register_node(session, capacity)
    with uvicorn_server({"TMC_DATABASE_URL": url}) as base:
        sign_in(page, base, token)
        expect(page.locator("#cluster-heat")).to_contain_text("the first 200 of 250 nodes")
        page.get_by_role("link", name="Nodes").click()
        expect(page.get_by_role("table", name="200 nodes (a page of 200, by name)")).to_be_visible()
        expect(page.locator("#node-list tbody tr").first).to_contain_text("n000")
        page.get_by_role("link", name="Next 200 nodes").click()
        expect(page.get_by_role("table", name="50 nodes (a page of 200, by name)")).to_be_visible()
        expect(page.locator("#node-list tbody tr").first).to_contain_text("n200")
        expect(page.get_by_role("link", name="Next 200 nodes")).to_have_count(0)
        page.get_by_role("link", name="First page").click()
        expect(page.locator("#node-list tbody tr").first).to_contain_text("n000")


def test_a_dra_pods_ways_are_shown_as_a_count(
    tmp_path_factory: pytest.TempPathFactory, page: Page
) -> None:
    """A pod placed through the DRA door holds 6 ways as a count: the Nodes page draws the
    bitmap's mask (the placed pod's 4 ways) and says the 6 beside it, counted in the node's
    reserved ways, and its reservation reads as 6 ways whose run the node chose, not a mask."""
    from ledger import nodes as ledger_nodes  # noqa: PLC0415
    from ledger import store as ledger  # noqa: PLC0415
    from ledger.types import Held, NodeCapacity  # noqa: PLC0415
    from model.resources import GIB  # noqa: PLC0415

    url = f"sqlite:///{tmp_path_factory.mktemp('dra-ways') / 'tmc.db'}"
    upgrade_to_head(url)
    sessions = make_session_factory(make_engine(Settings(database_url=url)))
    token = ensure_operator_token(sessions, None)

    def held(pod: str, mask: int, counted: int) -> ledger.Placed:
        taken = Held(f"uid-{pod}", "tenant", pod, "node-a", 1, GIB, 0, False, mask, None, counted)
        return ledger.Placed(taken, recommendation_id=None, slow_ratio=0.0)

    with unit_of_work(sessions) as session:
        ledger_nodes.register_node(
            session, NodeCapacity("node-a", "dra-kind", 16, 64 * GIB, 0, 16, None)
        )
        ledger.record(session, [held("placed", 0b1111 << 8, 0), held("claimed", 0, 6)])
    with uvicorn_server({"TMC_DATABASE_URL": url}) as base:
        sign_in(page, base, token)
        page.get_by_role("link", name="Nodes").click()
        expect(page.get_by_role("table", name="1 nodes")).to_be_visible()
        expect(page.locator(".bitmap span.on")).to_have_count(4)
        bitmap = page.locator("#node-list .bitmap")
        expect(bitmap).to_have_attribute(
            "aria-label",
            "10 of 16 ways reserved, mask 0xf00, 6 of them a count whose run the node chose",
        )
        expect(page.locator("#node-list")).to_contain_text("+ 6 ways, run chosen by the node")
        rows = page.locator("#node-list tr")
        expect(rows.filter(has_text="tenant/claimed")).to_contain_text(
            "6 ways, run chosen by the node"
        )
        expect(rows.filter(has_text="tenant/placed")).to_contain_text("4 (0xf00)")
