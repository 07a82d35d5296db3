"""``manage.py sume_status`` and the admin's pace page, against a real host file and a real
redis-server while a herd runs (``tests/pace_herd.py``); the page also in a headless Chromium.

The admin needs a database and the admin apps, which this folder's settings leave out: the page
is served by a real process of its own (``admin_site.py``), sharing the herd's fleet.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

pytest.importorskip("django")

import requests
from django.core.management import CommandError, call_command

from sume_urllib3.pacing import HostFleet
from sume_urllib3.pacing.status import _COLUMNS, _cells, read_status

from ...pace_herd import HERD, HOLD_KEY, HeldHerd
from ...redis_server import RedisServer, free_port
from .admin_site import PASSWORD
from .settings import API_KEY

ROOT = Path(__file__).resolve().parents[3]
PAGE = "/admin/sume_urllib3/pace/"


@pytest.mark.slow  # a held herd on loopback
def test_sume_status_reads_the_fleet_the_settings_give(dj_settings: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "app.fleet")
    with HeldHerd(HostFleet(path)) as herd:
        dj_settings.SUME = {"API_KEY": HOLD_KEY, "BASE_URL": herd.base_url, "FLEET": {"HOST": path}}
        out = io.StringIO()
        call_command("sume_status", "--json", stdout=out)
        rows = read_status(HostFleet(path))
        assert {row["key"]: row["in_flight"] for row in json.loads(out.getvalue())["keys"]} == {
            row.key: row.in_flight for row in rows
        }
        table = io.StringIO()
        call_command("sume_status", stdout=table)
    assert herd.fake.url in table.getvalue()
    assert HOLD_KEY not in table.getvalue()


@pytest.mark.parametrize(("fleet", "says"), [(None, "FLEET is None"), ({"RATE": "10/s"}, "LocalFleet")])
def test_sume_status_refuses_a_fleet_no_other_process_reads(dj_settings: Any, fleet: Any, says: str) -> None:
    dj_settings.SUME = {"API_KEY": API_KEY, "FLEET": fleet}
    with pytest.raises(CommandError, match=says):
        call_command("sume_status", stdout=io.StringIO())


class _Table(HTMLParser):
    """The cells of the page's ``table#sume-pace``, row by row (the header row first)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: List[List[str]] = []
        self._inside = self._cell = False

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        if tag == "table" and ("id", "sume-pace") in attrs:
            self._inside = True
        elif self._inside and tag == "tr":
            self.rows.append([])
        elif self._inside and tag in ("td", "th"):
            self._cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        self._cell = self._cell and tag not in ("td", "th")
        self._inside = self._inside and tag != "table"

    def handle_data(self, data: str) -> None:
        if self._cell:
            self.rows[-1][-1] += data.strip()


class Site:
    """admin_site.py, served by a process of its own on a free port."""

    def __init__(self, base_url: str, fleet: Any) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        port = self.url.rsplit(":", 1)[1]
        command = [sys.executable, "-m", "tests.contrib.django.admin_site", port, base_url, json.dumps(fleet)]
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"

    def login(self, user: str = "staff") -> requests.Session:
        client = requests.Session()
        client.get(self.url + "/admin/login/", timeout=30)
        form = {"username": user, "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"],
                "next": PAGE}
        client.post(self.url + "/admin/login/", data=form, headers={"Referer": self.url}, timeout=30)
        return client

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(30)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _expected(fleet: Any, herd: HeldHerd) -> Dict[str, List[str]]:
    """The cells the page shows, as read now by the test's own reader."""
    rows = read_status(fleet, base_url=herd.base_url, api_key=HOLD_KEY)
    return {row.key: list(_cells(row)) for row in rows}


def check_page(cells: List[List[str]], expected: Dict[str, List[str]], herd: HeldHerd) -> None:
    """The page's rows are the fleet's, each cell equal but the times (within a second); the held
    herd's row names its origin and its four attempts in flight."""
    header, *rows = cells
    assert [cell.lower() for cell in header] == list(_COLUMNS)
    assert {row[1] for row in rows} == set(expected)
    for row in rows:
        want = expected[row[1]]
        assert row[:2] + row[3:6] == want[:2] + want[3:6]
        for got, then in ((row[2], want[2]), (row[6], want[6])):
            assert got.split()[:-2] == then.split()[:-2]  # "-", or the status before "N.Ns ago"
            times = [float(text.split()[-2 if "ago" in text else -1].rstrip("s")) for text in (got, then)
                     if text != "-"]
            assert not times or (len(times) == 2 and abs(times[0] - times[1]) < 1.0), (got, then)
    held = next(row for row in rows if row[1] == herd.key_id(HOLD_KEY))
    assert (held[0], held[4]) == (herd.fake.url, str(HERD))


def _herd_fleets(kind: str, tmp_path: Path, redis_server: Optional[RedisServer]) -> Tuple[Any, Any]:
    """The herd's fleet and the site's FLEET setting for it."""
    if kind == "host":
        path = str(tmp_path / "app.fleet")
        return HostFleet(path), {"HOST": path}
    from sume_urllib3.contrib.redis import RedisFleet

    assert redis_server is not None
    return RedisFleet(redis_server.url, prefix="admin", timeout=2.0), {"REDIS_URL": redis_server.url,
                                                                         "PREFIX": "admin", "TIMEOUT": 2.0}


