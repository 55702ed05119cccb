"""Training batches produced ahead, on a background thread, so that a step never waits on packing.

``BatchesAhead(batches, depth)`` wraps a resumable batch stream (``t2t.data.pipeline.TrainBatches``): one
producer thread calls ``batches.next_batch()`` and queues each batch together with the stream's state right
after it, at most ``depth`` batches ahead. The order is the stream's own (one producer), so a run sees the
same batches with or without it; ``state_dict()`` is the state after the last batch *taken*, not after the
last one produced, so a checkpoint resumes exactly where the trainer is. Packing is NumPy and Python; the
training step runs in torch's kernels, which release the GIL, so a thread overlaps the two.

A failure in the producer (a file that turns out to be unreadable) is raised in the consumer at the batch
where it happened.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterator, Mapping


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class BatchesAhead:
    """``batches`` with the next ``depth`` batches prepared on a background thread (see the module doc)."""

    def __init__(self, batches, depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        self.batches, self.depth = batches, depth
        self._state = batches.state_dict()
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def global_rows(self) -> list[int]:
        return self.batches.global_rows()

    def __iter__(self) -> Iterator[dict]:
        while True:
            yield self.next_batch()

    def next_batch(self) -> dict:
        if self._thread is None:
            self._start()
        item = self._queue.get()
        if isinstance(item, _Failure):
            self.close()
            raise item.error
        batch, self._state = item
        return batch

    def state_dict(self) -> dict:
        return self._state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.close()
        self.batches.load_state_dict(state)
        self._state = self.batches.state_dict()

    def close(self) -> None:
        """Stop the producer (the batches it prepared ahead are dropped; the state is the consumer's)."""
        if self._thread is None:
            return
        self._stop.set()
        while self._thread.is_alive():
            try:  # unblock a producer waiting for room in the queue
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.01)
        self._thread, self._queue = None, None
        self.batches.load_state_dict(self._state)  # the stream continues after the last batch taken

    def _start(self) -> None:
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self.depth)
        self._thread = threading.Thread(target=self._produce, args=(self._queue,), name="t2t-batches", daemon=True)
        self._thread.start()

    def _produce(self, out: queue.Queue) -> None:
        try:
            while not self._stop.is_set():
                batch = self.batches.next_batch()
                item = (batch, self.batches.state_dict())
                while not self._stop.is_set():
                    try:
                        out.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # handed to the consumer, raised at the batch it belongs to
            out.put(_Failure(e))

    def __del__(self):
        self.close()
