"""The dashboard in a real headless browser (Debian's chromium through Selenium and
chromedriver): create a topic and a subscription, publish, see the backlog, seek — the
clicks a user makes — and check what each page shows: the empty state, the backlog, the
charts' axes and labels, the topic's page, and a refresh that changes the numbers without
reloading the page; an export subscription's page that shows the object it wrote.

``./dev setup`` installs chromium and chromium-driver with apt where they are missing; the
test skips, saying why, only where neither can be found. With
``EOCLIENT_DASHBOARD_SCREENSHOTS=1`` it saves one screenshot per page into ``docs/``.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import eoclient
from eoclient.admin import CloudStorageConfig
from eoclient.server_stub.server import ReferenceServer, run_server

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    JavascriptException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402

DOCS = Path(__file__).resolve().parents[4] / "docs"
TOPIC = "projects/browser/topics/orders"
SUB = "projects/browser/subscriptions/billing"


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium = _find("chromium", "chromium-browser", "google-chrome")
    driver_path = _find("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip(
            "no chromium/chromedriver here (./dev setup installs Debian's chromium and "
            "chromium-driver with apt where it can)"
        )
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


async def _until(check: Callable[[], Any], what: str, seconds: float = 15.0) -> Any:
    """Poll ``check`` (a browser read, run off the event loop) until it is truthy.

    The dashboard reloads its page after an action answers, so an element found just
    before the reload is stale when read, or not there yet, and a script may run while
    the page is going: all mean "not yet".
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            value = await asyncio.to_thread(check)
        except (StaleElementReferenceException, NoSuchElementException, JavascriptException):
            value = None
        if value:
            return value
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def _screenshot(driver: WebDriver, name: str) -> None:
    if os.environ.get("EOCLIENT_DASHBOARD_SCREENSHOTS") == "1":
        driver.save_screenshot(str(DOCS / f"dashboard-{name}.png"))


async def _submit(driver: WebDriver, form_id: str, **values: str | bool) -> str:
    """Fill the form, click its button, wait for the status line, return it."""

    def fill_and_click() -> None:
        form = driver.find_element(By.ID, form_id)
        for name, value in values.items():
            field = form.find_element(By.NAME, name)
            if isinstance(value, bool):
                if value != field.is_selected():
                    field.click()
            elif field.get_attribute("type") == "datetime-local":
                # Typing into a date input depends on the browser's locale: set it.
                driver.execute_script("arguments[0].value = arguments[1]", field, value)
            else:
                field.clear()
                field.send_keys(value)
        asks = form.get_attribute("data-confirm")
        form.find_element(By.TAG_NAME, "button").click()
        if asks:
            driver.switch_to.alert.accept()

    # Mark this document: an action that succeeds reloads the page (800 ms after its
    # answer), and the next step must run on the new page, not on this one going away.
    await asyncio.to_thread(driver.execute_script, "document.body.dataset.beforeAction = '1'")
    await asyncio.to_thread(fill_and_click)

    def status() -> tuple[str, str] | None:
        element = driver.find_element(By.ID, "status")
        if not element.is_displayed():
            return None
        return element.text, str(element.get_attribute("class"))

    answer, kind = await _until(status, f"the answer to {form_id}")
    if "error" not in kind:
        await _until(
            lambda: driver.execute_script(
                "return document.readyState === 'complete' && document.body !== null"
                " && !document.body.dataset.beforeAction"
            ),
            f"the page to reload after {form_id}",
        )
    return str(answer)


@pytest.mark.timeout(120)
async def test_create_publish_see_the_backlog_and_seek(browser: WebDriver) -> None:
    async with run_server() as server:
        await _click_through(browser, server)


