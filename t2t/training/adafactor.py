"""torch's Adafactor with a step that never waits for the device, and that runs on FSDP's sharded weights.

``torch.optim.Adafactor`` reads two norms of every parameter back to the host (its parameter scale and its
update clipping are Python floats), so on a GPU a step of T5.1.1-base waits 564 times for the device and
cannot be queued while the backward pass still runs; and its in-place ops on row and column norms fail on
FSDP's sharded parameters (DTensor cannot reduce a partial norm in place). This subclass keeps its
constructor, settings and state (``step``, ``row_var``, ``col_var``, ``variance``: checkpoints of either load
in the other) and computes the same update with the scalars left on the device, over lists of tensors where
torch has a ``_foreach`` op for the small statistics, one parameter at a time for the update (so its memory
is torch's), and out of place wherever a norm is reduced. It is also faster on the CPU: the row and column
statistics are means of g² rather than squared norms (torch's norm down the columns is slow there), and the
row factor is divided by its mean before the outer product rather than after, which saves a pass over the
matrix (about half the time of torch's step on the CPU: benchmarks/bench_optimizer.py). Its parameter scale and clipping divisor are float32 where torch's
are Python floats, and its sums are taken in another order, so the two differ by float32 rounding (a few
units in the last place of each update).
"""

from __future__ import annotations

import torch

from t2t.errors import T2TError

# The oldest torch on which this step is proved on FSDP's sharded weights (2 CPU processes log 1 process's
# losses): DTensor in torch 2.7 lacks the out-of-place _foreach ops used here, and with those rewritten
# the losses still drifted from the second step on. Releases between were not tried.
SHARDED_TORCH_FLOOR = (2, 13)


def check_sharded_support(param_groups: list[dict]) -> None:
    """Refuses FSDP's sharded weights on a torch older than ``SHARDED_TORCH_FLOOR``, before a run starts
    rather than at its first step, or later with a wrong loss."""
    if torch.__version__ >= SHARDED_TORCH_FLOOR or not torch.distributed.is_available():
        return
    from torch.distributed.tensor import DTensor
    if any(isinstance(p, DTensor) for group in param_groups for p in group["params"]):
        raise T2TError(f"FSDP with the Adafactor optimizer needs torch {'.'.join(map(str, SHARDED_TORCH_FLOOR))} "
                       f"or newer (this is torch {torch.__version__}); upgrade torch, or set "
                       f"optimizer.name=adamw or parallelism=ddp.")


class Adafactor(torch.optim.Adafactor):

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        check_sharded_support(self.param_groups)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for factored in (True, False):  # matrices keep row and column statistics, vectors a full one
                chosen = [p for p in params if (p.grad.dim() > 1) == factored]
                if chosen:
                    self._update(group, chosen, factored)
        return loss

    def _update(self, group: dict, params: list[torch.Tensor], factored: bool) -> None:
        lr, (eps1, eps2), d = float(group["lr"]), group["eps"], group["d"]
        eps1 = torch.finfo(params[0].dtype).eps if eps1 is None else eps1
        grads = [p.grad for p in params]
        states = [self._state(p) for p in params]
        steps = []
        for state in states:
            state["step"] += 1  # a CPU tensor, as in torch
            steps.append(state["step"].item())
        beta2_weights = [t ** group["beta2_decay"] for t in steps]
        root_sizes = [p.numel() ** 0.5 for p in params]
        # alpha = max(eps2, RMS(param)) * min(lr, 1/sqrt(t)), before weight decay, as in torch
        alphas = torch._foreach_clamp_min(torch._foreach_div(torch._foreach_norm(params), root_sizes), eps2)
        torch._foreach_mul_(alphas, [min(lr, t ** -0.5) for t in steps])
        if group["weight_decay"]:
            torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
        if factored:
            self._update_factors(grads, states, beta2_weights)
        else:
            torch._foreach_lerp_([s["variance"] for s in states], torch._foreach_mul(grads, grads), beta2_weights)
        for param, grad, state, alpha, root_size in zip(params, grads, states, alphas, root_sizes):
            # one update at a time, as in torch: no more memory than its largest parameter
            update = self._second_moment(state, eps1).clamp_(min=eps1 * eps1).rsqrt_().mul_(grad)
            clipping = (torch.linalg.vector_norm(update) / (root_size * d)).clamp_(min=1.0)  # max(1, RMS(u)/d)
            param.addcmul_(update, alpha / clipping, value=-1)

    @staticmethod
    def _update_factors(grads, states, beta2_weights) -> None:
        """Each matrix's row and column statistics: moving averages of the row and column means of g². (torch
        takes them as squared norms; on the CPU the norm down the columns ran 8-20× slower than the mean of g²,
        two thirds of a t5-small step's Adafactor time.)"""
        row_means, col_means = [], []
        for g in grads:  # g² of one matrix at a time: no more memory than the largest
            squared = g.square()
            row_means.append(squared.mean(dim=-1, keepdim=True))
            col_means.append(squared.mean(dim=-2, keepdim=True))
        torch._foreach_lerp_([s["row_var"] for s in states], row_means, beta2_weights)
        torch._foreach_lerp_([s["col_var"] for s in states], col_means, beta2_weights)

    @staticmethod
    def _second_moment(state: dict, eps1: float) -> torch.Tensor:
        """A new tensor: the estimate of E[g²], the outer product of the factors for a matrix."""
        if "variance" in state:
            return state["variance"].clone()
        row_var = state["row_var"]  # divided before the outer product (torch divides it): one pass fewer;
        # the outer product by broadcasting (torch: `@`, a product of one term, the same numbers, slower)
        return (row_var / row_var.mean(dim=-2, keepdim=True).clamp(min=eps1)) * state["col_var"]

    def _state(self, p: torch.Tensor) -> dict:
        """torch's state for ``p``, made at its first step as torch makes it."""
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            if p.grad.dim() > 1:
                state["row_var"] = p.grad.new_zeros((*p.grad.shape[:-1], 1))
                state["col_var"] = p.grad.new_zeros((*p.grad.shape[:-2], 1, p.grad.shape[-1]))
            else:
                state["variance"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
        return state
