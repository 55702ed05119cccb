"""t2t-serve end to end: a tiny trained run served by the real command on a free localhost port, driven with
httpx; its answers are t2t-predict's, whatever batches they were decoded in; SIGTERM drains and exits 0."""

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

httpx = pytest.importorskip("httpx", reason="the server is driven with httpx (pip install 't2t[test]')")
pytest.importorskip("starlette", reason="t2t-serve needs the serve extra: pip install 't2t[serve]'")

from t2t import config  # noqa: E402
from t2t.checkpoints import run as run_lib  # noqa: E402
from t2t.cli import predict_main  # noqa: E402
from t2t.errors import T2TError  # noqa: E402
from t2t.evaluation.evaluate import DecodingConfig  # noqa: E402
from t2t.evaluation.predict import PredictConfig, Predictor, run_settings  # noqa: E402
from t2t.serve.service import bucketed, load_service  # noqa: E402
from t2t.serve.settings import ServeConfig  # noqa: E402
from t2t.testing import tiny_vocabulary  # noqa: E402
from t2t.training.train import TrainConfig, train  # noqa: E402

pytestmark = pytest.mark.integration  # a training run and the server in a subprocess

SENTENCES = ["the cat sat on the mat", "a dog ran in the park", "the baker opened her shop",
             "the river runs to the sea", "children play in the garden", "the old man reads a book"]
TASK_MODULE = f'''
from t2t import register_task
from t2t.testing import in_memory_task


def copy_inputs(example):
    return {{"inputs": "copy: " + example["text"], "targets": example["text"]}}


def words_and_copied(text, example=None, is_target=False):
    return {{"words": len(text.split()), "copied": text == example["targets_pretokenized"]}}


register_task(in_memory_task("serve_copy", {{"train": [{{"text": s}} for s in {SENTENCES!r}]}},
                             preprocessors=[copy_inputs], postprocess_fn=words_and_copied))
'''
INPUTS = ["copy: the cat sat on the mat", "copy: a dog", "copy: the river runs to the sea and the old man reads",
          "copy: children", "copy: the baker opened her shop in the park", "copy: a book"]
SERVER_FLAGS = ["--max-length", "16", "--max-batch-size", "8", "--max-wait-ms", "50", "--max-inputs", "8",
                "--max-input-chars", "200", "--threads", "1"]
