"""What the endpoints do, without HTTP: turn a checked request into token rows as t2t-predict does
(t2t.evaluation.predict: a task's examples through its preprocessing, inputs cut to ``input_length``), queue
them on the batcher, and wait for their answers.

Rows share a batch only when they are decoded the same way (:class:`BatchKey`: scoring apart from decoding,
and equal decoding settings). Greedy and beam decodes of one input do not depend on the other rows of its
batch (the encoder masks padding by token, the decoder's rows are independent; tests/serve prove it), so
they share batches across requests and still answer as t2t-predict does. A sampled request's draws depend on
its batch (one generator for the batch, as t2t-predict seeds it), so it runs alone, its inputs batched as
``t2t-predict --batch-size <max-batch-size> --seed <seed>`` batches the same lines: the same strings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from t2t.errors import T2TError, error_summary
from t2t.evaluation.evaluate import DecodingConfig
from t2t.evaluation.predict import Predictor, prediction_task, prepared_example, reference_examples, run_settings
from t2t.evaluation.results import jsonable
from t2t.models import distributed
from t2t.models.packed_rows import row_bucket
from t2t.serve.batcher import Batcher, Closed, Expired, Job, QueueFull
from t2t.serve.metrics import Metrics
from t2t.serve.requests import Request, RequestError
from t2t.serve.settings import ServeConfig

log = logging.getLogger(__name__)

WARM_UP_INPUT = "warm up"  # decoded once at start, so the first request does not pay for lazy set-up
RETRY_AFTER_SECONDS = 1
LENGTH_BUCKET = 16  # rows that share batches are padded to a multiple of this many tokens (``in_buckets``)


@dataclass(frozen=True)
class BatchKey:
    """What rows must agree on to share a batch."""
    kind: str                     # "generate" or "score"
    max_length: int = 0
    beam_size: int = 1
    temperature: float = 0.0
    top_k: int = 0
    seed: int = 0
    alone: int | None = None      # a sampled request's own number: it shares its batch with no other


class Service:
    def __init__(self, predictor: Predictor, cfg: ServeConfig):
        self.predictor, self.cfg = predictor, cfg
        self.metrics = Metrics()
        self.batcher = Batcher(self.run_batch, max_batch_size=cfg.batch_size, max_wait=cfg.max_wait_ms / 1000,
                               max_queue=cfg.max_queue, length=row_length, on_batch=self.metrics.observe_batch)
        self.metrics.queue_depth.set_function(lambda: self.batcher.depth)
        self.references: dict[str, list[dict]] = {}
        self.numbers = itertools.count()
        self.warm = threading.Event()
        self.draining = False

    # -- life ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker and queue one decode that warms the model up (``ready`` once it is done)."""
        self.batcher.start()
        rows = self.predictor.encode([WARM_UP_INPUT], None)
        self.batcher.submit(Job(rows, self.generate_key({}), deadline=float("inf"),
                                on_done=lambda results, error: self.warm.set()))

    @property
    def ready(self) -> bool:
        return self.warm.is_set() and self.batcher.alive and not self.draining

    def close(self) -> None:
        """Answer every queued request, then stop the worker."""
        self.draining = True
        self.batcher.close()

    # -- requests -------------------------------------------------------------------------------------------

    async def predict(self, request: Request) -> dict:
        """The decoded strings; for a task's examples also their values through the task's postprocessor
        (STS-B's "3.4" is 3.4, a GLUE label its class id), as t2t-eval scores them."""
        task, examples, rows = self.input_rows(request)
        key = self.generate_key(request.decoding)
        outputs = await self.answer(rows, key, whole=key.alone is not None)
        if task is None:
            return {"outputs": outputs}
        return {"outputs": outputs, "values": [jsonable(task.postprocess(text, example))
                                               for text, example in zip(outputs, examples)]}

    async def score(self, request: Request) -> dict:
        _, _, inputs = self.input_rows(request)
        rows = list(zip(inputs, self.predictor.encode_targets(request.targets)))
        return {"scores": await self.answer(rows, BatchKey("score"), whole=False)}

    def generate_key(self, decoding: dict) -> BatchKey:
        key = BatchKey("generate", max_length=decoding.get("max_length") or self.predictor.max_new_tokens,
                       **{name: decoding[name] for name in ("beam_size", "temperature", "top_k", "seed")
                          if name in decoding})
        return key if key.temperature == 0 else dataclasses.replace(key, alone=next(self.numbers))

    def input_rows(self, request: Request) -> tuple:
        """``(task, examples, rows)``: the token rows of a request's inputs (task and examples None), or its
        task, its examples through the task's preprocessing (``prepared_example``) and their inputs' rows."""
        if request.inputs is not None:
            return None, None, self.predictor.encode(request.inputs, None)
        try:
            task = prediction_task(request.task)
            reference = self.reference(task)
            examples = [prepared_example(raw, f"examples[{i}]", task, reference)
                        for i, raw in enumerate(request.examples)]
        except T2TError as e:
            raise RequestError(422, str(e)) from None
        return task, examples, self.predictor.encode([example["inputs"] for example in examples], task)

    def reference(self, task) -> list[dict]:
        """The task's first examples, read once (t2t.evaluation.predict.reference_examples)."""
        if task.name not in self.references:
            self.references[task.name] = reference_examples(task, self.cfg.data_dir)
        return self.references[task.name]

    async def answer(self, rows: list, key: BatchKey, whole: bool) -> list:
        """The results of ``rows``, once the worker ran them; the request's failures as RequestError."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def on_done(results, error):  # on the worker thread
            loop.call_soon_threadsafe(settle, future, results, error)

        job = Job(rows, key, deadline=time.monotonic() + self.cfg.timeout, on_done=on_done, whole=whole)
        try:
            self.batcher.submit(job)
        except QueueFull:
            raise RequestError(503, f"the server's queue is full ({self.cfg.max_queue} requests wait for the "
                                    f"model); retry after {RETRY_AFTER_SECONDS} s.",
                               {"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
        except Closed:
            raise RequestError(503, "the server is shutting down; send the request to another replica.",
                               {"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
        try:
            return await asyncio.wait_for(future, timeout=self.cfg.timeout)
        except (asyncio.TimeoutError, Expired):
            job.cancel()
            raise RequestError(504, f"the request was not answered within the server's timeout "
                                    f"({self.cfg.timeout:g} s); retry it, or send fewer inputs.") from None
        except Exception as e:  # noqa: BLE001 - a batch's failure is this request's 500, not the server's
            log.error("a batch failed: %s", e)
            raise RequestError(500, f"the model failed on the batch of this request ({error_summary(e)}); the "
                                    f"server still runs, so retry it.") from None

    # -- the worker's side -----------------------------------------------------------------------------------

    def run_batch(self, key: BatchKey, rows: list) -> list:
        """One batch on the worker thread: decoded strings, or scores. Rows that share batches go in shaped
        by ``in_buckets``; a sampled request's as t2t-predict batches them, which its draws depend on."""
        count = len(rows)
        if key.alone is None:
            rows = in_buckets(rows, self.cfg.batch_size)
        if key.kind == "score":
            return self.predictor.score([inputs for inputs, _ in rows], [targets for _, targets in rows])[:count]
        decoding = DecodingConfig(batch_size=len(rows) if key.alone is None else self.cfg.batch_size,
                                  beam_size=key.beam_size, temperature=key.temperature, top_k=key.top_k,
                                  seed=key.seed, max_length=key.max_length, compile=self.cfg.compile)
        started = time.perf_counter()
        texts, tokens = self.predictor.decode(rows, decoding, desc="serve")
        self.metrics.observe_tokens(tokens, time.perf_counter() - started)
        return texts[:count]


