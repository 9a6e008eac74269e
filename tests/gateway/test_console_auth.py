"""The web console behind HTTP Basic auth, in a real browser: with the user's credentials (what the browser's
prompt gives) the page and its same-origin ``fetch()`` calls to ``/ui/api/`` work; without them the page is 401
with the ``WWW-Authenticate`` challenge that makes a browser prompt. Skipped without chromium, as test_console."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import async_playwright, expect
from test_console import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS

from walgate.gateway.config import Config
from walgate.gateway.server import Gateway

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM} (apt-get install chromium)")


async def test_the_console_works_with_basic_auth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", "console-pw")
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, http_auth="basic")
    async with Gateway(config) as gateway, async_playwright() as pw:
        host, port = gateway.http_address
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            anonymous = await browser.new_page()  # headless: no prompt to answer, so the navigation itself fails
            with pytest.raises(Exception, match="ERR_INVALID_AUTH_CREDENTIALS"):
                await anonymous.goto(f"http://{host}:{port}/ui")
            response = await anonymous.request.get(f"http://{host}:{port}/ui")
            assert response.status == 401
            assert response.headers["www-authenticate"].startswith('Basic realm="walgate"')
            context = await browser.new_context(http_credentials={"username": "root", "password": "console-pw"})
            page = await context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            api_statuses: list[int] = []
            page.on("response", lambda r: api_statuses.append(r.status) if "/ui/api/" in r.url else None)
            await page.goto(f"http://{host}:{port}/ui")
            await expect(page.locator("#status")).to_have_text(re.compile("^live"), timeout=TIMEOUT_MS)
            assert api_statuses and set(api_statuses) == {200}
        finally:
            await browser.close()