GREEDY = {}  # input → t2t-predict's greedy output, as the first test found them
START_SECONDS = 180  # importing torch and loading on a busy CI machine


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A tiny T5 trained 12 steps to copy its input, with its task in a --module file the run keeps."""
    root = tmp_path_factory.mktemp("serve")
    (root / "serve_tasks.py").write_text(TASK_MODULE)
    (root / "tiny.yaml").write_text(json.dumps(dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                    num_heads=4, feed_forward_proj="gated-gelu",
                                                    tie_word_embeddings=False)))
    settings = config.from_dict(TrainConfig, dict(
        mixture="serve_copy", modules=[str(root / "serve_tasks.py")], model=str(root / "tiny.yaml"),
        vocab=str(tiny_vocabulary().path), output_dir=str(root / "run"), train_steps=12, batch_size=6,
        input_length=16, target_length=16, pack=False, log_every=12, save_every=12, seed=1, dropout_rate=0.0,
        optimizer={"name": "adamw", "learning_rate": 1e-2}, threads=1))
    threads = torch.get_num_threads()
    try:
        train(settings)
    finally:
        torch.set_num_threads(threads)
    return root / "run"


@pytest.fixture
def one_thread():
    """A model this small decodes fastest on one thread (more only wait on each other on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(trained_run):
    """``(base url, process)`` of ``t2t-serve`` on the trained run, once it says it is ready."""
    port = free_port()
    code = "import sys; from t2t.cli import serve_main; sys.exit(serve_main())"
    process = subprocess.Popen([sys.executable, "-c", code, "--checkpoint", str(trained_run), "--port", str(port),
                                *SERVER_FLAGS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = []
    threading.Thread(target=lambda: output.extend(process.stdout), daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    while not ready(url):
        assert process.poll() is None and time.monotonic() < deadline, "".join(output)
        time.sleep(0.2)
    process.output = output
    yield url, process
    if process.poll() is None:
        process.kill()
        process.wait()


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def predicted(capsys, run: Path, lines: list[str], *flags: str) -> list[str]:
    """What t2t-predict prints for ``lines``."""
    path = run.parent / "inputs.txt"
    path.write_text("".join(line + "\n" for line in lines))
    capsys.readouterr()
    assert predict_main(["--checkpoint", str(run), "--input", str(path), "--max-length", "16", *flags]) == 0
    return capsys.readouterr().out.splitlines()


def post(url: str, path: str, body, **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}{path}", content=content, timeout=60, **kwargs)


def greedy_answers(inputs: list[str]) -> list[str]:
    return [GREEDY[text] for text in inputs]


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ") or
               line.startswith(name + "{"))


def test_batched_answers_are_t2t_predicts_for_greedy_beam_and_sampling(server, trained_run, capsys, one_thread):
    url, _ = server
    assert httpx.get(f"{url}/healthz").json() == {"status": "up"}
    greedy = {}

    def ask(i):  # three requests at once: their rows share batches
        greedy[i] = post(url, "/v1/predict", {"inputs": INPUTS[2 * i:2 * i + 2]})
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status_code for r in greedy.values()] == [200] * 3
    answers = [out for i in range(3) for out in greedy[i].json()["outputs"]]
    assert answers == predicted(capsys, trained_run, INPUTS)
    GREEDY.update(zip(INPUTS, answers))
    assert metric(url, "t2t_serve_requests_total") >= 3

    beam = post(url, "/v1/predict", {"inputs": INPUTS, "beam_size": 2}).json()["outputs"]
    assert beam == predicted(capsys, trained_run, INPUTS, "--beam-size", "2")
    sampled = post(url, "/v1/predict", {"inputs": INPUTS, "temperature": 0.9, "top_k": 20, "seed": 5})
    assert sampled.json()["outputs"] == predicted(capsys, trained_run, INPUTS, "--temperature", "0.9", "--top-k",
                                                  "20", "--seed", "5", "--batch-size", "8")
    assert sampled.json()["outputs"] != beam  # sampling from a barely trained model: not the likeliest strings


def test_task_examples_go_through_the_tasks_preprocessing_and_scores_are_the_models(server, trained_run, one_thread):
    url, _ = server
    by_task = post(url, "/v1/predict", {"task": "serve_copy", "examples": [{"text": s} for s in SENTENCES[:2]]})
    by_inputs = post(url, "/v1/predict", {"inputs": ["copy: " + s for s in SENTENCES[:2]]}).json()
    outputs = by_inputs["outputs"]
    assert by_inputs == {"outputs": outputs} and len(outputs) == 2
    # a task's examples are also answered with the values its postprocessor makes of each output and example
    assert by_task.json() == {"outputs": outputs, "values": [{"words": len(text.split()), "copied": text == s}
                                                              for text, s in zip(outputs, SENTENCES)]}
    scored = post(url, "/v1/score", {"inputs": [INPUTS[0]] * 2, "targets": [SENTENCES[0], SENTENCES[1]]})
    scores = scored.json()["scores"]
    predictor = Predictor.load(run_settings(PredictConfig(checkpoint=str(trained_run))))
    expected = predictor.score(predictor.encode([INPUTS[0]] * 2, None), predictor.encode_targets(SENTENCES[:2]))
    assert scores == pytest.approx(expected, abs=1e-4)
    assert scores[0] > scores[1]  # the copy it was trained on is the likelier target


@pytest.mark.parametrize("body, status, start", [
    (b'{"inputs": ["a"', 400, "the request body is not JSON"),
    ({"inputs": ["a"], "beams": 2}, 400, "/v1/predict takes no field 'beams'"),
    ({"inputs": ["a"] * 9}, 413, "the request has 9 inputs, more than this server takes in one request (8)"),
    ({"inputs": ["a" * 201]}, 413, "inputs[0] has 201 characters"),
    ({"inputs": [["a"]]}, 422, "inputs[0] is a list, not a string"),
    ({"inputs": ["a"], "max_length": 4096}, 422, "max_length must be between 1 and 512 on this server"),
    ({"task": "serve_cpy", "examples": [{"text": "a"}]}, 422, "unknown task or mixture 'serve_cpy'"),
    ({"task": "serve_copy", "examples": [{"txt": "a"}]}, 422, "examples[0] has field 'txt', which task serve_copy"),
])
def test_bad_requests_are_4xx_in_one_sentence_and_the_server_goes_on(server, body, status, start):
    url, _ = server
    response = post(url, "/v1/predict", body)
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"} and response.json()["error"].startswith(start), response.json()
    assert post(url, "/v1/predict", {"inputs": [INPUTS[1]]}).status_code == 200


def test_greedy_and_beam_outputs_do_not_depend_on_the_batch(trained_run, one_thread):
    """Padding and neighbours change nothing: each input decoded alone, in length-sorted batches of 32, in
    batches of 7 of the reversed order, and padded to the server's length buckets gives the same string (the
    encoder masks padding by token; rows never mix)."""
    predictor = Predictor.load(run_settings(PredictConfig(checkpoint=str(trained_run))))
    words = " ".join(SENTENCES).split()
    rng = random.Random(0)
    rows = predictor.encode(["copy: " + " ".join(rng.choices(words, k=rng.randint(1, 14))) for _ in range(16)], None)
    for beam_size in (1, 2):
        decoding = DecodingConfig(batch_size=32, beam_size=beam_size, max_length=16)
        alone = [predictor.decode([row], decoding)[0][0] for row in rows]
        together, _ = predictor.decode(rows, decoding)
        reversed_in_sevens, _ = predictor.decode(rows[::-1], DecodingConfig(batch_size=7, beam_size=beam_size,
                                                                            max_length=16))
        padded, _ = predictor.decode([bucketed(row) for row in rows], decoding)  # as the server pads them
        assert together == alone and reversed_in_sevens[::-1] == alone and padded == alone
        assert len(set(alone)) > 8  # different inputs, different strings: the check compares something


def test_a_run_someone_else_wrote_needs_trust_modules(trained_run, monkeypatch):
    monkeypatch.setattr(run_lib, "not_own_because", lambda run: "its files belong to user 4242")
    with pytest.raises(T2TError, match="would import its module files .*serve_tasks.py.* and its files belong to "
                                       "user 4242; read them and pass --trust-modules"):
        load_service(ServeConfig(checkpoint=str(trained_run)))
    assert load_service(ServeConfig(checkpoint=str(trained_run), trust_modules=True)).predictor.max_new_tokens == 16


def test_sigterm_stops_accepting_answers_the_request_in_flight_and_exits_0(server):
    """Last in this module: it stops the module's server. The request in flight is one whose body is still
    arriving when SIGTERM comes: the server must wait for it, answer it, and only then exit."""
    url, process = server
    body = json.dumps({"inputs": INPUTS[:2]}).encode()
    head_sent, go_on = threading.Event(), threading.Event()

    def slowly():
        yield body[:10]
        head_sent.set()
        go_on.wait(60)
        yield body[10:]
    answer = {}
    asking = threading.Thread(target=lambda: answer.update(
        r=httpx.post(f"{url}/v1/predict", content=slowly(), timeout=60)))
    asking.start()
    assert head_sent.wait(60)
    time.sleep(0.5)  # the request's head and first bytes are at the server
    process.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    with pytest.raises(httpx.ConnectError):  # draining: no new connections
        httpx.get(f"{url}/healthz", timeout=5)
    assert process.poll() is None  # still waiting for the request in flight
    go_on.set()
    asking.join(60)
    assert process.wait(60) == 0, "".join(process.output)
    assert answer["r"].status_code == 200
    assert answer["r"].json() == {"outputs": greedy_answers(INPUTS[:2])}
    output = "".join(process.output)
    assert "Traceback" not in output and "Finished server process" in output, output
