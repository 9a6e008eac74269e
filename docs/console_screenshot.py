"""Write docs/console.png: the web console (``/ui``) of ``walgate demo --consume`` after a minute of streaming.

Run from the repository root: ``.venv/bin/python docs/console_screenshot.py [OUT.png]`` (about 75 s). It starts
the demo on free ports in a temporary data dir, adds a Kafka-native topic ``clicks`` with a few produced
records, lets the charts fill, then photographs the topic ``topic_meters`` at 1280x800 with Debian's chromium
(driven by playwright; its own browser download is not used). The demo is stopped by its PID.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-background-networking", "--disable-component-update"]
WALGATE = Path(sys.executable).parent / "walgate"
HISTORY_S = 60  # chart history gathered before the picture


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_topic(http: str, topic: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{http}/ui/api/topics", timeout=5) as response:
                if any(t["name"] == topic for t in json.loads(response.read())["topics"]):
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the demo did not create {topic} within {timeout} s")


def produce_clicks(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the future resolves
    admin.create_topics([NewTopic("clicks", 3)])["clicks"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(120):
        event = {"user": f"u{i % 17}", "page": ["/", "/pricing", "/docs", "/blog"][i % 4], "ms": 40 + i % 90}
        producer.produce("clicks", key=f"u{i % 17}".encode(), value=json.dumps(event).encode(),
                         headers=[("source", b"web")])
    assert producer.flush(30) == 0


def main(out: Path) -> None:
    http_port, kafka_port = free_port(), free_port()
    http, bootstrap = f"http://127.0.0.1:{http_port}", f"127.0.0.1:{kafka_port}"
    with tempfile.TemporaryDirectory(prefix="walgate-console-") as data:
        demo = subprocess.Popen(
            [str(WALGATE), "demo", "--consume", "--duration", str(HISTORY_S + 60), "--data-dir", data,
             "--http-port", str(http_port), "--kafka-port", str(kafka_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_topic(http, "topic_meters")
            produce_clicks(bootstrap)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(f"{http}/ui")
                page.locator('tr[data-topic="topic_meters"]').click()
                time.sleep(HISTORY_S)  # the throughput chart fills from polling; nothing to wait for but time
                page.screenshot(path=str(out))
                browser.close()
        finally:
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(30)
            except subprocess.TimeoutExpired:
                demo.kill()
                demo.wait(10)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("console.png"))
