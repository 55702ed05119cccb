"""``t2t-serve``: answer decoding and scoring requests over HTTP with a trained run (docs/serve.md)."""

from __future__ import annotations

import argparse
import importlib

from t2t.cli.common import (
    DECODING_FLAGS,
    LOCATION_FLAGS,
    Flag,
    add_flags,
    add_settings,
    new_parser,
    print_settings,
    resolve,
    resolved_locations,
    run_cli,
)
from t2t.extras import require_extra
from t2t.serve.settings import ServeConfig

SERVING_PACKAGES = ("starlette", "uvicorn", "prometheus_client")  # setup.cfg's serve extra
EXAMPLES = """\
  t2t-serve --checkpoint runs/glue --port 8000
  t2t-serve --checkpoint runs/glue --host 0.0.0.0 --max-batch-size 64 --max-wait-ms 10 --max-queue 512 --timeout 10
  t2t-serve --checkpoint /shared/runs/rte --trust-modules --task rte --max-length 4  # another user's run
"""

SERVER_FLAGS = [Flag("host"), Flag("port"), Flag("batch_size", name="--max-batch-size"), Flag("max_wait_ms"),
                Flag("max_queue"), Flag("timeout"), Flag("max_inputs"), Flag("max_input_chars"),
                Flag("max_request_length"), Flag("max_beam_size"), Flag("threads"), Flag("keep_alive")]
FLAGS = [Flag("checkpoint", required=True), Flag("task"), Flag("device"), Flag("trust_modules"),
         *[flag for flag in DECODING_FLAGS if flag.key != "batch_size"], *LOCATION_FLAGS, *SERVER_FLAGS]


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-serve", "Answer decoding and scoring requests over HTTP (POST /v1/predict, /v1/score), "
                                "batching the requests that arrive together.", EXAMPLES)
    add_flags(p, ServeConfig, FLAGS)
    add_settings(p, "precision=bf16")
    return p


def settings(args: argparse.Namespace) -> ServeConfig:
    return resolve(ServeConfig, args, FLAGS)


@run_cli
def serve_main(argv=None) -> int:
    args = parser().parse_args(argv)
    cfg = settings(args)
    if args.print_config:
        print_settings(resolved_locations(cfg))
        return 0
    for package in SERVING_PACKAGES:
        require_extra(package, "serve", "t2t-serve")
    importlib.import_module("t2t.serve.app").serve(cfg)  # imported once the serving packages are known there
    return 0
