"""The web console in a real browser: headless Chromium driven by Selenium against a real
``rocketq serve --dashboard-port 0`` process. Each page's content is checked against the
cluster's state read with :class:`~rocketq.client.Admin`, every change made in the browser is
seen by the admin client, every page passes axe-core without serious or critical violations,
and the navigation works from the keyboard alone.

Screenshots of every page go to a temporary directory (printed at the end of the run); with
``ROCKETQ_CONSOLE_DOCS=1`` they are also copied to ``docs/console/`` for docs/console.md.

Needs Debian's ``chromium`` and ``chromium-driver`` (``make dashboard-test`` installs them when
run as root with apt-get) and the ``selenium`` package; without them the tests are skipped with
the reason. axe-core is installed with npm into a cache directory once per machine.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from _support.procs import RocketqProcess, run_captured, wait_until, write_broker_conf
from _support.wait import wait_until as poll
from rocketq.client import Admin, ConsumeStatus, Message, Producer, PushConsumer

webdriver = pytest.importorskip(
    "selenium.webdriver", reason="selenium is not installed (pip install selenium)"
)
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
DOCS_DIR = pathlib.Path(__file__).resolve().parents[2] / "docs" / "console"
AXE_VERSION = "4.11.0"
WAIT_S = 10.0

pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="headless browser tests need chromium and chromedriver "
        "(apt-get install chromium chromium-driver; `make dashboard-test` does it as root)",
    ),
    pytest.mark.timeout(90),  # each test; the whole module takes about 15 s
]

TOPIC = "ConsoleOrders"
GROUP = "ConsoleGroup"


class Console:
    """The served console, the browser and an admin client of the same cluster."""

    def __init__(
        self, proc: RocketqProcess, url: str, namesrv: str, driver: Any, shots: pathlib.Path
    ) -> None:
        self.proc = proc
        self.url = url
        self.namesrv = namesrv
        self.driver = driver
        self.shots = shots
        self.admin = Admin(namesrv)

    def open(self, route: str) -> None:
        """Navigate to ``#/route`` and wait for its page to be rendered."""
        page = route.split("?", maxsplit=1)[0].split("/", maxsplit=1)[0]
        target = f"{self.url}#/{route}"
        if self.driver.current_url == target:
            self.driver.refresh()  # the same hash again: no hashchange, so load it afresh
        else:
            self.driver.get(target)
        self.loaded(page)

    def loaded(self, page: str) -> None:
        WebDriverWait(self.driver, WAIT_S).until(
            lambda d: d.find_element(By.ID, "main").get_attribute("data-loaded") == page
        )

    def find(self, css: str) -> WebElement:
        return WebDriverWait(self.driver, WAIT_S).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, css))
        )

    def click(self, css: str) -> None:
        WebDriverWait(self.driver, WAIT_S).until(ec.element_to_be_clickable((By.CSS_SELECTOR, css))).click()

    def text(self) -> str:
        return str(self.driver.find_element(By.ID, "main").text)

    def wait_text(self, needle: str) -> None:
        WebDriverWait(self.driver, WAIT_S).until(lambda d: needle in d.find_element(By.ID, "main").text)

    def confirm(self) -> None:
        """Press OK in the open dialog."""
        WebDriverWait(self.driver, WAIT_S).until(
            lambda d: d.find_element(By.ID, "dialog").get_attribute("open") is not None
        )
        self.click("#dialog-ok")
        WebDriverWait(self.driver, WAIT_S).until(
            lambda d: d.find_element(By.ID, "dialog").get_attribute("open") is None
        )

    def shot(self, name: str) -> pathlib.Path:
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        if os.environ.get("ROCKETQ_CONSOLE_DOCS") == "1":
            DOCS_DIR.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, DOCS_DIR / path.name)
        return path


