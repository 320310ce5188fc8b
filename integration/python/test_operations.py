"""What an operator sees: Prometheus metrics of the coordinator and of every
worker after a TPC-H run, the Grafana dashboard checked against them,
`system.workers`/`system.queries`, workers discovered from a file, and
settings from a config file and the environment. One cluster of two
worker processes; the coordinator takes its settings from a TOML file."""

import json
import re
import time

import adbc_driver_flightsql.dbapi as flightsql
import pytest

from conftest import BIN_DIR, REPO, SCALE, Process, free_port, rows, scrape, tpch_query

QUERIES = [1, 3, 5, 6, 10]
# Statements that fail: at parsing, at planning (an unknown column, an
# unknown table), and on the workers while running.
FAILING = {
    "SELEC 1": "ParserError",
    "SELECT no_such_column FROM nation": "no_such_column",
    "SELECT * FROM no_such_table": "no_such_table",
    "SELECT CAST(n_name AS INT) FROM nation": "Cannot cast",
}


def names(samples):
    return {series.split("{", 1)[0] for series in samples}


def value(samples, series):
    assert series in samples, f"{series} not exported: {sorted(names(samples))}"
    return samples[series]


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ops")
    worker_ports = [free_port(), free_port()]
    worker_logs = [tmp / f"worker-{n}.log" for n in range(2)]
    workers = [
        Process(
            [str(BIN_DIR / "squadron-worker"), "--listen", "127.0.0.1:0", "--insecure",
             "--metrics-listen", f"127.0.0.1:{port}",
             "--log-format", "json", "--log-level", "info,squadron_worker=debug"],
            stderr=log,
        )
        for port, log in zip(worker_ports, worker_logs)
    ]
    workers_file = tmp / "workers"
    workers_file.write_text("".join(f"{w.url}\n" for w in workers[:1]))
    coordinator_port = free_port()
    config = tmp / "squadron.toml"
    config.write_text(
        "\n".join(
            [
                "demo = true",
                f"demo-scale = {SCALE}",
                f'data-dir = "{tmp / "data"}"',
                f'workers-file = "{workers_file}"',
                "discovery-interval = 0.2",
                "health-interval = 0.3",
                # Every table at this scale could be read on the coordinator;
                # these tests watch the workers.
                "coordinator-scan-limit = 0",
                f'metrics-listen = "127.0.0.1:{coordinator_port}"',
                # Overridden by the environment, which a flag overrides.
                "max-queries-per-user = 1",
                'listen = "127.0.0.1:1"',
            ]
        )
        + "\n"
    )
    server = Process(
        [str(BIN_DIR / "squadron-server"), "--config", str(config),
         "--max-queries-per-user", "8"],
        env={"SQUADRON_LISTEN": "127.0.0.1:0"},
    )
    # The second worker joins through the file, with no restart.
    workers_file.write_text("".join(f"{w.url}\n" for w in workers))
    deadline = time.time() + 10
    while len(rows(server.url, "SELECT url FROM system.workers")) < 2:
        assert time.time() < deadline, "the second worker was not discovered"
        time.sleep(0.1)
    yield {
        "uri": server.url,
        "coordinator": coordinator_port,
        "workers": worker_ports,
        "worker_urls": [w.url for w in workers],
        "workers_file": workers_file,
        "worker_logs": worker_logs,
        "data": tmp / "data" / f"tpch-sf{SCALE}",
    }
    server.stop()
    for w in workers:
        w.stop()


@pytest.fixture(scope="module")
def after_tpch(observed):
    before = scrape(observed["coordinator"])
    with flightsql.connect(observed["uri"]) as conn, conn.cursor() as cur:
        for n in QUERIES:
            cur.execute(tpch_query(n))
            assert cur.fetch_arrow_table().num_rows > 0
        for sql in FAILING:
            with pytest.raises(Exception):
                cur.execute(sql)
                cur.fetch_arrow_table()
    return {
        "before": before,
        "coordinator": scrape(observed["coordinator"]),
        "workers": [scrape(port) for port in observed["workers"]],
    }


def test_settings_come_from_the_file_the_environment_and_flags(observed):
    # listen: file says port 1, the environment port 0 (a free one).
    assert not observed["uri"].endswith(":1")
    # max-queries-per-user: file 1, flag 8. Two open result streams of
    # one client need more than 1.
    with flightsql.connect(observed["uri"]) as conn:
        a, b = conn.cursor(), conn.cursor()
        a.execute("SELECT * FROM lineitem")
        reader = a.fetch_record_batch()
        b.execute("SELECT count(*) FROM nation")
        assert b.fetchall() == [(25,)]
        reader.read_next_batch()


