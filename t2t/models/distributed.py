"""Scale-out on torch.distributed: the same command under ``torchrun`` trains with DDP or FSDP.

With one process every function here is a no-op, so the trainer reads the same either way.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import torch
import torch.distributed as dist

from t2t.errors import T2TError
from t2t.models.t5 import Block


@contextlib.contextmanager
def process_group_from_env():
    """Inside: in the process group when launched by torchrun (WORLD_SIZE > 1; gloo on CPU, nccl on CUDA).
    On leaving, the group is destroyed: one left to interpreter shutdown can abort the process at exit
    ("terminate called without an active exception"), failing a run that finished. A process that finished
    waits for the others first, so that none destroys the group while a peer still talks to it (which aborted
    a finished rank the same way, once in a CI run); after an error it does not wait for peers that may be gone."""
    joined = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized()
    if joined:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    finished = False
    try:
        yield
        finished = True
    finally:
        if joined:
            if finished:
                dist.barrier()
            dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def all_reduce_sum(value: float) -> float:
    if not is_distributed():
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        tensor = tensor.cuda()
    dist.all_reduce(tensor)
    return float(tensor.item())


def step_seed(seed: int, step: int) -> int:
    """The torch seed for one step on this process: where dropout uses torch's generator (CUDA), its masks
    are a function of (seed, step, rank)."""
    return int(np.random.SeedSequence([seed, step, rank()]).generate_state(1)[0])


def row_seeds(seed: int, step: int, rows: list[int]) -> list[int]:
    """The dropout seed of each row of one step, from its index in the global batch: the same with 1 process
    or N, with or without gradient accumulation (``dropout.row_generators``)."""
    return [int(np.random.SeedSequence([seed, step, row]).generate_state(1, np.uint64)[0]) for row in rows]


def use_threads(threads: int) -> None:
    """Intra-op CPU threads for this process: ``threads`` > 0 sets them (runs side by side must divide the
    cores: two runs that each take a thread per core are many times slower than one); 0 keeps torch's
    default (``OMP_NUM_THREADS`` or the cores)."""
    if threads < 0:
        raise T2TError(f"threads must be ≥ 0 (0: all cores or OMP_NUM_THREADS), got {threads}.")
    if threads:
        torch.set_num_threads(threads)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise T2TError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise T2TError(f"device {name!r} asked for, but this torch sees no CUDA GPU (torch {torch.__version__}); "
                       f"use the device auto or cpu, or install a CUDA build of torch on a machine with a GPU.")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise T2TError(f"device {name!r} asked for, but this machine has {torch.cuda.device_count()} CUDA GPU(s) "
                       f"(cuda:0 to cuda:{torch.cuda.device_count() - 1}); pick one of them.")
    return device


def wrap_model(model: torch.nn.Module, parallelism: str, device: torch.device) -> torch.nn.Module:
    """DDP (replicated weights) or FSDP (sharded weights, gradients and optimizer state) when distributed.

    FSDP shards every Transformer block as its own unit and the rest (embedding, position biases, final
    norms) as the root unit: at rest each process holds 1/N of everything; in forward and backward one
    block's weights are gathered at a time, so the peak is one block plus the root, not the whole model.
    """
    if not is_distributed():
        return model
    if parallelism == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in [m for m in model.modules() if isinstance(m, Block)]:
            fully_shard(block)
        return fully_shard(model)
    device_ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def maybe_no_sync(model: torch.nn.Module, last: bool):
    """Skip DDP's gradient all-reduce on all but the last micro-batch of gradient accumulation."""
    if not last and isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def is_sharded(model: torch.nn.Module) -> bool:
    return is_distributed() and not isinstance(model, torch.nn.parallel.DistributedDataParallel)


def full_model_state(model: torch.nn.Module, prefix: str = "") -> dict[str, torch.Tensor] | None:
    """The whole state dict of ``model`` (keys under ``prefix``, prefix removed), gathered when sharded;
    None when the module's own ``state_dict()`` is already whole."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer state dict, gathered to full tensors when the model is sharded (FSDP)."""
    if not is_sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
    return get_optimizer_state_dict(model, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a saved (full) optimizer state, scattering it to shards when the model is sharded."""
    try:
        if is_sharded(model):
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
            set_optimizer_state_dict(model, optimizer, state,
                                     options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False))
        else:
            optimizer.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError, TypeError) as e:
        raise T2TError(f"the saved optimizer state does not fit this optimizer ({str(e).splitlines()[0]}); "
                       f"resume with the same optimizer settings or start a new output dir.") from None
