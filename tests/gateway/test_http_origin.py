"""Cross-origin browser requests are refused on the HTTP port before anything runs (:mod:`walgate.gateway.http_origin`).

A real node (``Gateway``) is asked with the headers browsers send (aiohttp), then by Debian's chromium (playwright):
a page served from another 127.0.0.1 port tries ``fetch(..., {mode: 'no-cors'})`` and an HTML form POST of
``DROP DATABASE power``; the database is still there afterwards, while the console's own origin still works.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from playwright.async_api import async_playwright

from walgate.gateway.config import Config, ConfigError
from walgate.gateway.http_origin import FORBIDDEN_ORIGIN, parse_origins
from walgate.gateway.server import Gateway

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-background-networking", "--disable-component-update"]
TIMEOUT_MS = 15_000
ALLOWED = "http://dashboard.example:8080"


@dataclass
class Node:
    url: str  # http://127.0.0.1:<port>
    port: int


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, http_allowed_origins=ALLOWED)
    async with Gateway(config) as gateway:
        host, port = gateway.http_address
        url = f"http://{host}:{port}"
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/rest/sql", data=b"CREATE DATABASE power VGROUPS 1") as response:
                assert response.status == 200
        yield Node(url, port)


async def databases(node: Node) -> list[str]:
    async with aiohttp.ClientSession() as http, http.post(f"{node.url}/rest/sql", data=b"SHOW DATABASES") as response:
        assert response.status == 200
        return [row[0] for row in (await response.json())["data"]]


def _cases(port: int) -> list[tuple[str, dict[str, str], int]]:
    own = f"http://127.0.0.1:{port}"
    return [
        ("foreign Origin", {"Origin": "https://evil.example"}, 403),
        ("another port of the same host", {"Origin": "http://127.0.0.1:8000", "Sec-Fetch-Site": "same-site"}, 403),
        ("Origin null (sandboxed frame, file://)", {"Origin": "null"}, 403),
        ("malformed Origin", {"Origin": "http://127.0.0.1:notaport"}, 403),
        ("Sec-Fetch-Site cross-site alone", {"Sec-Fetch-Site": "cross-site"}, 403),
        ("Sec-Fetch-Site same-site on a POST", {"Sec-Fetch-Site": "same-site"}, 403),
        ("own origin but cross-site", {"Origin": own, "Sec-Fetch-Site": "cross-site"}, 403),
        ("DNS rebinding: Host and Origin name the attacker", {"Origin": f"http://evil.example:{port}",
                                                              "Host": f"evil.example:{port}"}, 403),
        ("DNS rebinding, GET without Origin", {"Sec-Fetch-Site": "same-origin", "Host": f"evil.example:{port}"}, 403),
        ("same origin (the console)", {"Origin": own, "Sec-Fetch-Site": "same-origin"}, 200),
        ("localhost is the same origin when the browser used it", {"Origin": f"http://localhost:{port}",
                                                                   "Host": f"localhost:{port}"}, 200),
        ("user typed the URL", {"Sec-Fetch-Site": "none"}, 200),
        ("allowed origin", {"Origin": ALLOWED, "Sec-Fetch-Site": "cross-site"}, 200),
        ("no browser headers (curl, taosrest)", {}, 200),
    ]


async def test_cross_origin_sql_is_refused_before_it_runs_and_same_origin_and_non_browser_requests_work(
        node: Node) -> None:
    async with aiohttp.ClientSession() as http:
        for name, headers, status in _cases(node.port):
            statement = b"DROP DATABASE power" if status == 403 else b"SHOW DATABASES"
            async with http.post(f"{node.url}/rest/sql", data=statement,
                                 headers={"Content-Type": "text/plain", **headers}) as response:
                assert response.status == status, name
                body = await response.json()
                if status == 403:
                    assert body["code"] == FORBIDDEN_ORIGIN and "cross-origin request refused" in body["desc"], name
            assert "power" in await databases(node), name


async def test_cross_origin_writes_and_reads_are_refused_and_same_site_reads_allowed(node: Node) -> None:
    stable = b"CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc VARCHAR(16))"
    evil = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{node.url}/rest/sql", data=stable) as response:
            assert response.status == 200
        for path, body in (("/influxdb/v1/write?db=power&precision=ms", b"meters,loc=a v=1i 1700000000000"),
                           ("/csv/v1/write?db=power&stable=meters", b"tbname,loc,ts,v\nd1,a,1700000000000,1\n")):
            async with http.post(f"{node.url}{path}", data=body, headers=evil) as response:
                assert response.status == 403, path
        async with http.get(f"{node.url}/ui/api/databases", headers={"Sec-Fetch-Site": "cross-site"}) as response:
            assert response.status == 403  # a foreign page cannot read the console's data either
        async with http.get(f"{node.url}/ui/api/databases", headers={"Sec-Fetch-Site": "same-site"}) as response:
            assert response.status == 200
        async with http.post(f"{node.url}/rest/sql", data=b"SELECT COUNT(*) FROM power.meters") as response:
            assert (await response.json())["data"] in ([], [[0]])  # no row was written


def test_allowed_origins_setting_is_validated() -> None:
    assert parse_origins(" https://a.example , http://b.example:8080/") == {("https", "a.example", 443),
                                                                           ("http", "b.example", 8080)}
    assert parse_origins("") == frozenset()
    for bad in ("a.example", "ftp://a.example", "http://a.example/path", "http://a.example:99999", "*"):
        with pytest.raises(ValueError):
            parse_origins(bad)
    with pytest.raises(ConfigError, match="http_allowed_origins"):
        Config(data_dir=Path("/nonexistent"), http_allowed_origins="javascript:alert(1)")


# ------------------------------------------------------------------ a real browser


ATTACK_PAGE = """<!doctype html><html><body>
<form id="f" method="post" enctype="text/plain" action="{walgate}/rest/sql">
<input name="DROP DATABASE power; x" value="y"></form>
<script>
window.noCors = () => fetch("{walgate}/rest/sql", {{method: "POST", mode: "no-cors", body: "DROP DATABASE power"}})
  .then(() => "sent", (e) => "failed: " + e);
</script></body></html>"""


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM} (apt-get install chromium)")
async def test_a_page_from_another_origin_cannot_drop_a_database_through_the_browser(node: Node) -> None:
    async def attack_page(request: web.Request) -> web.Response:
        return web.Response(text=ATTACK_PAGE.format(walgate=node.url), content_type="text/html")

    app = web.Application()
    app.router.add_get("/", attack_page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    evil_port = runner.addresses[0][1]
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                await page.goto(f"http://127.0.0.1:{evil_port}/")
                async with page.expect_response(f"{node.url}/rest/sql") as fetched:
                    assert await page.evaluate("window.noCors()") == "sent"  # opaque: the page cannot see the 403
                assert (await fetched.value).status == 403
                async with page.expect_navigation() as navigated:
                    await page.evaluate("document.getElementById('f').submit()")
                response = await navigated.value
                assert response is not None and response.status == 403
                assert "power" in await databases(node)

                # the console's own origin keeps working: same-origin fetch from /ui
                await page.goto(f"{node.url}/ui")
                answer = await page.evaluate(
                    "fetch('/rest/sql', {method: 'POST', body: 'SHOW DATABASES'}).then(r => r.json())")
                assert answer["code"] == 0 and ["power"] in [row[:1] for row in answer["data"]]
            finally:
                await browser.close()
    finally:
        await runner.cleanup()
