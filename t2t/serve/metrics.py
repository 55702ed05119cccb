"""The server's Prometheus metrics (``GET /metrics``), in a registry of its own rather than the process-wide one,
so that two apps in one process (tests) count apart.

Rates (requests/s, tokens/s) are Prometheus's ``rate()`` of the counters; ``t2t_serve_tokens_per_second`` is the
last batch's own, for a dashboard without a query language.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = CONTENT_TYPE_LATEST  # of the text exposition format GET /metrics answers in

# Request latency from a few ms (one short greedy decode on a GPU) to the default deadline and beyond.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("t2t_serve_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=self.registry)
        self.latency = Histogram("t2t_serve_request_seconds", "Time from a request's arrival to its answer",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_size = Histogram("t2t_serve_batch_size", "Rows (inputs) run together in one batch",
                                    buckets=BATCH_SIZE_BUCKETS, registry=self.registry)
        self.batch_seconds = Histogram("t2t_serve_batch_seconds", "Time the model took for one batch",
                                       buckets=LATENCY_BUCKETS, registry=self.registry)
        self.queue_depth = Gauge("t2t_serve_queue_depth", "Requests waiting for the model", registry=self.registry)
        self.tokens = Counter("t2t_serve_generated_tokens", "Tokens decoded (each row up to its EOS, the copies "
                              "that fill a batch to its bucket included)",
                              registry=self.registry)
        self.tokens_per_second = Gauge("t2t_serve_tokens_per_second", "Tokens decoded per second in the last "
                                       "decoding batch", registry=self.registry)

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def observe_batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)

    def observe_tokens(self, tokens: int, seconds: float) -> None:
        self.tokens.inc(tokens)
        self.tokens_per_second.set(tokens / max(seconds, 1e-9))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
