"""TLS and authentication end to end: a coordinator with client TLS and
users, two worker processes over mutual TLS, and the clients (ADBC,
pyarrow) logging in with a password or a bearer token. Every rejection
leaves the server answering, and no secret reaches its log."""

import base64
import hashlib
import hmac
import json
import subprocess
import time

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow.flight as flight
import pytest
from adbc_driver_flightsql import DatabaseOptions

from answers import assert_same
from conftest import BIN_DIR, Process, free_port, oracle_over, scrape, tpch_query

PASSWORD = "correct horse battery staple"
OTHER_PASSWORD = "another long passphrase"
JWT_SECRET = b"an external issuer's secret, 32+ bytes long"


def _run(*args, stdin=None):
    return subprocess.run(
        [str(BIN_DIR / "squadron-server"), *args],
        input=stdin, capture_output=True, text=True, check=True,
    )


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    certs = tmp_path_factory.mktemp("certs")
    _run("certs", "generate", "--out", str(certs))
    users = certs / "users.toml"
    _run("users", "add", "--file", str(users), "--name", "alice", stdin=PASSWORD + "\n")
    _run("users", "add", "--file", str(users), "--name", "bob", stdin=OTHER_PASSWORD + "\n")
    secret = certs / "jwt.secret"
    secret.write_bytes(JWT_SECRET)
    cluster = [
        "--cluster-ca", str(certs / "ca.pem"),
        "--cluster-cert", str(certs / "worker.pem"),
        "--cluster-key", str(certs / "worker-key.pem"),
    ]
    workers = [
        Process([str(BIN_DIR / "squadron-worker"), "--listen", "127.0.0.1:0", *cluster])
        for _ in range(2)
    ]
    data = tmp_path_factory.mktemp("secure-data")
    log = certs / "server.log"
    metrics = free_port()
    server = Process(
        [
            str(BIN_DIR / "squadron-server"),
            "--listen", "127.0.0.1:0",
            "--workers", ",".join(w.url for w in workers),
            "--demo", "--demo-scale", "0.01",
            "--data-dir", str(data),
            "--tls-cert", str(certs / "server.pem"),
            "--tls-key", str(certs / "server-key.pem"),
            "--cluster-ca", str(certs / "ca.pem"),
            "--cluster-cert", str(certs / "coordinator.pem"),
            "--cluster-key", str(certs / "coordinator-key.pem"),
            "--users", str(users),
            "--jwt-hs256-secret-file", str(secret),
            "--jwt-issuer", "test-idp",
            "--metrics-listen", f"127.0.0.1:{metrics}",
        ],
        stderr=log,
        env={"RUST_LOG": "debug"},
    )
    port = server.url.rsplit(":", 1)[1]
    yield {
        "uri": f"grpc+tls://localhost:{port}",
        "ca": (certs / "ca.pem").read_text(),
        "data": data / "tpch-sf0.01",
        "log": log,
        "workers": workers,
        "metrics": metrics,
    }
    server.stop()
    for w in workers:
        w.stop()


def adbc(secure, **kwargs):
    options = {DatabaseOptions.TLS_ROOT_CERTS.value: secure["ca"], **kwargs}
    return flightsql.connect(secure["uri"], db_kwargs=options)


def pyarrow_client(secure):
    return flight.FlightClient(secure["uri"], tls_root_certs=secure["ca"].encode())


def external_token(sub, exp_in=300, key=JWT_SECRET, iss="test-idp"):
    """An HS256 JWT as an external identity provider would sign it."""
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sub": sub, "iss": iss, "iat": now, "exp": now + exp_in}).encode())
    signature = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{b64(signature)}"


def statement_command(sql):
    from test_flight_sql_surface import _command, _varint
    query = b"\x0a" + _varint(len(sql)) + sql.encode()
    return flight.FlightDescriptor.for_command(_command("CommandStatementQuery", query))


