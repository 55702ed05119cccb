"""Several nodes: two torchrun agents (``--nnodes 2``, one process each) meeting at a c10d rendezvous, here both
on this machine as docs/scale.md's SLURM script starts one per node, log the losses of one process; only the
writing rank (rank 0) logs, to metrics.jsonl and to a dashboard."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from test_train import PACKED, TASK, copy_task, losses, settings  # noqa: F401 (copy_task: a fixture)

from t2t.training.train import train

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")]


def free_port() -> int:
    """A port no one listens on now (the agent that hosts the rendezvous store binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def test_two_agents_at_a_c10d_rendezvous_log_the_losses_of_one_process(copy_task, tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard logger needs t2t[tensorboard]")
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    one = train(settings(copy_task, tmp_path / "one", **PACKED))
    run_dir = tmp_path / "two"
    rendezvous = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", f"localhost:{free_port()}", "--rdzv-id", "t2t-test-multinode"]
    args = ["--task", TASK, "--model", copy_task["model"], "--module", copy_task["module"],
            "--output-dir", str(run_dir), "--batch-size", "4", "--seed", "1", "--train-steps", "6",
            "--log-every", "1", "--save-every", "3", "--set", "input_length=48", "--set", "target_length=32",
            "--set", "pack=true", "--set", "optimizer.name=adamw", "--set", "optimizer.learning_rate=1e-2",
            "--set", "loggers=[jsonl,tensorboard]"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *rendezvous, "-m", "t2t.cli", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
              for _node in range(2)]
    outputs = [agent.communicate(timeout=600) for agent in agents]
    for agent, (_, err) in zip(agents, outputs):
        assert agent.returncode == 0, err[-3000:]
    assert sum(out.count("done: step") for out, _ in outputs) == 1  # printed by rank 0 only

    two = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in two] == list(range(1, 7))
    assert losses(two) == pytest.approx(losses(one), rel=1e-5)  # the gradient all-reduce's rounding
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1  # one writer
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={SCALARS: 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == \
        [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in two]  # stored as float32
