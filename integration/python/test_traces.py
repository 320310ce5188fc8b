"""Traces of queries over OTLP: a coordinator and two worker processes
started with --otlp-endpoint send their spans to a small OTLP/gRPC
collector run by the test. Each query is one trace, with the
coordinator's query span and a span from each worker for every task it
ran."""

import threading
import time
from collections import defaultdict
from concurrent import futures

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from conftest import BIN_DIR, Process, insecure_workers, rows, tpch_query


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every span it receives: (service, trace id, span)."""

    def __init__(self):
        self.spans = []
        self.lock = threading.Lock()

    def Export(self, request, context):  # noqa: N802 - the gRPC method
        with self.lock:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append((service, span.trace_id.hex(), span))
        return trace_service_pb2.ExportTraceServiceResponse()


def attributes(span):
    return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # Export batches quickly, so the test need not wait for the default 5 s.
    env = {"OTEL_BSP_SCHEDULE_DELAY": "100"}
    workers = insecure_workers(2, "--otlp-endpoint", endpoint, env=env)
    coordinator = Process(
        [str(BIN_DIR / "squadron-server"), "--listen", "127.0.0.1:0",
         "--workers", ",".join(w.url for w in workers),
         "--demo", "--demo-scale", "0.01",
         "--data-dir", str(tmp_path_factory.mktemp("traced")),
         "--coordinator-scan-limit", "0",
         "--otlp-endpoint", endpoint],
        env=env,
    )
    yield {"uri": coordinator.url, "collector": collector}
    coordinator.stop()
    for w in workers:
        w.stop()
    server.stop(0)


def test_each_query_is_one_trace_with_spans_from_the_coordinator_and_its_workers(traced):
    uri = traced["uri"]
    for n in (3, 5):
        assert rows(uri, tpch_query(n))
    queries = {
        q["id"]: q for q in rows(uri, "SELECT id, stages FROM system.queries WHERE stages > 0")
    }
    tasks = rows(uri, "SELECT query_id, worker FROM system.tasks")
    workers_of = defaultdict(set)
    count_of = defaultdict(int)
    for t in tasks:
        workers_of[t["query_id"]].add(t["worker"])
        count_of[t["query_id"]] += 1
    collector = traced["collector"]
    deadline = time.time() + 20
    while True:
        with collector.lock:
            spans = list(collector.spans)
        roots = {
            attributes(s)["query_id"]: (trace, s)
            for service, trace, s in spans
            if service == "squadron-server" and s.name == "query"
        }
        task_spans = [
            (trace, s) for service, trace, s in spans
            if service == "squadron-worker" and s.name == "task"
        ]
        if all(q in roots for q in queries) and len(task_spans) >= sum(count_of.values()):
            break
        assert time.time() < deadline, f"spans missing: {len(roots)} query spans, {len(task_spans)} task spans"
        time.sleep(0.2)
    assert len(queries) == 2
    for query_id, (trace, root) in roots.items():
        if query_id not in queries:
            continue
        assert not root.parent_span_id, "a query span is the root of its trace"
        own = [s for t, s in task_spans if t == trace]
        assert len(own) == count_of[query_id], (query_id, len(own), count_of[query_id])
        assert all(attributes(s)["query_id"] == query_id for s in own)
        # Every task span is a child of the query span, sent by a worker.
        assert all(s.parent_span_id == root.span_id for s in own)
    # Traces do not mix: each query's trace id is its own.
    traces = {roots[q][0] for q in queries}
    assert len(traces) == len(queries)