def test_counters_move_after_a_tpch_run(after_tpch):
    before, after = after_tpch["before"], after_tpch["coordinator"]

    def moved(series):
        return value(after, series) - before.get(series, 0.0)

    ran = len(QUERIES)
    assert moved('squadron_queries_total{outcome="ok"}') >= ran
    # Every failed statement counts, wherever it failed.
    assert moved('squadron_queries_total{outcome="error"}') == len(FAILING)
    assert moved("squadron_query_duration_seconds_count") >= ran
    assert moved("squadron_planning_duration_seconds_count") >= ran
    assert moved("squadron_stages_total") >= ran * 2
    assert moved("squadron_stage_duration_seconds_count") >= ran * 2
    assert moved('squadron_tasks_total{outcome="succeeded"}') >= ran * 2
    assert moved("squadron_client_sent_bytes_total") > 0
    ok_gets = 'squadron_flight_requests_total{method="DoGet",command="TicketStatementQuery",code="OK"}'
    assert moved(ok_gets) >= ran
    # ADBC prepares every statement: the bad ones fail there.
    refused = 'squadron_flight_requests_total{method="DoAction",command="CreatePreparedStatement",code="INVALID_ARGUMENT"}'
    assert moved(refused) == 2, "the bad queries are counted with their status"
    assert value(after, "squadron_workers_known") == 2
    assert value(after, "squadron_workers_healthy") == 2
    assert value(after, "squadron_queries_active") == 0
    for worker in after_tpch["workers"]:
        assert value(worker, 'squadron_worker_tasks_total{outcome="succeeded"}') > 0
        assert value(worker, "squadron_shuffle_sent_bytes_total") > 0
        assert value(worker, "squadron_worker_task_duration_seconds_count") > 0
        assert 'squadron_worker_task_duration_seconds_bucket{le="0.001"}' in worker
    # No unbounded labels: no SQL, no users, no ids.
    for series in after:
        for label_value in re.findall(r'="([^"]*)"', series):
            assert len(label_value) <= 32 and " " not in label_value, series


