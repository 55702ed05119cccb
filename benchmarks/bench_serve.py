"""t2t-serve under load, against t2t-predict offline and one direct ``model.generate`` call.

Run by hand (never a test), on localhost only, with a trained run (docs/serve.md says how the recorded one was
made):

    T2T_DATA_DIR=/work/shared/data python benchmarks/bench_serve.py --checkpoint RUN [--requests 5000]

Inputs are real GLUE rows: the SST-2 validation sentences of ``$T2T_DATA_DIR/glue`` through the task's
preprocessing (``glue_sst2_v002``), one example per request. In order:

1. expected: t2t-predict's own function (t2t.evaluation.predict.predict) on the distinct inputs gives the
   expected output of each (the model load is left out of every timing);
2. idle: for each of ``--idle-requests`` inputs, one direct ``model.generate`` call in this process, then the
   same input as one request to the server (``t2t-serve`` in a subprocess, the same thread count): HTTP,
   JSON, tokenization, queue and decoding; the ratio of the two medians;
3. throughput: ``--throughput-clients`` clients (32), each sending its next request when answered, against
   t2t-predict's decoding of the distinct inputs (``Predictor.decode``, batches of 32 by length, as the
   command decodes) timed here just before and just after, the mean of the two;
4. load: ``--clients`` (64) clients sending ``--requests`` requests of which ``--malformed`` (5%) are broken
   in one of several ways; every good answer must be t2t-predict's output and every broken one a 4xx; the
   server's RSS is read every half second, and /healthz after.

Each comparison is timed within the same minute or two of a shared machine whose speed drifts more than that.
The clients run in this process (aiohttp's client), on the same cores as the server: the load they add is
part of what is measured, so they are the cheapest well-kept client at hand (httpx's async client spent
1.9 ms of CPU per request, more than the server's HTTP handling, aiohttp's 0.2 ms). Each phase stops sending
after ``--phase-seconds``. Writes ``benchmarks/results/serve-<--name>.json``; docs/serve.md quotes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import psutil
import torch

from t2t.data.task import get_task, load_modules
from t2t.evaluation.evaluate import DecodingConfig, pad_rows
from t2t.evaluation.predict import PredictConfig, Predictor, predict, run_settings

RESULTS = Path(__file__).resolve().parent / "results"
TASK = "glue_sst2_v002"
# Broken requests, cycled through: each must be refused with its 4xx, never crash or stall the server.
MALFORMED = [
    (b'{"inputs": ["sst2 sentence: cut off', 400),               # not JSON
    (b"\xff\xfe\x00", 400),                                        # not UTF-8
    (json.dumps({"inputs": ["a"], "max_tokens": 4}).encode(), 400),  # unknown field
    (json.dumps({"inputs": "sst2 sentence: not a list"}).encode(), 422),
    (json.dumps({"inputs": [7]}).encode(), 422),
    (json.dumps({"inputs": ["a"], "beam_size": 0}).encode(), 422),
    (json.dumps({"inputs": ["a"] * 65}).encode(), 413),            # more than --max-inputs (64)
    (json.dumps({"inputs": ["a" * 10001]}).encode(), 413),         # more than --max-input-chars (10000)
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="a trained run (on SST-2 for meaningful outputs)")
    p.add_argument("--name", default="cpu", help="results go to benchmarks/results/serve-NAME.json")
    p.add_argument("--requests", type=int, default=5000, help="requests in the load phase")
    p.add_argument("--clients", type=int, default=64, help="concurrent clients in the load phase")
    p.add_argument("--malformed", type=float, default=0.05, help="share of broken requests in the load phase")
    p.add_argument("--throughput-clients", type=int, default=32)
    p.add_argument("--throughput-requests", type=int, default=1000)
    p.add_argument("--idle-requests", type=int, default=50, help="single requests (and generate calls) at idle")
    p.add_argument("--max-length", type=int, default=4, help="tokens decoded (SST-2's labels are 1-2 pieces)")
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--max-wait-ms", type=float, default=5.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads, for the server and offline alike")
    p.add_argument("--phase-seconds", type=float, default=300.0, help="stop a phase's sending after this long")
    return p.parse_args()


def sst2_inputs(data_dir: str) -> list[str]:
    task = get_task(TASK)
    return [task.preprocess(row)["inputs"] for row in task.raw_examples("validation", data_dir)]


def offline(cfg: PredictConfig, texts: list[str]) -> tuple[dict, Predictor, list]:
    """t2t-predict's output for each of ``texts``, and the loaded predictor with their token rows."""
    expected = predict(cfg, texts)
    predictor = Predictor.load(run_settings(cfg))
    rows = predictor.encode(texts, None)
    decoded, _ = predictor.decode(rows, DecodingConfig(batch_size=32, max_length=cfg.max_length))
    assert decoded == expected, "Predictor.decode and predict() disagree"
    return dict(zip(texts, expected)), predictor, rows


