"""What a client may send, checked before anything reaches the model; each refusal is one sentence with its
HTTP status: 400 for what is not a request of this endpoint (not JSON, not an object, an unknown or missing
field), 413 for more than the server takes (inputs per request, characters per input), 422 for a field of
the wrong type or range.

``/v1/predict``: ``{"inputs": [str, ...]}`` or ``{"task": NAME, "examples": [{raw fields}, ...]}``, with the
decoding settings of t2t-predict under their setting names (``max_length``, ``beam_size``, ``temperature``,
``top_k``, ``seed``). ``/v1/score``: the same inputs (or task examples) and ``"targets": [str, ...]``, one each.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from t2t.errors import T2TError
from t2t.evaluation.evaluate import DecodingConfig
from t2t.serve.settings import ServeConfig

INPUT_FIELDS = ("inputs", "task", "examples")
DECODING_FIELDS = ("max_length", "beam_size", "temperature", "top_k", "seed")
SEED_LIMIT = 2**63  # torch.Generator.manual_seed takes seeds below this


class RequestError(Exception):
    """A request answered with ``status`` and one sentence (``{"error": message}``)."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass(frozen=True)
class Request:
    inputs: list[str] | None = None          # input strings, or
    task: str | None = None                  # a task's name and
    examples: list[dict] | None = None       # its raw examples
    targets: list[str] | None = None         # /v1/score: one target per input
    decoding: dict = field(default_factory=dict)  # the decoding settings given

    @property
    def count(self) -> int:
        return len(self.inputs if self.inputs is not None else self.examples)


def parse_json(body: bytes) -> dict:
    try:
        data = json.loads(body.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        reason = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise RequestError(400, f"the request body is not JSON ({reason}); send a JSON object such as "
                                f'{{"inputs": ["..."]}}.') from None
    if not isinstance(data, dict):
        raise RequestError(400, f"the request body is JSON {kind(data)}, not an object; send a JSON object such "
                                f'as {{"inputs": ["..."]}}.')
    return data


def parse_predict(data: dict, cfg: ServeConfig) -> Request:
    check_fields(data, (*INPUT_FIELDS, *DECODING_FIELDS), "/v1/predict")
    return Request(**what_to_run(data, cfg), decoding=decoding_settings(data, cfg))


def parse_score(data: dict, cfg: ServeConfig) -> Request:
    check_fields(data, (*INPUT_FIELDS, "targets"), "/v1/score")
    request = Request(**what_to_run(data, cfg))
    if "targets" not in data:
        raise RequestError(400, 'the request has no "targets"; /v1/score scores one target string per input.')
    targets = strings(data["targets"], "targets", cfg)
    if len(targets) != request.count:
        raise RequestError(422, f"the request has {len(targets)} targets for {request.count} inputs; send one "
                                f"target per input.")
    return Request(request.inputs, request.task, request.examples, targets)


def check_fields(data: dict, allowed: tuple[str, ...], endpoint: str) -> None:
    unknown = [name for name in data if name not in allowed]
    if unknown:
        raise RequestError(400, f"{endpoint} takes no field {unknown[0]!r} (its fields: {', '.join(allowed)}); "
                                f"remove it.")


def what_to_run(data: dict, cfg: ServeConfig) -> dict:
    """``inputs``, or ``task`` and ``examples``; ``examples`` alone use the server's --task."""
    if "inputs" in data:
        if "task" in data or "examples" in data:
            raise RequestError(400, 'the request has "inputs" and a task\'s "examples"; send one of them.')
        return {"inputs": strings(data["inputs"], "inputs", cfg)}
    if "examples" not in data:
        raise RequestError(400, 'the request has neither "inputs" nor "examples"; send {"inputs": ["..."]} or '
                                '{"task": NAME, "examples": [{raw fields}]}.')
    task = data.get("task", cfg.task)
    if not isinstance(task, str) or not task:
        raise RequestError(422 if "task" in data else 400,
                           f"task must be a task's name, got {task!r}; name the task the examples belong to.")
    return {"task": task, "examples": examples(data["examples"], cfg)}


def strings(value, name: str, cfg: ServeConfig) -> list[str]:
    items = items_of(value, name, "strings", cfg)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise RequestError(422, f"{name}[{i}] is {kind(item)}, not a string; send {name} as strings.")
        check_size(len(item), f"{name}[{i}]", cfg)
    return items


def examples(value, cfg: ServeConfig) -> list[dict]:
    items = items_of(value, "examples", "objects of a task's raw fields", cfg)
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not item:
            what = "an empty object" if isinstance(item, dict) else kind(item)
            raise RequestError(422, f"examples[{i}] is {what}; send each example as an object of the task's raw "
                                    f"fields (t2t-show --task NAME --raw prints some).")
        check_size(len(json.dumps(item)), f"examples[{i}]", cfg)
    return items


def items_of(value, name: str, what: str, cfg: ServeConfig) -> list:
    if not isinstance(value, list):
        raise RequestError(422, f"{name} is {kind(value)}, not a list; send {name} as a list of {what}.")
    if len(value) > cfg.max_inputs:
        raise RequestError(413, f"the request has {len(value)} {name}, more than this server takes in one request "
                                f"({cfg.max_inputs}); split it into several requests.")
    return value


def check_size(chars: int, name: str, cfg: ServeConfig) -> None:
    if chars > cfg.max_input_chars:
        raise RequestError(413, f"{name} has {chars} characters, more than this server takes "
                                f"({cfg.max_input_chars}); send a shorter one.")


def decoding_settings(data: dict, cfg: ServeConfig) -> dict:
    """The decoding settings given, checked (types, ranges, this server's limits, and together as
    t2t-predict checks its flags)."""
    given = {name: data[name] for name in DECODING_FIELDS if name in data}
    for name, value in given.items():
        number = name == "temperature"
        if isinstance(value, bool) or not isinstance(value, (int, float) if number else int) or (
                number and not math.isfinite(value)):
            raise RequestError(422, f"{name} must be {'a number' if number else 'an integer'}, got "
                                    f"{json.dumps(value)}.")
    limits = {"max_length": (1, cfg.max_request_length), "beam_size": (1, cfg.max_beam_size),
              "temperature": (0, math.inf), "top_k": (0, math.inf), "seed": (0, SEED_LIMIT - 1)}
    for name, value in given.items():
        low, high = limits[name]
        if not low <= value <= high:
            bound = f"between {low} and {high}" if high < math.inf else f"at least {low}"
            raise RequestError(422, f"{name} must be {bound} on this server, got {value}.")
    try:
        DecodingConfig(**given)
    except T2TError as e:
        raise RequestError(422, str(e)) from None
    return given


def kind(value) -> str:
    """A JSON value's kind, as an error names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
