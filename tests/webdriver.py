"""Headless Chromium driven through chromedriver's W3C WebDriver protocol (JSON over HTTP, with
httpx): the few commands the page test of ``vidax serve`` needs, and no extra package.

Chromium and chromedriver are Debian packages (``apt-get install -y chromium chromium-driver``;
``.ci/run`` installs them when missing); a machine without them fails the test that asks for a
browser with that line, it is never skipped.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import socket
import subprocess
import time

import httpx
import pytest

INSTALL = "apt-get install -y chromium chromium-driver"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _find(*names: str) -> str | None:
    for name in names:
        if path := shutil.which(name) or (os.path.exists(f"/usr/bin/{name}") and f"/usr/bin/{name}"):
            return path
    return None


class Chromium:
    """One headless Chromium session (``quit()`` ends it and chromedriver)."""

    def __init__(self, width: int = 1000, height: int = 1200):
        browser, driver = _find("chromium", "chromium-browser"), _find("chromedriver")
        if browser is None or driver is None:
            missing = " and ".join(n for n, p in (("chromium", browser), ("chromedriver", driver)) if p is None)
            pytest.fail(
                f"{missing} not found: the page test needs headless Chromium; install them with `{INSTALL}` "
                "(.ci/run does this when it runs as root)"
            )
        port = _free_port()
        self._driver = subprocess.Popen(
            [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self._http.get("/status").json()["value"]["ready"]:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self._driver.poll() is not None:
                self._driver.kill()
                pytest.fail(f"chromedriver ({driver}) did not start")
            time.sleep(0.1)
        args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--window-size={width},{height}",
            "--autoplay-policy=no-user-gesture-required",
        ]
        caps = {
            "capabilities": {
                "alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": browser, "args": args}}
            }
        }
        try:
            self.session = self._command("POST", "/session", caps)["sessionId"]
        except BaseException:
            self._driver.kill()
            raise

    def _command(self, method: str, path: str, body: dict | None = None):
        r = self._http.request(method, path, json=body)
        value = r.json()["value"]
        if r.status_code != 200:
            raise RuntimeError(f"WebDriver {method} {path}: {value.get('error')}: {value.get('message')}")
        return value

    def _session(self, method: str, path: str, body: dict | None = None):
        return self._command(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self._session("POST", "/url", {"url": url})

    def find(self, css: str) -> str:
        """The element ``css`` selects (its WebDriver reference)."""
        value = self._session("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(value.values()))

    def type(self, css: str, text: str) -> None:
        element = self.find(css)
        self._session("POST", f"/element/{element}/clear", {})
        self._session("POST", f"/element/{element}/value", {"text": text})

    def choose_file(self, css: str, path: str) -> None:
        """Chooses the file ``path`` in the file input ``css`` (as a user picking it)."""
        self._session("POST", f"/element/{self.find(css)}/value", {"text": path})

    def click(self, css: str) -> None:
        self._session("POST", f"/element/{self.find(css)}/click", {})

    def script(self, js: str, *args):
        """The value of ``js`` (a function body: ``return ...``) run in the page."""
        return self._session("POST", "/execute/sync", {"script": js, "args": list(args)})

    def wait_for(self, js: str, timeout: float, what: str, poll: float = 0.05):
        """Run ``js`` until it returns something truthy (returned); fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not (value := self.script(js)):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what}; page status: "
                    f"{self.script('return document.body.innerText')[:2000]}"
                )
            time.sleep(poll)
        return value

    def screenshot(self):
        """The viewport as an RGB PIL image (CSS pixels: the device scale factor is 1)."""
        from PIL import Image

        png = base64.b64decode(self._session("GET", "/screenshot"))
        return Image.open(io.BytesIO(png)).convert("RGB")

    def quit(self) -> None:
        try:
            self._session("DELETE", "")
        finally:
            self._http.close()
            self._driver.terminate()
            self._driver.wait(30)