def assert_healthy(secure):
    with adbc(secure, username="alice", password=PASSWORD) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM region")
        assert cur.fetchall() == [(5,)]


@pytest.fixture(scope="module")
def secure_oracle(secure):
    return oracle_over(secure["data"])


@pytest.mark.parametrize("n", [1, 3, 5])
def test_adbc_password_login_runs_tpch_over_mutual_tls(secure, secure_oracle, n):
    with adbc(secure, username="alice", password=PASSWORD) as conn, conn.cursor() as cur:
        cur.execute(tpch_query(n))
        got = cur.fetch_arrow_table()
    assert_same(got, secure_oracle.sql(tpch_query(n)).to_arrow_table(), ordered=True)


def test_bearer_header_without_handshake(secure):
    token = external_token("carol")
    options = {"adbc.flight.sql.authorization_header": f"Bearer {token}"}
    with adbc(secure, **options) as conn, conn.cursor() as cur:
        cur.execute("SELECT 42 AS answer")
        assert cur.fetchall() == [(42,)]


def test_pyarrow_login_and_query(secure):
    client = pyarrow_client(secure)
    header = client.authenticate_basic_token("alice", PASSWORD)
    assert header[0] == b"authorization" and header[1].startswith(b"Bearer ")
    options = flight.FlightCallOptions(headers=[header])
    info = client.get_flight_info(statement_command("SELECT 7 AS seven"), options)
    table = client.do_get(info.endpoints[0].ticket, options).read_all()
    assert table.column("seven").to_pylist() == [7]


# Tokens are made when each test runs, not when tests are collected: the
# suite runs for longer than a token lives, and an expired token would be
# refused for its expiry rather than for the fault under test.
@pytest.mark.parametrize(
    "make_token, reason",
    [
        (lambda: None, "no credentials"),
        (lambda: external_token("carol", exp_in=-60), "expired"),
        (lambda: external_token("carol", key=b"another key, also long enough......"), "signature"),
        (lambda: external_token("carol", iss="someone-else"), "issuer"),
        (lambda: "not.a.token", "not valid"),
    ],
    ids=["none", "expired", "signature", "issuer", "garbage"],
)
def test_bad_tokens_are_unauthenticated(secure, make_token, reason):
    token = make_token()
    refused = 'squadron_auth_failures_total{kind="token"}'
    before = scrape(secure["metrics"])[refused]
    client = pyarrow_client(secure)
    headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
    with pytest.raises(flight.FlightUnauthenticatedError) as err:
        client.get_flight_info(
            statement_command("SELECT 1"), flight.FlightCallOptions(headers=headers)
        )
    assert reason in str(err.value), str(err.value)
    assert scrape(secure["metrics"])[refused] == before + 1
    assert_healthy(secure)


def test_wrong_password_is_unauthenticated(secure):
    failed = 'squadron_auth_failures_total{kind="login"}'
    before = scrape(secure["metrics"])[failed]
    with pytest.raises(flightsql.Error) as err:
        with adbc(secure, username="alice", password="wrong") as conn:
            conn.cursor().execute("SELECT 1")
    assert "UNAUTHENTICATED" in str(err.value), str(err.value)
    assert scrape(secure["metrics"])[failed] >= before + 1
    assert_healthy(secure)


def test_plaintext_client_against_the_tls_port(secure):
    port = secure["uri"].rsplit(":", 1)[1]
    client = flight.FlightClient(f"grpc://localhost:{port}")
    with pytest.raises(flight.FlightError):
        client.get_flight_info(statement_command("SELECT 1"), flight.FlightCallOptions(timeout=5))
    assert_healthy(secure)


def test_a_worker_refuses_clients_without_a_cluster_certificate(secure):
    # The worker's port speaks TLS and demands a client certificate.
    url = secure["workers"][0].url.replace("https://", "grpc+tls://")
    client = flight.FlightClient(url, tls_root_certs=secure["ca"].encode(),
                                 override_hostname="squadron-cluster")
    with pytest.raises(flight.FlightError):
        client.do_get(flight.Ticket(b"any stream"), flight.FlightCallOptions(timeout=5)).read_all()
    assert_healthy(secure)


