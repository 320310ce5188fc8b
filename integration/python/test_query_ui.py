"""The query UI in a real browser: Playwright driving Debian's chromium
against a coordinator and two worker processes. A running query is listed
live and its stage graph's progress moves; the numbers the page shows are
those of `system.tasks`; a failed query shows its error."""

import shutil
import threading
import time

import pytest

from conftest import BIN_DIR, Process, free_port, insecure_workers, rows

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Seconds of work at SF0.01 in a debug build: a join of lineitem with
# itself on a column of few values, spread over many tasks.
SLOW = (
    "SELECT count(*) FROM lineitem a JOIN lineitem b "
    "ON a.l_suppkey = b.l_suppkey AND a.l_orderkey < b.l_orderkey"
)
FAILING = "SELECT CAST(n_name AS INT) FROM nation"


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    workers = insecure_workers()
    port = free_port()
    server = Process(
        [
            str(BIN_DIR / "squadron-server"),
            "--listen", "127.0.0.1:0",
            "--workers", ",".join(w.url for w in workers),
            "--demo", "--demo-scale", "0.01",
            "--data-dir", str(tmp / "data"),
            "--coordinator-scan-limit", "0",
            "--partitions", "8",
            "--metrics-listen", f"127.0.0.1:{port}",
        ]
    )
    yield {"uri": server.url, "http": f"http://127.0.0.1:{port}", "workers": [w.url for w in workers]}
    server.stop()
    for w in workers:
        w.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright import sync_api
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def run_in_background(uri, sql):
    done = {}

    def run():
        try:
            done["rows"] = rows(uri, sql)
        except Exception as e:  # noqa: BLE001 - reported by the test
            done["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


def test_a_running_query_is_listed_live_and_its_progress_moves(ui, browser):
    page = browser.new_page()
    page.goto(ui["http"] + "/ui")
    thread, done = run_in_background(ui["uri"], SLOW)
    try:
        row = page.locator("#queries tr", has_text="a.l_suppkey = b.l_suppkey")
        row.locator("td.state", has_text="running").wait_for(timeout=20_000)
        row.locator("a").click()
        page.wait_for_selector("#stages g.stage")
        seen = []
        deadline = time.time() + 120
        while time.time() < deadline:
            state = page.locator("#state").inner_text()
            done_tasks = page.eval_on_selector_all(
                "#stages g.stage", "gs => gs.reduce((n, g) => n + Number(g.dataset.done), 0)"
            )
            seen.append((state, done_tasks))
            if state != "running":
                break
            page.wait_for_timeout(100)
    finally:
        thread.join()
    assert "error" not in done, done
    running = [n for s, n in seen if s == "running"]
    assert len(set(running)) >= 2, f"progress did not move while running: {seen}"
    assert running == sorted(running), f"progress went back: {seen}"
    total = page.eval_on_selector_all(
        "#stages g.stage", "gs => gs.reduce((n, g) => n + Number(g.dataset.tasks), 0)"
    )
    assert seen[-1] == ("ok", total), seen[-1]
    # One timeline lane per worker that ran a task.
    assert page.locator("#timeline rect.task").count() >= total


def test_the_numbers_shown_are_those_of_system_tasks(ui, browser):
    sql = "SELECT l_returnflag, sum(l_quantity) FROM lineitem GROUP BY l_returnflag"
    answer = rows(ui["uri"], sql)
    (query,) = [q for q in rows(ui["uri"], "SELECT id, sql FROM system.queries") if q["sql"] == sql]
    expected = {
        (t["stage"], t["task"], t["attempt"]): t
        for t in rows(ui["uri"], f"SELECT * FROM system.tasks WHERE query_id = '{query['id']}'")
    }
    page = browser.new_page()
    page.goto(f"{ui['http']}/ui/query/{query['id']}")
    page.wait_for_selector("#tasks tbody tr")
    shown = page.eval_on_selector_all(
        "#tasks tbody tr",
        """trs => trs.map(tr => ({
            key: [tr.dataset.stage, tr.dataset.task, tr.dataset.attempt].map(Number),
            state: tr.querySelector('td.state').textContent,
            output_rows: Number(tr.querySelector('td.output_rows').textContent),
            input_rows: Number(tr.querySelector('td.input_rows').textContent),
            peak_memory_bytes: Number(tr.querySelector('td.peak_memory_bytes').textContent),
        }))""",
    )
    assert len(shown) == len(expected) > 0
    for task in shown:
        want = expected[tuple(task["key"])]
        for name in ("state", "output_rows", "input_rows", "peak_memory_bytes"):
            assert task[name] == want[name], (task, want)
    assert page.locator("#state").inner_text() == "ok"
    assert str(len(answer)) + " rows" in page.locator("#summary").inner_text()
    assert page.locator("#error").is_hidden()


def test_a_failed_query_shows_its_error(ui, browser):
    with pytest.raises(Exception):
        rows(ui["uri"], FAILING)
    (query,) = [q for q in rows(ui["uri"], "SELECT id, sql FROM system.queries") if q["sql"] == FAILING]
    page = browser.new_page()
    page.goto(f"{ui['http']}/ui/query/{query['id']}")
    page.wait_for_selector("#error:not([hidden])")
    assert "Cannot cast string" in page.locator("#error").inner_text()
    assert page.locator("#state").inner_text() == "error"
    page.goto(ui["http"] + "/ui")
    row = page.locator("#queries tr", has_text=FAILING)
    row.wait_for()
    assert "Cannot cast string" in row.locator("td.error").inner_text()


def test_the_workers_page_lists_the_workers(ui, browser):
    page = browser.new_page()
    page.goto(ui["http"] + "/ui/workers")
    page.wait_for_selector("#workers tbody tr")
    urls = page.eval_on_selector_all("#workers tbody tr", "trs => trs.map(tr => tr.dataset.url)")
    assert sorted(urls) == sorted(ui["workers"])
