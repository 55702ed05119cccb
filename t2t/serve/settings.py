"""``t2t-serve``'s settings: t2t-predict's (checkpoint, decoding defaults, device, precision, trust) and the
server's own (where it listens, how it batches, what it refuses)."""

from __future__ import annotations

from dataclasses import dataclass

from t2t import config
from t2t.evaluation.predict import PredictConfig

# JSON writes a character in at most 6 bytes (\uXXXX); a request's other fields fit in what is added.
BYTES_PER_CHAR = 6
BODY_OVERHEAD = 64 * 1024


@dataclass
class ServeConfig(PredictConfig):
    host: str = "127.0.0.1"           # address to listen on (0.0.0.0: every interface, e.g. behind a load balancer)
    port: int = 8000                  # TCP port to listen on (0: any free one, printed at start)
    max_wait_ms: float = 5.0          # how long a waiting input waits for others to share its batch
    max_queue: int = 256              # requests waiting for the model at most; one more is answered 503
    timeout: float = 30.0             # seconds a request may take from arrival to answer; later: 504
    max_inputs: int = 64              # inputs (or task examples) in one request at most; more: 413
    max_input_chars: int = 10000      # characters of one input or target (an example's JSON) at most; more: 413
    max_request_length: int = 512     # most tokens a request may ask to decode (its max_length)
    max_beam_size: int = 8            # most beams a request may ask for (its beam_size)
    threads: int = 0                  # CPU threads; 0: OMP_NUM_THREADS or all cores
    keep_alive: float = 75.0          # seconds an idle connection stays open: longer than a load balancer's (60)

    def __post_init__(self):
        super().__post_init__()
        config.check(self, positive=("max_queue", "timeout", "max_inputs", "max_input_chars", "max_request_length",
                                     "max_beam_size"),
                     non_negative=("port", "max_wait_ms", "threads", "keep_alive"))

    @property
    def max_body_bytes(self) -> int:
        """The largest request body read: ``max_inputs`` inputs and as many targets of ``max_input_chars``."""
        return 2 * self.max_inputs * self.max_input_chars * BYTES_PER_CHAR + BODY_OVERHEAD