@pytest.fixture(params=["host", "redis"])
def held(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tuple[HeldHerd, Site]]:
    """A held herd, and the site (started first: its migrations take a while)."""
    server = request.getfixturevalue("redis_server") if request.param == "redis" else None
    fleet, setting = _herd_fleets(request.param, tmp_path, server)
    herd = HeldHerd(fleet, hold=8.0)  # past the page's reading, even by a browser on a loaded machine
    site = Site(herd.fake.start().url + "/v1", setting)
    try:
        with herd:
            yield herd, site
    finally:
        site.stop()


@pytest.mark.slow
def test_the_admin_page_shows_the_fleets_state_to_staff_only(held: Tuple[HeldHerd, Site]) -> None:
    herd, site = held
    staff = site.login()
    page = staff.get(site.url + PAGE, timeout=30)
    assert page.status_code == 200
    parser = _Table()
    parser.feed(page.text)
    check_page(parser.rows, _expected(herd.fleet, herd), herd)
    assert HOLD_KEY not in page.text
    assert API_KEY not in page.text
    index = staff.get(site.url + "/admin/", timeout=30).text
    assert PAGE in index  # listed in the admin index, without an add link
    assert PAGE + "add/" not in index
    for action in ("add/", "1/change/", "1/delete/"):
        answer = staff.get(site.url + PAGE + action, timeout=30, allow_redirects=False)
        assert answer.status_code in (302, 404)
    visitor = site.login("visitor").get(site.url + PAGE, timeout=30, allow_redirects=False)
    assert visitor.status_code == 302
    assert "/admin/login/" in visitor.headers["Location"]


def _chromium() -> Tuple[str, str]:
    """The distribution's Chromium and chromedriver, or a skip (a failure under SUME_REQUIRE_CHROMIUM=1)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser and driver:
        try:
            import selenium  # noqa: F401
        except ImportError:
            browser = None
    if not (browser and driver):
        reason = (
            "Chromium, chromedriver or selenium is missing "
            "(apt-get install chromium chromium-driver; the browser extra)"
        )
        if os.environ.get("SUME_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"SUME_REQUIRE_CHROMIUM=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    assert browser
    assert driver
    return browser, driver


def _png_colours(png: bytes) -> Tuple[int, int, int]:
    """Width, height and the number of distinct pixels of an 8-bit RGB(A) PNG (zlib only)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    data = b""
    while at < len(png):
        size = int.from_bytes(png[at:at + 4], "big")
        kind = png[at + 4:at + 8]
        body = png[at + 8:at + 8 + size]
        if kind == b"IDAT":
            data += body
        else:
            chunks[kind] = body
        at += 12 + size
    width, height = int.from_bytes(chunks[b"IHDR"][:4], "big"), int.from_bytes(chunks[b"IHDR"][4:8], "big")
    depth, colour = chunks[b"IHDR"][8], chunks[b"IHDR"][9]
    assert (depth, colour in (2, 6)) == (8, True), (depth, colour)
    raw = zlib.decompress(data)
    stride = width * (3 if colour == 2 else 4)
    # Each scanline starts with its filter byte: the distinct filtered lines are a lower bound of
    # the picture's variety, enough to tell a drawn table from a blank box.
    lines = {raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)] for row in range(height)}
    return width, height, len(lines)


@pytest.fixture
def chrome(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium of the distribution's, driven through its chromedriver (nothing downloaded)."""
    browser, driver = _chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900",
                     f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(argument)
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    chrome.set_page_load_timeout(60)
    try:
        yield chrome
    finally:
        chrome.quit()


def _rendered_table(chrome: Any, timeout: float = 30.0) -> Any:
    """The pace table once the page the login's submit navigates to has it: the click returns
    before that navigation ends, so the login page may still be the one shown for a while."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        found = WebDriverWait(chrome, timeout).until(lambda driver: driver.find_elements(By.ID, "sume-pace"))
    except TimeoutException:
        shown = chrome.find_element(By.TAG_NAME, "body").text[:500]
        raise AssertionError(f"no pace table at {chrome.current_url} after {timeout:g}s: {shown!r}") from None
    return found[0]


@pytest.mark.slow
def test_the_admin_page_renders_the_table_in_chromium(
    chrome: Any, held: Tuple[HeldHerd, Site], tmp_path: Path
) -> None:
    """``chrome`` first: the browser starts before the herd is held."""
    from selenium.webdriver.common.by import By

    herd, site = held
    chrome.get(site.url + "/admin/login/?next=" + PAGE)
    chrome.find_element(By.NAME, "username").send_keys("staff")
    chrome.find_element(By.NAME, "password").send_keys(PASSWORD)
    chrome.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    table = _rendered_table(chrome)
    expected = _expected(herd.fleet, herd)
    # The cells as the browser renders them (innerText: the admin's style upper-cases the header).
    script = "return [...arguments[0].rows].map(r => [...r.cells].map(c => c.innerText))"
    cells = chrome.execute_script(script, table)
    check_page(cells, expected, herd)
    png = table.screenshot_as_png
    (tmp_path / "pace.png").write_bytes(png)
    width, height, lines = _png_colours(png)
    assert (width > 400, height > 40, lines > 5) == (True, True, True), (width, height, lines)
