"""What a client may send to t2t-serve: each refusal's status and its one sentence, checked without a server."""

import json

import pytest

from t2t.serve.requests import RequestError, parse_json, parse_predict, parse_score
from t2t.serve.settings import ServeConfig

CFG = ServeConfig(checkpoint="run", max_inputs=3, max_input_chars=20, max_request_length=16, max_beam_size=4)


def refusal(parse, body) -> tuple[int, str]:
    with pytest.raises(RequestError) as caught:
        parse(parse_json(body if isinstance(body, bytes) else json.dumps(body).encode()), CFG)
    message = caught.value.message
    assert message.count(". ") == 0 and message.endswith("."), message  # one sentence
    return caught.value.status, message


@pytest.mark.parametrize("body, status, start", [
    (b"{not json", 400, "the request body is not JSON (Expecting property name"),
    (b"\xff\xfe", 400, "the request body is not JSON (not UTF-8)"),
    ([1, 2], 400, "the request body is JSON a list, not an object"),
    ({"inputs": ["a"], "max_tokens": 3}, 400, "/v1/predict takes no field 'max_tokens'"),
    ({"inputs": ["a"], "examples": [{"a": 1}]}, 400, "the request has \"inputs\" and a task's \"examples\""),
    ({"beam_size": 2}, 400, "the request has neither \"inputs\" nor \"examples\""),
    ({"examples": [{"a": "b"}]}, 400, "task must be a task's name, got None"),
    ({"inputs": "a"}, 422, "inputs is a string, not a list"),
    ({"inputs": ["a", 5]}, 422, "inputs[1] is a number, not a string"),
    ({"task": 3, "examples": [{"a": "b"}]}, 422, "task must be a task's name, got 3"),
    ({"task": "rte", "examples": [{}]}, 422, "examples[0] is an empty object"),
    ({"task": "rte", "examples": ["a"]}, 422, "examples[0] is a string; send each example as an object"),
    ({"inputs": ["a"] * 4}, 413, "the request has 4 inputs, more than this server takes in one request (3)"),
    ({"inputs": ["a" * 21]}, 413, "inputs[0] has 21 characters, more than this server takes (20)"),
    ({"task": "rte", "examples": [{"s": "a" * 20}]}, 413, "examples[0] has 29 characters"),
    ({"inputs": ["a"], "beam_size": True}, 422, "beam_size must be an integer, got true"),
    ({"inputs": ["a"], "beam_size": 2.0}, 422, "beam_size must be an integer, got 2.0"),
    ({"inputs": ["a"], "temperature": "hot"}, 422, "temperature must be a number, got \"hot\""),
    ({"inputs": ["a"], "max_length": 17}, 422, "max_length must be between 1 and 16 on this server, got 17"),
    ({"inputs": ["a"], "max_length": 0}, 422, "max_length must be between 1 and 16 on this server, got 0"),
    ({"inputs": ["a"], "beam_size": 5}, 422, "beam_size must be between 1 and 4 on this server, got 5"),
    ({"inputs": ["a"], "top_k": -1}, 422, "top_k must be at least 0 on this server, got -1"),
    ({"inputs": ["a"], "seed": 2**63}, 422, "seed must be between 0 and"),
    ({"inputs": ["a"], "beam_size": 2, "temperature": 0.5}, 422, "beam_size 2 and temperature 0.5 ask for two"),
    ({"inputs": ["a"], "top_k": 5}, 422, "top_k 5 restricts sampling, which temperature 0 turns off"),
])
def test_predict_refusals_name_the_field_with_their_status(body, status, start):
    got_status, message = refusal(parse_predict, body)
    assert (got_status, message[:len(start)]) == (status, start), message


@pytest.mark.parametrize("body, status, start", [
    ({"inputs": ["a"]}, 400, "the request has no \"targets\""),
    ({"inputs": ["a"], "targets": ["x"], "beam_size": 2}, 400, "/v1/score takes no field 'beam_size'"),
    ({"inputs": ["a", "b"], "targets": ["x"]}, 422, "the request has 1 targets for 2 inputs"),
    ({"inputs": ["a"], "targets": [None]}, 422, "targets[0] is null, not a string"),
    ({"inputs": ["a"], "targets": ["x" * 21]}, 413, "targets[0] has 21 characters"),
])
def test_score_refusals(body, status, start):
    got_status, message = refusal(parse_score, body)
    assert (got_status, message[:len(start)]) == (status, start), message


def test_accepted_requests_keep_what_was_sent():
    request = parse_predict({"inputs": ["a", "b"], "beam_size": 2, "max_length": 16}, CFG)
    assert (request.inputs, request.decoding, request.count) == (["a", "b"], {"beam_size": 2, "max_length": 16}, 2)
    sampled = parse_predict({"inputs": ["a"], "temperature": 0.7, "top_k": 3, "seed": 2**63 - 1}, CFG)
    assert sampled.decoding == {"temperature": 0.7, "top_k": 3, "seed": 2**63 - 1}
    scored = parse_score({"task": "rte", "examples": [{"s": "x"}], "targets": ["yes"]}, CFG)
    assert (scored.task, scored.examples, scored.targets) == ("rte", [{"s": "x"}], ["yes"])
    default_task = ServeConfig(checkpoint="run", task="rte")
    assert parse_predict({"examples": [{"s": "x"}]}, default_task).task == "rte"  # the server's --task
