"""The HTTP app over a stand-in model (fast, in-process): answers go to the request that asked, and load,
slowness and failures end in their status with one sentence, never in a stopped worker."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("starlette", reason="t2t-serve needs the serve extra: pip install 't2t[serve]'")
pytest.importorskip("httpx", reason="the app is driven by starlette's TestClient, which needs httpx")

from starlette.testclient import TestClient  # noqa: E402

from t2t.serve.app import create_app  # noqa: E402
from t2t.serve.service import Service  # noqa: E402
from t2t.serve.settings import ServeConfig  # noqa: E402


class StandIn:
    """A Predictor's surface: rows are the inputs' characters (0 pads); decoding upper-cases them once ``gate``
    opens, and ``started`` and ``batches`` record the rows of each batch as strings."""
    max_new_tokens = 8

    def __init__(self):
        self.gate = threading.Event()
        self.gate.set()
        self.started, self.batches = [], []

    def encode(self, texts, task):
        if any("explode" in text for text in texts):
            raise ValueError("a bug in tokenization")
        return [np.array([ord(c) for c in text]) for text in texts]

    def encode_targets(self, texts):
        return self.encode(texts, None)

    def decode(self, rows, decoding, desc="predict"):
        texts = [text_of(row) for row in rows]
        self.started.extend(texts)
        self.gate.wait(10)
        self.batches.append(texts)
        if "fail" in texts:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore lines")
        return [text.upper() for text in texts], len(rows)

    def score(self, inputs, targets):
        return [float(np.count_nonzero(i) - np.count_nonzero(t)) for i, t in zip(inputs, targets)]


def text_of(row) -> str:
    return "".join(chr(c) for c in row if c)


def client(**settings):
    predictor = StandIn()
    cfg = ServeConfig(checkpoint="run", **{"max_wait_ms": 20.0, "batch_size": 8, **settings})
    service = Service(predictor, cfg)
    return TestClient(create_app(service), raise_server_exceptions=False), predictor, service


def predict(http, *inputs, **fields):
    return http.post("/v1/predict", json={"inputs": list(inputs), **fields})


def test_concurrent_requests_share_batches_and_each_gets_its_own_outputs():
    http, predictor, service = client()
    with http:
        texts = [[f"r{i}-{j}" for j in range(i % 3 + 1)] for i in range(24)]
        with ThreadPoolExecutor(12) as pool:
            responses = list(pool.map(lambda inputs: predict(http, *inputs), texts))
        assert [r.status_code for r in responses] == [200] * 24
        assert [r.json()["outputs"] for r in responses] == [[t.upper() for t in inputs] for inputs in texts]
        assert max(len(batch) for batch in predictor.batches) > 1  # rows of several requests ran together
        metrics = http.get("/metrics").text
    assert 't2t_serve_requests_total{endpoint="predict",status="200"} 24.0' in metrics
    assert "t2t_serve_batch_size_count" in metrics and "t2t_serve_queue_depth 0.0" in metrics


def test_a_full_queue_is_503_with_retry_after():
    http, predictor, service = client(max_queue=1, max_wait_ms=0.0)
    with http:
        assert service.warm.wait(10)
        predictor.gate.clear()
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(predict, http, "running")  # the worker holds it
            while "running" not in predictor.started:
                time.sleep(0.01)
            waiting = pool.submit(predict, http, "waiting")  # the one request the queue holds
            while service.batcher.depth < 1:
                time.sleep(0.01)
            refused = predict(http, "refused")
            predictor.gate.set()
            assert running.result().json() == {"outputs": ["RUNNING"]}
            assert waiting.result().json() == {"outputs": ["WAITING"]}
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json() == {"error": "the server's queue is full (1 requests wait for the model); retry after 1 s."}


def test_a_request_past_its_deadline_is_504_and_the_next_is_answered():
    http, predictor, service = client(timeout=0.3)
    with http:
        assert service.warm.wait(10)
        predictor.gate.clear()
        late = predict(http, "slow")
        predictor.gate.set()
        assert predict(http, "next").json() == {"outputs": ["NEXT"]}
    assert late.status_code == 504
    assert late.json()["error"].startswith("the request was not answered within the server's timeout (0.3 s)")


def test_a_failing_batch_is_500_in_one_sentence_and_the_worker_goes_on():
    http, predictor, service = client()
    with http:
        failed = predict(http, "fail")
        broken = predict(http, "explode")
        assert predict(http, "fine").json() == {"outputs": ["FINE"]}
        assert service.batcher.alive
    assert failed.status_code == 500
    assert failed.json() == {"error": "the model failed on the batch of this request (CUDA error: an illegal memory "
                                      "access was encountered); the server still runs, so retry it."}
    assert broken.status_code == 500
    assert broken.json() == {"error": "the server failed on this request (ValueError); it still runs, so retry it "
                                      "or report the request."}


def test_score_answers_in_order():
    http, _, _ = client()
    with http:
        response = http.post("/v1/score", json={"inputs": ["abc", "a", "abcdef"], "targets": ["a", "a", "ab"]})
    assert response.json() == {"scores": [2.0, 0.0, 4.0]}


def test_health_readiness_and_refusals_are_json():
    http, _, service = client(max_inputs=2, max_input_chars=10)
    with http:
        assert service.warm.wait(10)
        assert http.get("/healthz").json() == {"status": "up"}
        assert http.get("/readyz").json() == {"status": "ready"}
        missing = http.get("/v2/predict")
        wrong_method = http.get("/v1/predict")
        too_big = http.post("/v1/predict", content=b"x" * (service.cfg.max_body_bytes + 1))
        service.draining = True
        draining = http.get("/readyz")
    assert (missing.status_code, wrong_method.status_code, too_big.status_code) == (404, 405, 413)
    assert missing.json()["error"].startswith("there is no GET /v2/predict; this server answers POST /v1/predict")
    assert wrong_method.json()["error"].startswith("/v1/predict does not take GET")
    assert too_big.json()["error"].startswith("the request body is larger than this server takes")
    assert draining.status_code == 503 and "draining" in draining.json()["error"]


def test_sampled_requests_never_share_a_batch_and_greedy_ones_do():
    """A sampled request's draws depend on its batch, so it is decoded alone (as t2t-predict decodes its lines)."""
    http, predictor, service = client(max_wait_ms=200.0)
    with http:
        assert service.warm.wait(10)
        predictor.gate.clear()
        with ThreadPoolExecutor(5) as pool:
            blocker = pool.submit(predict, http, "blocker")
            while "blocker" not in predictor.started:
                time.sleep(0.01)
            sampled = [pool.submit(predict, http, f"s{i}", temperature=0.5, seed=1) for i in range(2)]
            greedy = [pool.submit(predict, http, f"g{i}") for i in range(2)]
            while service.batcher.depth < 4:
                time.sleep(0.01)
            predictor.gate.set()
            assert [f.result().status_code for f in (blocker, *sampled, *greedy)] == [200] * 5
    batches = sorted(sorted(batch) for batch in predictor.batches if batch not in (["warm up"], ["blocker"]))
    assert batches == [["g0", "g1"], ["s0"], ["s1"]]