def _driver() -> Any:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1200,800",
        "--lang=en-US",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    try:
        return webdriver.Chrome(options=options, service=service)
    except WebDriverException as exc:
        pytest.skip(f"chromium did not start under chromedriver: {exc.msg}")


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    root = tmp_path_factory.mktemp("console")
    conf = write_broker_conf(root / "broker.conf", {"brokerTraceEnable": "true"})
    args = [
        "serve",
        "--data-dir",
        str(root / "data"),
        "--namesrv-port",
        "0",
        "--broker-port",
        "0",
        "--grpc-port",
        "-1",
        "-c",
        str(conf),
        "--dashboard-port",
        "0",
        "--dashboard-sample-interval",
        "1",
    ]
    proc = RocketqProcess("serve", args, root / "logs")
    found: dict[str, str] = {}

    def ready() -> bool:
        text = proc.log_text(None)
        m = re.search(r"^\s+dashboard\s+(http://\S+/)", text, re.MULTILINE)
        n = re.search(r"^\s+name server\s+(\S+:\d+)", text, re.MULTILINE)
        if m and n:
            found.update(url=m.group(1), namesrv=n.group(1))
        return bool(found)

    try:
        wait_until(ready, "rocketq serve to print the dashboard address", 20.0, proc)
        shots = tmp_path_factory.mktemp("console-screenshots")
        driver = _driver()
        c = Console(proc, found["url"], found["namesrv"], driver, shots)
        c.admin.start()
        try:
            c.admin.create_topic(TOPIC, 4, 4)
            wait_until(lambda: TOPIC in c.admin.topic_list(), f"{TOPIC} routed")
            yield c
        finally:
            print(f"\nconsole screenshots in {shots}")
            c.admin.shutdown()
            driver.quit()
    finally:
        proc.stop()


def test_cluster_page_shows_the_broker(console: Console) -> None:
    console.open("cluster")
    entries = console.admin.cluster_list()
    text = console.text()
    for e in entries:
        assert e.addr in text and e.broker_name in text
    assert "MASTER" in text and "V5_" in text
    assert re.search(r"\d+\.\d %", text), "disk use shown as a percentage"
    console.shot("cluster")


def test_topic_created_in_the_browser_exists_and_shows_its_queues(console: Console) -> None:
    console.open("topics")
    console.click("#create-topic")
    name = console.find("#new-topic-name")
    name.send_keys("ConsoleNew")
    dialog = console.driver.find_element(By.ID, "dialog")
    for field in ("readQueueNums", "writeQueueNums"):
        queues = dialog.find_element(By.NAME, field)
        queues.clear()
        queues.send_keys("3")
    console.confirm()
    wait_until(lambda: "ConsoleNew" in console.admin.topic_list(), "ConsoleNew in Admin.topic_list()")
    console.loaded("topic")
    console.wait_text("Topic ConsoleNew")
    assert len(console.admin.topic_status("ConsoleNew")) == 3
    rows = console.driver.find_elements(By.CSS_SELECTOR, "main table:nth-of-type(2) tbody tr")
    assert len(rows) >= 3
    # searching the list finds it
    console.open("topics")
    search = console.find("#topic-search")
    search.send_keys("consolen", Keys.ENTER)
    WebDriverWait(console.driver, WAIT_S).until(lambda d: "q=consolen" in d.current_url)
    console.loaded("topics")
    links = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, "main table a")]
    assert links == ["ConsoleNew"]
    console.shot("topics")
    # delete it with the confirmation dialog
    console.open("topic/ConsoleNew")
    console.click("#delete-topic")
    console.confirm()
    wait_until(lambda: "ConsoleNew" not in console.admin.topic_list(), "ConsoleNew deleted")


def test_topic_page_counts_messages_and_draws_tps(console: Console) -> None:
    def samples() -> list[dict[str, float]]:
        with urllib.request.urlopen(f"{console.url}api/topics/{TOPIC}/tps", timeout=5) as r:
            return list(json.loads(r.read())["points"])

    poll(samples, "a first TPS sample of the topic")
    with Producer("ConsoleP", namesrv_addr=console.namesrv) as p:
        for i in range(12):
            p.send(Message(TOPIC, json.dumps({"order": i, "amount": i * 10}).encode(), keys=[f"order-{i}"]))
    total = sum(s.max_offset - s.min_offset for s in console.admin.topic_status(TOPIC))
    poll(lambda: any(pt["tps"] > 0 for pt in samples()), "a TPS sample above 0")
    seen: dict[str, Any] = {}

    def shown() -> bool:
        console.open(f"topic/{TOPIC}")
        drawn = console.driver.find_elements(By.CSS_SELECTOR, "svg.chart polyline")
        points = (drawn[0].get_dom_attribute("points") if drawn else "") or ""
        ys = {float(xy.split(",")[1]) for xy in points.split()}
        seen.update(count=console.find("#total-messages").text, ys=ys)
        return seen["count"] == str(total) and len(ys) >= 2  # the baseline and a rate above it

    poll(shown, lambda: f"the topic page to show {total} stored and a TPS above 0: {seen}", 15.0)
    console.shot("topic")


