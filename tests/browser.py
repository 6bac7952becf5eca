"""Headless Chromium (Debian's chromium and chromium-driver) driven by selenium, for the tests
of the web pages; ``make test`` installs both when missing."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium with a fresh profile, no network beyond this machine's."""
    if not (shutil.which(CHROMIUM) and shutil.which(DRIVER)):
        pytest.skip("chromium and chromium-driver are not installed (make test installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="goka-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--window-size=1280,900"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def texts(driver: Any, selector: str) -> list[str]:
    """The rendered text of every element matching the CSS ``selector`` (read in one script
    call: the pages refresh their tables every two seconds)."""
    found: list[str] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())",
        selector,
    )
    return found


def rows(driver: Any, table: str) -> list[list[str]]:
    """The cells of each body row of the table with id ``table`` (one script call)."""
    found: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll('#' + arguments[0] + ' tbody tr')]"
        ".map(r => [...r.cells].map(c => c.innerText.trim()))",
        table,
    )
    return found