async def _click_through(driver: WebDriver, server: ReferenceServer) -> None:
    await asyncio.to_thread(driver.get, server.rest_url + "/dashboard")
    assert "Topics and subscriptions" in driver.title
    assert "No topics yet" in driver.find_element(By.ID, "no-topics").text
    assert "No snapshots" in driver.find_element(By.ID, "no-snapshots").text
    assert "No schemas" in driver.find_element(By.ID, "no-schemas").text

    assert await _submit(driver, "create-topic", topic=TOPIC) == f"Created {TOPIC}."
    answer = await _submit(
        driver,
        "create-subscription",
        subscription=SUB,
        topic=TOPIC,
        exactly_once=True,
        retain_acked=True,
    )
    assert answer == f"Created {SUB} on {TOPIC}."
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=2)
    for n in range(3):
        answer = await _submit(driver, "publish", topic=TOPIC, data=f"order {n}")
        assert answer.startswith("Published message ")
        server.dashboard.sample()  # as the sampler does every 5 s: the chart's points

    # The overview shows the backlog and its chart.
    await asyncio.to_thread(driver.get, server.rest_url + "/dashboard")
    row = driver.find_element(By.XPATH, f"//table[@id='subscriptions']//tr[@data-name='{SUB}']")
    assert "exactly-once" in row.text
    assert row.find_element(By.CSS_SELECTOR, "td.backlog").text == "3"
    assert "peak 3" in row.find_element(By.TAG_NAME, "svg").get_attribute("aria-label")
    _screenshot(driver, "overview")

    # The subscription page: the three messages, peeked without leases.
    await asyncio.to_thread(row.find_element(By.TAG_NAME, "a").click)
    await _until(lambda: driver.title.startswith("Subscription"), "the subscription page")
    peek = await _until(lambda: driver.find_element(By.ID, "peek").text, "the peek")
    assert all(f"order {n}" in peek for n in range(3))
    assert "leased" not in peek
    assert peek.count("waiting") == 3
    acks = driver.find_element(By.ID, "section-acks").text
    assert "Exactly-once acks and redeliveries" in acks
    assert "No ack has failed since the server started." in acks
    # Three charts, each with a time axis, a value axis, their captions and units.
    for chart_id, unit in (
        ("chart-backlog", "messages"),
        ("chart-age", "age"),
        ("chart-rates", "messages/s"),
    ):
        svg = driver.find_element(By.CSS_SELECTOR, f"#{chart_id} svg")
        labels = [t.text for t in svg.find_elements(By.CSS_SELECTOR, "text.axis-label")]
        assert labels == ["time (UTC)", unit], (chart_id, labels)
        assert len(svg.find_elements(By.CSS_SELECTOR, "text.tick.x")) >= 2
        assert len(svg.find_elements(By.CSS_SELECTOR, "text.tick.y")) == 5
    assert "backlog now 3" in driver.find_element(
        By.CSS_SELECTOR, "#chart-backlog svg"
    ).get_attribute("aria-label")
    _screenshot(driver, "subscription")

    def backlog_shown() -> str:
        return str(driver.find_element(By.CSS_SELECTOR, "#numbers td.backlog").text)

    # Purge: the backlog shows 0. Seek back to before the messages: they were acked by
    # the purge and are retained (retain acked), so all three come back.
    assert await _submit(driver, "purge") == f"Purged {SUB}."
    await _until(lambda: backlog_shown() == "0", "the backlog to show 0 after the purge")
    answer = await _submit(driver, "seek-time", time=before.strftime("%Y-%m-%dT%H:%M:%S"))
    assert answer == f"Sought {SUB} to {before.strftime('%Y-%m-%dT%H:%M:%S')}Z."
    await _until(lambda: backlog_shown() == "3", "the backlog to show 3 after the seek")
    assert server.broker.backlog(SUB) == 3

    # The page refreshes itself: a message published elsewhere shows up, and what the user
    # typed and the document itself stay (no reload).
    await asyncio.to_thread(
        driver.execute_script,
        "document.body.dataset.kept = '1';"
        "document.querySelector('#skip input[name=message_ids]').value = 'typed';",
    )
    async with eoclient.PublisherClient(server.address) as publisher:
        await publisher.publish(TOPIC, b"order 3")
    await _until(lambda: backlog_shown() == "4", "the refresh to show the new message", 20)
    kept = driver.execute_script(
        "return [document.body.dataset.kept,"
        " document.querySelector('#skip input[name=message_ids]').value,"
        " document.getElementById('updated').textContent]"
    )
    assert kept[:2] == ["1", "typed"]
    assert kept[2].startswith("updated ")

    # The topic's page: what was published, its chart, its subscription.
    await asyncio.to_thread(
        driver.find_element(By.CSS_SELECTOR, f"a.name[data-name='{TOPIC}']").click
    )
    await _until(lambda: driver.title.startswith("Topic"), "the topic page")
    assert "4 messages" in driver.find_element(By.ID, "numbers").text
    policies = driver.find_element(By.ID, "policies").text
    assert "message retention" in policies
    assert "backlog quota" in policies
    published = driver.find_element(By.CSS_SELECTOR, "#chart-published")
    assert "Published" in published.text
    subscriptions = driver.find_element(By.ID, "subscriptions")
    assert (
        subscriptions.find_element(By.CSS_SELECTOR, f"tr[data-name='{SUB}'] td.backlog").text == "4"
    )
    _screenshot(driver, "topic")


@pytest.mark.timeout(120)
async def test_an_export_page_counts_the_object_it_writes(
    browser: WebDriver, tmp_path: Path
) -> None:
    """A Cloud Storage subscription's page shows its export and its state; once messages
    are published, the page's refresh shows the object written, in place."""
    topic, sub = "projects/browser/topics/logs", "projects/browser/subscriptions/logs-archive"
    async with run_server(buckets_dir=tmp_path / "buckets") as server:
        assert server.buckets is not None
        await server.buckets.create_bucket("archive")
        async with eoclient.AdminClient(server.address) as admin:
            await admin.create_topic(topic)
            await admin.create_subscription(
                sub,
                topic,
                cloud_storage_config=CloudStorageConfig(
                    "archive", filename_prefix="logs/", filename_suffix=".txt", max_bytes=1000
                ),
            )
        url = f"{server.rest_url}/dashboard/subscription?name={sub}"
        await asyncio.to_thread(browser.get, url)
        export = browser.find_element(By.ID, "section-export")
        assert "Cloud Storage export" in export.text
        assert "gs://archive" in export.text
        assert "ACTIVE" in browser.find_element(By.ID, "export-state").text
        assert "Nothing written" in browser.find_element(By.ID, "export-written").text
        await asyncio.to_thread(browser.execute_script, "document.body.dataset.kept = '1'")

        async with eoclient.PublisherClient(server.address) as publisher:
            for n in range(2):  # two lines of 500 bytes: one object of 1,000 bytes
                await publisher.publish(topic, str(n).encode() * 499)

        def written() -> str:
            return str(browser.find_element(By.ID, "export-written").text)

        shown = await _until(lambda: "logs/" in written() and written(), "the object", 20)
        (info,) = await server.buckets.list("archive")
        assert f"gs://archive/{info.name}" in shown
        assert "1,000 B" in shown
        assert "2 messages in 1 object" in browser.find_element(By.ID, "export-state").text
        assert browser.execute_script("return document.body.dataset.kept") == "1"  # no reload
        browser.execute_script("document.getElementById('section-export').scrollIntoView()")
        _screenshot(browser, "export")