def test_every_dashboard_expression_names_exported_metrics(after_tpch):
    exported = names(after_tpch["coordinator"])
    for worker in after_tpch["workers"]:
        exported |= names(worker)
    dashboard = json.loads((REPO / "grafana" / "squadron.json").read_text())
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"\bsquadron_[a-z_]+", target["expr"]))
    assert len(used) >= 12, used
    assert used <= exported, f"not exported: {sorted(used - exported)}"
    # Every panel has a query; the layout does not overlap.
    cells = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        p = panel["gridPos"]
        for x in range(p["x"], p["x"] + p["w"]):
            for y in range(p["y"], p["y"] + p["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


def test_system_tables_show_workers_and_queries(observed, after_tpch):
    workers = rows(observed["uri"], "SELECT url, state, running_tasks, last_seen FROM system.workers ORDER BY url")
    assert sorted(w["url"] for w in workers) == sorted(observed["worker_urls"])
    assert all(w["state"] == "healthy" and w["running_tasks"] == 0 for w in workers)
    assert all(w["last_seen"] is not None for w in workers)
    queries = rows(
        observed["uri"],
        "SELECT state, stages, elapsed_ms FROM system.queries WHERE stages > 1",
    )
    assert len(queries) >= len(QUERIES)
    assert all(q["state"] == "ok" for q in queries)
    # The system schema is the server's: no client drops or adds to it.
    for ddl in ("DROP TABLE system.workers", "CREATE TABLE system.mine AS SELECT 1 AS a"):
        with pytest.raises(Exception, match="belongs to the server"):
            rows(observed["uri"], ddl)
    assert len(rows(observed["uri"], "SELECT url FROM system.workers")) == 2


def test_system_queries_show_each_statement_its_error_and_answer_size(observed, after_tpch):
    queries = rows(observed["uri"], "SELECT sql, state, error, rows, bytes FROM system.queries")
    by_sql = {q["sql"]: q for q in queries}
    for sql, why in FAILING.items():
        assert by_sql[sql]["state"] == "error", by_sql[sql]
        assert why in by_sql[sql]["error"], by_sql[sql]
    first = by_sql[tpch_query(1)]
    assert (first["state"], first["error"], first["rows"]) == ("ok", None, 4)
    assert first["bytes"] > 0


def test_system_tasks_show_every_task_of_a_query(observed, after_tpch):
    uri = observed["uri"]
    # The oldest run of q3: the one of the TPC-H run above.
    query = [
        q for q in rows(uri, "SELECT id, sql, stages FROM system.queries") if q["sql"] == tpch_query(3)
    ][-1]
    tasks = rows(uri, f"SELECT * FROM system.tasks WHERE query_id = '{query['id']}' ORDER BY stage, task")
    assert {t["stage"] for t in tasks} == set(range(query["stages"]))
    assert all(t["state"] == "succeeded" for t in tasks), tasks
    assert {t["worker"] for t in tasks} <= set(observed["worker_urls"])
    for t in tasks:
        assert t["ended"] >= t["started"] and t["compute_us"] is not None, t
        assert t["output_rows"] is not None and t["peak_memory_bytes"] is not None, t
    final = max(t["stage"] for t in tasks)
    answer = len(rows(uri, tpch_query(3)))
    assert sum(t["output_rows"] for t in tasks if t["stage"] == final) == answer
    assert sum(t["input_rows"] for t in tasks if t["stage"] == 0) == 0, "stage 0 reads tables"


def analyzed(uri, sql):
    """EXPLAIN ANALYZE of `sql`: (summary, {stage id: (header, output rows,
    {upstream stage: rows read}, task lines, text)})."""
    answer = rows(uri, f"EXPLAIN ANALYZE {sql}")
    summary, stages = answer[0], {}
    assert summary["plan_type"] == "Query"
    for row in answer[1:]:
        text = row["plan"]
        header = text.splitlines()[0]
        stage = int(re.match(r"Stage (\d+) ", header).group(1))
        totals = text.splitlines()[1]
        out = int(re.search(r"output_rows=(\d+)", totals).group(1))
        reads = {int(s): int(n) for s, n in re.findall(r"stage (\d+): (\d+)", totals)}
        tasks = [line for line in text.splitlines() if line.startswith("    task ")]
        stages[stage] = (header, out, reads, tasks, text)
    return summary["plan"], stages


@pytest.mark.parametrize("n", [3, 5, 9, 18])
def test_explain_analyze_shows_what_every_stage_and_task_did(observed, after_tpch, n):
    summary, stages = analyzed(observed["uri"], tpch_query(n))
    answer_rows = len(rows(observed["uri"], tpch_query(n)))
    assert summary.startswith(f"{answer_rows} rows in "), summary
    final = max(stages)
    assert stages[final][1] == answer_rows
    for stage, (header, out, _, tasks, text) in stages.items():
        count = int(re.search(r"tasks=(\d+)", header).group(1))
        assert len(tasks) == count, text
        for line in tasks:
            assert "succeeded, output_rows=" in line and "peak_memory_bytes=" in line, line
            assert any(w in line for w in observed["worker_urls"]), line
        # Every row a stage wrote was read by the stages reading it (a
        # broadcast once per reading task).
        readers = [s for s in stages.values() if stage in s[2]]
        if stage == final:
            continue
        assert readers, f"nobody read stage {stage}"
        read = sum(r[2][stage] for r in readers)
        if "output=broadcast" in header:
            expected = out * sum(int(re.search(r"tasks=(\d+)", r[0]).group(1)) for r in readers)
        else:
            expected = out
        if any("fetch=" in r[4] or "LimitExec" in r[4] for r in readers):
            # A reader under a LIMIT stops once it has its rows.
            assert 0 < read <= expected, f"stage {stage} wrote {out}, read {read}:\n{text}"
        else:
            assert read == expected, f"stage {stage} wrote {out}, its readers read {read}:\n{text}"


def test_explain_analyze_verbose_adds_each_tasks_operators(observed, after_tpch):
    answer = rows(observed["uri"], f"EXPLAIN ANALYZE VERBOSE {tpch_query(1)}")
    text = "\n".join(r["plan"] for r in answer)
    assert "task 0 attempt 0 operators:" in text
    assert re.search(r"AggregateExec: .*metrics=\[.*output_rows=\d+", text), text
    assert re.search(r"StageReadExec: .*metrics=\[.*bytes_received=\d+", text), text


def test_a_worker_leaving_the_file_gets_no_new_tasks(observed, after_tpch):
    kept = observed["worker_urls"][0]
    observed["workers_file"].write_text(kept + "\n")
    try:
        deadline = time.time() + 10
        while [w["url"] for w in rows(observed["uri"], "SELECT url FROM system.workers")] != [kept]:
            assert time.time() < deadline, "the worker was not dropped"
            time.sleep(0.1)
        left = observed["workers"][1]
        before = value(scrape(left), 'squadron_worker_tasks_total{outcome="succeeded"}')
        assert rows(observed["uri"], tpch_query(3))
        after = value(scrape(left), 'squadron_worker_tasks_total{outcome="succeeded"}')
        assert after == before, "a worker no longer listed got tasks"
    finally:
        observed["workers_file"].write_text("".join(f"{u}\n" for u in observed["worker_urls"]))


def test_every_flag_is_documented_and_every_documented_flag_exists():
    import subprocess

    doc = (REPO / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"`--([a-z0-9-]+)", doc)) - {"help", "version"}
    flags = set()
    for binary in ("squadron-server", "squadron-worker"):
        help_text = subprocess.run(
            [str(BIN_DIR / binary), "--help"], capture_output=True, text=True, check=True
        ).stdout
        flags |= set(re.findall(r"^\s+(?:-\w, )?--([a-z0-9-]+)", help_text, re.M))
    flags -= {"help", "version"}
    assert flags - documented == set(), f"undocumented: {sorted(flags - documented)}"
    assert documented - flags == set(), f"documented but gone: {sorted(documented - flags)}"


def test_worker_log_lines_carry_their_query_id(observed, after_tpch):
    ids = {q["id"] for q in rows(observed["uri"], "SELECT id FROM system.queries WHERE stages > 0")}
    finished = []
    for log in observed["worker_logs"]:
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if entry["fields"].get("message") == "task finished":
                finished.append(entry)
    assert finished, "no task lines logged"
    for entry in finished:
        assert entry["span"]["query_id"] in ids, entry
        assert entry["span"]["job_id"] in entry["fields"]["task"]
