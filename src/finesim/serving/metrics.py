"""Prometheus metrics of one server, in a registry of its own (two apps in one process never share counters).

Exposed on ``GET /metrics`` in the Prometheus text format. Endpoint labels are the server's routes only (any
other path counts as ``other``), so a client cannot grow the label set.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


@dataclass(frozen=True)
class BatchStats:
    """What one micro-batch did: requests and items in it, inputs the model computed (``encoded``) in how many
    model calls, cache hits and misses over its distinct inputs; the tokens of its inputs (with a token budget,
    else None) and how many of its requests are pieces of a request split over several batches (``split``)."""

    requests: int
    items: int
    encoded: int
    model_calls: int
    cache_hits: int
    cache_misses: int
    tokens: int | None = None
    split: int = 0


class ServerMetrics:
    """The server's counters, gauges and histograms (all named ``finesim_*``)."""

    def __init__(self, endpoints: tuple[str, ...]) -> None:
        self.endpoints = frozenset(endpoints)
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "finesim_requests", "HTTP requests answered, by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "finesim_request_duration_seconds",
            "Time from a request's arrival to its response, by endpoint",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("finesim_requests_in_flight", "Scoring requests being answered now", registry=r)
        self.queue_depth = Gauge("finesim_batch_queue_depth", "Requests waiting for the batching worker", registry=r)
        self.batch_requests = Histogram(
            "finesim_batch_requests", "Requests per micro-batch", buckets=SIZE_BUCKETS, registry=r
        )
        self.batch_items = Histogram(
            "finesim_batch_items", "Model inputs (pairs or texts) per micro-batch", buckets=SIZE_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            "finesim_batch_tokens",
            "Tokens of the inputs per micro-batch (observed with a token budget, --max-batch-tokens)",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.split_pieces = Counter(
            "finesim_batch_split_pieces",
            "Pieces of requests split over several micro-batches (a request larger than what was left of the budget)",
            registry=r,
        )
        self.model_calls = Counter("finesim_model_calls", "Calls of the model (encode or predict)", registry=r)
        self.encoded = Counter("finesim_inputs_encoded", "Distinct inputs the model computed", registry=r)
        self.cache_hits = Counter("finesim_cache_hits", "Inputs answered from the cache", registry=r)
        self.cache_misses = Counter("finesim_cache_misses", "Inputs not in the cache", registry=r)
        self.items = Counter(
            "finesim_items_scored", "Pairs scored and texts embedded, by endpoint", ["endpoint"], registry=r
        )

    def endpoint(self, path: str) -> str:
        """The endpoint label of a request path."""
        return path if path in self.endpoints else "other"

    def observe_request(self, path: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        endpoint = self.endpoint(path)
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()
        self.latency.labels(endpoint=endpoint).observe(seconds)

    def observe_batch(self, stats: BatchStats) -> None:
        """Record one micro-batch."""
        self.batch_requests.observe(stats.requests)
        self.batch_items.observe(stats.items)
        if stats.tokens is not None:
            self.batch_tokens.observe(stats.tokens)
        self.split_pieces.inc(stats.split)
        self.model_calls.inc(stats.model_calls)
        self.encoded.inc(stats.encoded)
        self.cache_hits.inc(stats.cache_hits)
        self.cache_misses.inc(stats.cache_misses)

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text of every metric and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