def in_buckets(rows: list, most: int) -> list:
    """``rows`` (token arrays, or scoring's (input, target) pairs) each padded to a multiple of
    ``LENGTH_BUCKET`` tokens, with copies of the first added up to ``row_bucket`` rows (at most ``most``;
    t2t.models.packed_rows). The model masks the padding as it masks a batch's, and rows never mix, so the
    outputs do not change (tests/serve); the kernels then see a few shapes instead of every (rows x tokens)
    one, and the caches that keep a kernel per shape (oneDNN's) stop growing after the first few hundred
    batches."""
    padded = [tuple(map(bucketed, row)) if isinstance(row, tuple) else bucketed(row) for row in rows]
    count = len(padded)
    size = min(row_bucket(count), max(most, count))
    return padded + padded[:1] * (size - len(padded))


def bucketed(row: np.ndarray) -> np.ndarray:
    """``row`` with padding (0) up to a multiple of ``LENGTH_BUCKET`` tokens."""
    return np.pad(row, (0, -len(row) % LENGTH_BUCKET))


def row_length(row) -> int:
    """A row's length for grouping: its input's tokens (a scored row is an input and a target)."""
    return len(row[0]) if isinstance(row, tuple) else len(row)


def settle(future: asyncio.Future, results: list | None, error: BaseException | None) -> None:
    if future.done():  # the request gave up waiting
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(results)


def load_service(cfg: ServeConfig) -> Service:
    """The service of ``cfg``'s run, ready to start: the run's settings and modules (imported only with the
    consent t2t-predict asks for: t2t.checkpoints.run.require_module_consent), its model on its device, and
    the data of ``cfg.task`` that requests' examples are checked against, read once here."""
    cfg = run_settings(cfg)
    distributed.use_threads(cfg.threads)
    task = prediction_task(cfg.task)
    service = Service(Predictor.load(cfg), cfg)
    if task is not None:
        service.reference(task)
    return service
