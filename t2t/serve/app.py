"""The HTTP side of ``t2t-serve``: a Starlette app on uvicorn.

Endpoints: ``POST /v1/predict`` and ``POST /v1/score`` (t2t.serve.requests says what they take),
``GET /healthz`` (the process answers), ``GET /readyz`` (the model is loaded and warm, and the server is not
draining: what a load balancer routes by), ``GET /metrics`` (Prometheus). Every answer is JSON; every error
is ``{"error": one sentence}`` with its status, whatever went wrong, so a client never sees a traceback.

SIGTERM (and Ctrl-C) drain: the server stops accepting connections, answers the requests it holds, stops
the worker and exits 0 (uvicorn would re-raise the signal once done, ending the process with it instead).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import time

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from t2t.errors import T2TError
from t2t.serve.metrics import CONTENT_TYPE
from t2t.serve.requests import RequestError, parse_json, parse_predict, parse_score
from t2t.serve.service import Service, load_service
from t2t.serve.settings import ServeConfig

log = logging.getLogger(__name__)

ENDPOINTS = "POST /v1/predict, POST /v1/score, GET /healthz, GET /readyz and GET /metrics"


def create_app(service: Service) -> Starlette:
    cfg = service.cfg

    async def predict(request):
        return await answer(request, "predict", lambda data: service.predict(parse_predict(data, cfg)))

    async def score(request):
        return await answer(request, "score", lambda data: service.score(parse_score(data, cfg)))

    async def answer(request, endpoint: str, handle) -> Response:
        started = time.perf_counter()
        try:
            response = JSONResponse(await handle(parse_json(await read_body(request, cfg.max_body_bytes))))
        except RequestError as e:
            response = error(e.status, e.message, e.headers)
        except Exception as e:  # noqa: BLE001 - one sentence for the client, the traceback in the log
            log.exception("request to /v1/%s failed", endpoint)
            response = error(500, f"the server failed on this request ({type(e).__name__}); it still runs, so "
                                  f"retry it or report the request.")
        service.metrics.observe_request(endpoint, response.status_code, time.perf_counter() - started)
        return response

    async def healthz(request):
        return JSONResponse({"status": "up"})

    async def readyz(request):
        if service.ready:
            return JSONResponse({"status": "ready"})
        state = "draining" if service.draining else "warming up" if service.batcher.alive else "worker stopped"
        return error(503, f"the server is not ready ({state}); route requests to another replica.")

    async def metrics(request):
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        service.start()
        yield
        await run_in_threadpool(service.close)

    routes = [Route("/v1/predict", predict, methods=["POST"]), Route("/v1/score", score, methods=["POST"]),
              Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})


async def read_body(request, limit: int) -> bytes:
    """The body, refused with 413 once it passes ``limit`` bytes (before reading the rest of it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise too_large(limit)
    except ClientDisconnect:
        raise RequestError(400, "the client closed the connection before sending the whole body.") from None
    return bytes(body)


def too_large(limit: int) -> RequestError:
    return RequestError(413, f"the request body is larger than this server takes ({limit} bytes); send fewer or "
                             f"shorter inputs per request.")


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def http_error(request, exc: HTTPException) -> JSONResponse:
    """Starlette's own refusals (no such path, wrong method) as one sentence, like the server's."""
    what = f"{request.method} {request.url.path}"
    message = {404: f"there is no {what}; this server answers {ENDPOINTS}.",
               405: f"{request.url.path} does not take {request.method}; this server answers {ENDPOINTS}."}
    return error(exc.status_code, message.get(exc.status_code, f"{what}: {exc.detail}."), exc.headers)


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with SIGTERM and SIGINT handled by its own graceful shutdown and not raised again
    once it is done (so that a drained server exits 0), and marking the service as draining at once."""

    def __init__(self, config: uvicorn.Config, service: Service):
        super().__init__(config)
        self.service = service

    @contextlib.contextmanager
    def capture_signals(self):
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig, frame) -> None:
        self.service.draining = True
        super().handle_exit(sig, frame)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: a free one), or one sentence saying why it cannot be."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             proto=socket.IPPROTO_TCP)[0]
        # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and without it a
        # response's head and body (two writes) wait for the client's delayed ACK, 40 ms on Linux
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        raise T2TError(f"cannot listen on {host}:{port} ({e.strerror or e}); choose another --host or "
                       f"--port.") from None
    return sock


def serve(cfg: ServeConfig) -> None:
    """Load ``cfg``'s run and serve it until SIGTERM or Ctrl-C (``t2t-serve``)."""
    run_server(load_service(cfg))


def run_server(service: Service) -> None:
    """Serve until SIGTERM or Ctrl-C, then drain (module docstring)."""
    cfg = service.cfg
    sock = listen(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(create_app(service), log_level="info", access_log=False, lifespan="on",
                            timeout_keep_alive=cfg.keep_alive, timeout_graceful_shutdown=max(cfg.timeout, 1) + 5)
    print(f"t2t-serve: listening on http://{host}:{port} (POST /v1/predict, /v1/score; GET /healthz, /readyz, "
          f"/metrics)", flush=True)
    DrainingServer(config, service).run(sockets=[sock])