def offline_rate(predictor: Predictor, rows: list, max_length: int) -> dict:
    """t2t-predict's decoding of ``rows`` (batches of 32 by length, as the command decodes), timed."""
    started, cpu = time.perf_counter(), time.process_time()
    predictor.decode(rows, DecodingConfig(batch_size=32, max_length=max_length))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"seconds": seconds, "examples_per_second": len(rows) / seconds, "cpu_seconds_per_example": cpu / len(rows),
            "load_average": os.getloadavg()[0]}


def direct_generate(predictor: Predictor, row, max_length: int) -> float:
    """Seconds of one ``model.generate`` call on one input."""
    model = predictor.model
    with torch.no_grad(), model.dense_attention():
        started = time.perf_counter()
        model.generate(pad_rows([row]), max_new_tokens=max_length)
        return time.perf_counter() - started


async def paired_idle(url: str, predictor: Predictor, texts: list[str], rows: list, max_length: int) -> dict:
    """For each input, one direct generate call here, then one request to the idle server: the two medians are
    taken over the same seconds of the machine's time."""
    direct, served = [], []
    async with aiohttp.ClientSession(url) as client:
        for text, row in zip(texts, rows):
            direct.append(direct_generate(predictor, row, max_length))
            started = time.perf_counter()
            async with client.post("/v1/predict", data=good(text)[0]) as response:
                assert response.status == 200, await response.text()
                await response.read()
            served.append(time.perf_counter() - started)
    return {"generate_p50_ms": 1000 * statistics.median(direct), **percentiles(served), "requests": len(served),
            "ratio_to_generate": statistics.median(served) / statistics.median(direct),
            "load_average": os.getloadavg()[0]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(args, port: int, log) -> subprocess.Popen:
    code = "import sys; from t2t.cli import serve_main; sys.exit(serve_main())"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "--checkpoint", args.checkpoint, "--port", str(port), "--max-length",
         str(args.max_length), "--max-batch-size", str(args.max_batch_size), "--max-wait-ms", str(args.max_wait_ms),
         "--threads", str(args.threads), "--max-queue", "1024"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if get(f"http://127.0.0.1:{port}/readyz", timeout=2)[0] == 200:
            return process
        if process.poll() is not None:
            raise SystemExit("t2t-serve exited while starting")
        time.sleep(0.5)
    raise SystemExit("t2t-serve was not ready within 300 s")


async def run_clients(url: str, bodies: list[tuple[bytes, int | None, str | None]], clients: int,
                      seconds: float, server: psutil.Process) -> dict:
    """Send ``bodies`` (body, expected 4xx status or None, input or None) from ``clients`` concurrent clients;
    latencies, statuses, answers, the server's RSS every half second and its CPU seconds, and the load average
    of the machine at the start and the end."""
    queue = list(reversed(range(len(bodies))))
    latencies, statuses, answers = [], {}, {}
    stop = time.monotonic() + seconds
    transport_errors = []
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as client:
        async def send(body: bytes) -> tuple[int, dict]:
            async with client.post("/v1/predict", data=body, headers={"content-type": "application/json"}) as r:
                return r.status, await r.json(content_type=None)

        async def one_client():
            while queue and time.monotonic() < stop:
                i = queue.pop()
                body = bodies[i][0]
                started = time.perf_counter()
                try:
                    statuses[i], answers[i] = await send(body)
                except aiohttp.ClientConnectionError as e:  # counted, and sent once more on a new connection
                    transport_errors.append(type(e).__name__)
                    statuses[i], answers[i] = await send(body)
                latencies.append(time.perf_counter() - started)
        rss, done = [], asyncio.Event()

        async def sample_rss():
            while not done.is_set():
                rss.append(server.memory_info().rss / 2**20)
                await asyncio.sleep(0.5)
        cpu_before, load_before, metrics_before = sum(server.cpu_times()[:2]), os.getloadavg()[0], server_metrics(url)
        sampler = asyncio.create_task(sample_rss())
        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = time.perf_counter() - started
        done.set()
        await sampler
    metrics = server_metrics(url)
    batches = metrics["t2t_serve_batch_size_count"] - metrics_before["t2t_serve_batch_size_count"]
    rows = metrics["t2t_serve_batch_size_sum"] - metrics_before["t2t_serve_batch_size_sum"]
    return {"transport_errors": transport_errors, "batches": batches, "mean_batch_size": rows / max(batches, 1),
            "wall": wall, "latencies": latencies, "statuses": statuses, "answers": answers, "rss_mib": rss,
            "server_cpu_seconds": sum(server.cpu_times()[:2]) - cpu_before,
            "load_average": [load_before, os.getloadavg()[0]]}


def check(bodies, result, expected: dict) -> dict:
    """Counts of right and wrong answers: good requests against t2t-predict's outputs, broken ones 4xx."""
    right = wrong = refused_right = refused_wrong = 0
    for i, status in result["statuses"].items():
        _, bad_status, text = bodies[i]
        if bad_status is None:
            ok = status == 200 and result["answers"][i] == {"outputs": [expected[text]]}
            right, wrong = right + ok, wrong + (not ok)
        else:
            ok = status == bad_status and set(result["answers"][i]) == {"error"}
            refused_right, refused_wrong = refused_right + ok, refused_wrong + (not ok)
    return {"sent": len(result["statuses"]), "transport_errors_retried": len(result["transport_errors"]),
            "good_answered_as_t2t_predict": right, "good_wrong": wrong, "malformed_refused_4xx": refused_right,
            "malformed_wrong": refused_wrong}


def good(text: str):
    return json.dumps({"inputs": [text]}).encode(), None, text


def percentiles(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    pick = lambda q: 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": pick(0.5), "p90_ms": pick(0.9), "p99_ms": pick(0.99)}


def rss_quarters(samples: list[float]) -> dict:
    """The server's RSS (MiB) at the start of the phase, after each quarter of it, and its peak."""
    at = {f"{q}%": samples[min(len(samples) - 1, q * len(samples) // 100)] for q in (25, 50, 75)}
    return {"start": samples[0], **at, "end": samples[-1], "peak": max(samples)}


def get(url: str, timeout: float) -> tuple[int | None, str]:
    """The status and body of a GET, or (None, "") where the server does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return None, ""


def server_metrics(url: str) -> dict:
    text = get(f"{url}/metrics", timeout=10)[1]
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "_bucket" not in line and "_created" not in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    data_dir = os.environ.get("T2T_DATA_DIR")
    load_modules()
    texts = sst2_inputs(data_dir)
    cfg = PredictConfig(checkpoint=args.checkpoint, max_length=args.max_length, device="cpu")
    print(f"offline: t2t-predict on {len(set(texts))} distinct SST-2 inputs", flush=True)
    distinct = sorted(set(texts))
    expected, predictor, rows = offline(cfg, distinct)
    row_of = dict(zip(distinct, rows))

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile("w", prefix=f"serve-{args.name}-", suffix=".server.log", delete=False)
    print(f"the server's log: {log.name}", flush=True)
    process = start_server(args, port, log)
    server = psutil.Process(process.pid)
    try:
        idle_texts = texts[:args.idle_requests]
        idle = asyncio.run(paired_idle(url, predictor, idle_texts, [row_of[t] for t in idle_texts], args.max_length))
        print("idle:", json.dumps(idle), flush=True)
        before = offline_rate(predictor, rows, args.max_length)
        inputs = [texts[i % len(texts)] for i in range(args.throughput_requests)]
        throughput = asyncio.run(run_clients(url, [good(t) for t in inputs], args.throughput_clients,
                                             args.phase_seconds, server))
        after = offline_rate(predictor, rows, args.max_length)
        every = round(1 / args.malformed) if args.malformed else 0
        load_bodies = [(*MALFORMED[(i // every) % len(MALFORMED)], None) if every and i % every == every - 1
                       else good(texts[i % len(texts)]) for i in range(args.requests)]
        load = asyncio.run(run_clients(url, load_bodies, args.clients, args.phase_seconds, server))
        alive = get(f"{url}/healthz", timeout=10)[0] == 200
        metrics = server_metrics(url)
    finally:
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(120)

    served = len(throughput["statuses"]) / throughput["wall"]
    offline_examples_per_second = (before["examples_per_second"] + after["examples_per_second"]) / 2
    batches = metrics.get("t2t_serve_batch_size_count", 0)
    results = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "load_average_at_end": os.getloadavg(), "torch": torch.__version__, "threads": args.threads},
        "settings": {k: v for k, v in vars(args).items()},
        "task": TASK, "distinct_inputs": len(expected),
        "offline": {"examples": len(rows), "before_throughput": before, "after_throughput": after,
                    "examples_per_second": offline_examples_per_second},
        "idle": idle,
        "throughput": {"clients": args.throughput_clients, "requests": len(throughput["statuses"]),
                       "seconds": throughput["wall"], "examples_per_second": served,
                       "ratio_to_offline": served / offline_examples_per_second,
                       "server_cpu_seconds_per_example": throughput["server_cpu_seconds"] / len(throughput["statuses"]),
                       "load_average": throughput["load_average"], "batches": throughput["batches"],
                       "mean_batch_size": throughput["mean_batch_size"],
                       **percentiles(throughput["latencies"]),
                       **check([good(t) for t in inputs], throughput, expected)},
        "load": {"clients": args.clients, "seconds": load["wall"], **percentiles(load["latencies"]),
                 **check(load_bodies, load, expected),
                 "requests_per_second": len(load["statuses"]) / load["wall"], "load_average": load["load_average"],
                 "batches": load["batches"], "mean_batch_size": load["mean_batch_size"],
                 "rss_mib": rss_quarters(load["rss_mib"]), "alive_after": alive},
        "server": {"batches": batches, "generated_tokens": metrics.get("t2t_serve_generated_tokens_total"),
                   "exit_code_after_sigterm": exit_code},
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"serve-{args.name}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: results[k] for k in ("offline", "idle", "throughput", "load", "server")}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