def test_another_users_ticket_is_not_found(secure):
    alice, bob = pyarrow_client(secure), pyarrow_client(secure)
    as_alice = flight.FlightCallOptions(headers=[alice.authenticate_basic_token("alice", PASSWORD)])
    as_bob = flight.FlightCallOptions(headers=[bob.authenticate_basic_token("bob", OTHER_PASSWORD)])
    info = alice.get_flight_info(statement_command("SELECT 'secret' AS s"), as_alice)
    ticket = info.endpoints[0].ticket
    # pyarrow raises NOT_FOUND as a KeyError.
    with pytest.raises(KeyError) as err:
        bob.do_get(ticket, as_bob).read_all()
    assert "unknown statement handle" in str(err.value), str(err.value)
    # An altered byte is refused just the same, even for its owner.
    raw = bytearray(ticket.ticket)
    raw[-3] ^= 0x01
    with pytest.raises((KeyError, flight.FlightError)):
        alice.do_get(flight.Ticket(bytes(raw)), as_alice).read_all()
    # The owner still reads it.
    assert alice.do_get(ticket, as_alice).read_all().column("s").to_pylist() == ["secret"]


def test_current_user_answers_each_caller(secure):
    # Both users share the server's session (neither changed a setting), and
    # the same text twice would re-use a kept plan: each still sees itself.
    sql = "SELECT current_user AS me, count(*) AS n FROM nation WHERE n_name <> current_user"
    for user, password in [("alice", PASSWORD), ("bob", OTHER_PASSWORD), ("alice", PASSWORD)]:
        with adbc(secure, username=user, password=password) as conn, conn.cursor() as cur:
            for _ in range(2):
                cur.execute(sql)
                assert cur.fetchall() == [(user, 25)]
            cur.execute("SELECT session_user")
            assert cur.fetchall() == [(user,)]
            # A prepared statement (bound parameters) answers its preparer.
            cur.execute("SELECT current_user, n_name FROM nation WHERE n_nationkey = ?", parameters=(7,))
            assert cur.fetchall() == [(user, "GERMANY")]


def test_no_secret_reaches_the_log(secure):
    assert_healthy(secure)
    token = external_token("carol")
    client = pyarrow_client(secure)
    header = client.authenticate_basic_token("alice", PASSWORD)
    client.get_flight_info(
        statement_command("SELECT 1"),
        flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())]),
    )
    log = secure["log"].read_text()
    assert "logged in" in log, "the log is the server's debug log"
    for secret in [PASSWORD, OTHER_PASSWORD, token, header[1].decode().split()[1], JWT_SECRET.decode()]:
        assert secret not in log
    assert "argon2id" not in log


def test_the_query_ui_refuses_a_request_without_credentials(secure):
    import urllib.error
    import urllib.request

    base = f"http://127.0.0.1:{secure['metrics']}"

    def get(path, authorization=None):
        request = urllib.request.Request(base + path)
        if authorization:
            request.add_header("Authorization", authorization)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def basic(user, password):
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    for path in ("/ui", "/ui/api/queries", "/ui/api/workers", "/ui/assets/ui.js"):
        status, headers, _ = get(path)
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith("Basic"), path
    assert get("/ui/api/queries", basic("alice", "wrong"))[0] == 401
    assert get("/ui/api/queries", "Bearer not-a-token")[0] == 401
    status, _, body = get("/ui/api/queries", basic("alice", PASSWORD))
    assert status == 200 and body.startswith(b"[")
    assert get("/ui/api/queries", "Bearer " + external_token("carol"))[0] == 200
    # The scraper's endpoint stays open, as before.
    assert get("/metrics")[0] == 200