def test_message_found_by_key_with_json_and_hex_views(console: Console) -> None:
    with Producer("ConsoleP", namesrv_addr=console.namesrv) as p:
        sent = p.send(Message(TOPIC, b'{"customer":"ada","total":42}', keys=["cust-ada"], tags="paid"))
    console.open("messages")
    console.find("#search-topic").send_keys(TOPIC)
    console.find("#search-key").send_keys("cust-ada")
    console.click("#search-button")
    console.loaded("messages")
    console.find("#details-title")
    console.wait_text(sent.offset_msg_id)
    found = console.admin.query_msg_by_key(TOPIC, "cust-ada")
    assert [m.msg_id for m in found] == [sent.offset_msg_id]
    buttons = {
        b.text: b for b in console.driver.find_elements(By.CSS_SELECTOR, "[aria-label='Body view'] button")
    }
    buttons["JSON"].click()
    assert '"customer": "ada"' in console.find("#body-preview").text
    console.shot("messages")
    buttons["Hex"].click()
    assert console.find("#body-preview").text.startswith("000000  7b 22")


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def listen(self, msgs: list[Any]) -> ConsumeStatus:
        self.count += len(msgs)
        return ConsumeStatus.CONSUME_SUCCESS


def test_group_lag_matches_progress_and_reset_by_time_moves_the_offset(console: Console) -> None:
    counter = Counter()
    c = PushConsumer(
        GROUP,
        namesrv_addr=console.namesrv,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        rebalance_interval_ms=300,
        heartbeat_interval_ms=1000,
        auto_commit_interval_ms=300,
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(counter.listen)
    c.start()
    try:
        stored = sum(s.max_offset for s in console.admin.topic_status(TOPIC))
        wait_until(
            lambda: console.admin.consumer_progress(GROUP, TOPIC).total_consumer_offset == stored,
            "all committed",
        )
        console.open(f"group/{GROUP}")
        console.wait_text("Online members")
        client_id = c.core.client_id
        assert client_id in console.text() and "V5_" in console.text()
    finally:
        c.shutdown()
    with Producer("ConsoleP", namesrv_addr=console.namesrv) as p:
        for i in range(5):
            p.send(Message(TOPIC, f"late-{i}".encode()))
    console.open(f"group/{GROUP}")
    lag = console.admin.consumer_progress(GROUP, TOPIC).total_lag
    assert lag == 5
    assert console.find("#total-lag").text == str(lag)
    console.shot("group")
    Select(console.find("#reset-topic")).select_by_value(TOPIC)
    when = datetime.datetime(2001, 1, 1).strftime("%Y-%m-%dT%H:%M:%S")
    console.driver.execute_script("arguments[0].value = arguments[1]", console.find("#reset-time"), when)
    console.click("#reset-button")
    console.confirm()
    wait_until(
        lambda: console.admin.consumer_progress(GROUP, TOPIC).total_consumer_offset == 0, "offsets reset to 0"
    )
    console.loaded("group")
    console.wait_text("Reset 4 queue(s)")


def test_dead_letters_are_browsed_and_resent(console: Console) -> None:
    dlq = f"%DLQ%{GROUP}"
    console.admin.create_topic(dlq, 1, 1)
    wait_until(lambda: dlq in console.admin.topic_list(), "the DLQ topic routed")
    console.admin.send_message(dlq, b'{"dead":true}', keys="dead-1")
    console.open("dlq")
    console.wait_text(dlq)
    console.shot("dlq")
    console.driver.find_element(By.LINK_TEXT, dlq).click()
    console.loaded("messages")
    console.click("main table button.linklike")
    console.click("#resend-button")
    topic_field = console.driver.find_element(By.CSS_SELECTOR, "#dialog input[name=topic]")
    topic_field.clear()
    topic_field.send_keys(TOPIC)
    console.confirm()
    console.wait_text(f"Sent again to {TOPIC}")
    wait_until(lambda: console.admin.query_msg_by_key(TOPIC, "dead-1") != [], "the resent copy in the topic")


def test_trace_timeline(console: Console) -> None:
    with Producer("ConsoleTraceP", namesrv_addr=console.namesrv) as p:
        sent = p.send(Message(TOPIC, b"traced", keys=["traced-1"]))
    wait_until(lambda: console.admin.query_msg_trace_by_id(sent.msg_id) != [], "the broker's trace record")
    console.open(f"trace?id={sent.msg_id}")
    items = console.driver.find_elements(By.CSS_SELECTOR, "ol.timeline li")
    events = console.admin.query_msg_trace_by_id(sent.msg_id)
    assert len(items) == len(events) and items[0].text.startswith(events[0].event)
    console.shot("trace")


def _axe_source() -> str:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: axe-core cannot be installed")
    target = pathlib.Path(
        os.environ.get("ROCKETQ_AXE_DIR", pathlib.Path(tempfile.gettempdir()) / "rocketq-axe")
    )
    script = target / "node_modules" / "axe-core" / "axe.min.js"
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not script.exists():
            (target / "package.json").write_text('{"name":"rocketq-axe","version":"0.0.0","private":true}\n')
            try:
                done = run_captured(
                    [npm, "install", "--no-audit", "--no-fund", f"axe-core@{AXE_VERSION}"], 120, cwd=target
                )
            except subprocess.TimeoutExpired:
                pytest.fail("npm install axe-core took longer than 120 s")
            if done.returncode != 0 or not script.exists():
                pytest.fail(f"npm install axe-core failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return script.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "route", ["cluster", "topics", f"topic/{TOPIC}", "groups", f"group/{GROUP}", "messages", "dlq", "trace"]
)
def test_pages_have_no_serious_accessibility_violations(console: Console, route: str) -> None:
    source = _axe_source()
    console.open(route)
    console.driver.execute_script(source)
    result = console.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations.map("
        "v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 3)}))),"
        " e => done([{id: 'error', impact: 'critical', help: String(e), nodes: []}]));"
    )
    bad = [v for v in result if v["impact"] in ("serious", "critical")]
    assert bad == [], json.dumps(bad, indent=1)


def test_keyboard_navigation_reaches_and_opens_a_page(console: Console) -> None:
    console.open("cluster")
    console.driver.execute_script("document.activeElement && document.activeElement.blur()")
    active = console.driver.switch_to.active_element
    assert active.tag_name == "body"
    for _ in range(12):  # skip link, then the nav links in order
        active.send_keys(Keys.TAB)
        active = console.driver.switch_to.active_element
        if active.text == "Consumer groups":
            break
    assert active.text == "Consumer groups", "the nav link is reachable with Tab"
    outline = console.driver.execute_script("return getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("none", ""), "the focused link shows a focus style"
    active.send_keys(Keys.ENTER)
    console.loaded("groups")
    focused = console.driver.switch_to.active_element
    assert focused.tag_name == "h1" and focused.text == "Consumer groups"


def test_dialog_opens_with_enter_and_escape_returns_focus(console: Console) -> None:
    console.open("topics")
    button = console.find("#create-topic")
    console.driver.execute_script("arguments[0].focus()", button)
    console.driver.switch_to.active_element.send_keys(Keys.ENTER)
    WebDriverWait(console.driver, WAIT_S).until(
        lambda d: d.find_element(By.ID, "dialog").get_attribute("open") is not None
    )
    assert console.driver.switch_to.active_element.get_attribute("id") == "new-topic-name"
    console.driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    WebDriverWait(console.driver, WAIT_S).until(
        lambda d: d.find_element(By.ID, "dialog").get_attribute("open") is None
    )
    assert console.driver.switch_to.active_element.get_attribute("id") == "create-topic"


def test_pages_render_within_a_second_with_100_topics_of_100_queues(console: Console) -> None:
    names = [f"Bulk{i:03d}" for i in range(100)]
    for name in names:
        console.admin.create_topic(name, 100, 100)
    wait_until(lambda: set(names) <= set(console.admin.topic_list()), "100 topics routed", 30.0)
    timings: dict[str, float] = {}
    texts: dict[str, str] = {}
    for route in ["topics?page=2", "topic/Bulk050?page=2", "cluster", "groups", "dlq"]:
        console.open("cluster" if route != "cluster" else "topics")
        began = time.perf_counter()
        console.open(route)
        timings[route] = time.perf_counter() - began
        texts[route] = console.text()
    assert "Page 2 of 2 (100 queues)" in texts["topic/Bulk050?page=2"]
    assert "Bulk099" in texts["topics?page=2"]
    assert max(timings.values()) < 1.0, timings
