"""The CPU kernel choices t2t can apply to a built model: ``apply(model, "auto" | "plain")``.

The network (t5.py) is plain PyTorch: ``nn.Linear``, ``nn.ReLU``, the row-seeded ``dropout.Dropout``, SDPA.
``apply(model, "auto")`` swaps in this module's tuned forms, each of which takes its fast path only where it
was measured to pay (benchmarks/results/HISTORY.md, "Model") and is the plain operation everywhere else;
``apply(model, "plain")`` swaps the plain ones back. Every private torch operator t2t uses is here, behind a
check: a missing operator leaves the plain path, and one that fails on first use is given up with one log line.

- ``Linear``: the products of a linear layer (``x @ W.T`` and both gradients) on oneDNN rather than MKL's
  sgemm on CPUs where oneDNN is the faster fp32 kernel (``ONEDNN_UNPACKED``). The products are the custom
  ops ``t2t::onednn_linear`` and ``t2t::linear_without_grad``, which ``torch.compile`` keeps as opaque calls
  (inductor has no lowering of its own for the oneDNN op). All IEEE fp32 kernels: results agree with
  ``F.linear`` to rounding.
- ``packed_weights``: decoding steps multiply by copies of the weights packed once per decoding call for MKL's
  or oneDNN's GEMM (``PACKED_BY_MKL``) rather than reordered inside every product.
- ``Dropout``: masks from numpy's SFC64 words, four 15-bit draws a word, instead of ``bernoulli_``; the drop
  probability is rounded to a multiple of 2^-15 (0.1 → 0.100006) and the kept values scaled by the exact
  inverse of the keep rate. Inside ``dropout.row_generators`` row ``b`` comes from its own generator, as the
  plain Dropout's does; outside, the generator is seeded from torch's, so masks follow ``torch.manual_seed``.
- ``ReLU``: on the CPU with autograd, an opaque op whose backward reads the saved output (compiled, ``F.relu``
  saves a bool mask, which inductor's CPU code stores slowly).
- ``sdpa``: attention of one query (a decoding step) on the CPU as two matrix-vector products.

Also here, because the commands apply them around the model: ``autocast`` (bf16 on CUDA and the CPU alike,
with a warning where the CPU emulates bf16) and ``many_graphs`` (dynamo's recompile limit for t2t's compiled
functions).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import platform
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from t2t.errors import T2TError
from t2t.models import dropout as row_dropout

log = logging.getLogger(__name__)

HAS_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
HAS_MKL_PACKING = torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
CAN_PACK = HAS_ONEDNN and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
PACKS_BF16 = CAN_PACK and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def onednn_for_plain_weights(capability: str, cpu_description: str) -> bool:
    """Whether oneDNN, not MKL, should multiply by plain (unpacked) weights (in training, the encoder and
    scoring) on a CPU with torch's ``capability`` and a ``cpu_description`` naming its vendor: only on AMD
    CPUs with AVX-512, the one kind where oneDNN's fp32 product was measured the faster; MKL's is the faster
    on AVX2 CPUs and on Intel CPUs with AVX-512 (benchmarks/results/HISTORY.md, "Model"). Products by packed
    weights (decoding steps) beat MKL's plain ones on all of them."""
    return capability == "AVX512" and "AuthenticAMD" in cpu_description


def _cpu_description() -> str:
    """Text naming this CPU's vendor: the start of /proc/cpuinfo on Linux, ``platform.processor()`` elsewhere
    (Windows puts the vendor there)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return cpuinfo.read(4096)
    except OSError:
        return platform.processor()


#: Whether oneDNN multiplies by plain weights on this machine (``onednn_for_plain_weights``). Fixed per machine,
#: so a resumed run multiplies as the run it resumes did.
ONEDNN_UNPACKED = onednn_for_plain_weights(torch.backends.cpu.get_cpu_capability(), _cpu_description())


def mkl_for_packed_weights(capability: str, cpu_description: str) -> bool:
    """Whether MKL's packed GEMM, not oneDNN's, should multiply by packed weights (``packed_weights``): on Intel
    CPUs with AVX-512, where it decoded a little faster with the same tokens and peak memory. Elsewhere
    oneDNN's, the one measured on AMD CPUs."""
    return capability == "AVX512" and "GenuineIntel" in cpu_description


#: Whether products by packed weights run on MKL's packed GEMM on this machine (``mkl_for_packed_weights``).
PACKED_BY_MKL = CAN_PACK and HAS_MKL_PACKING and mkl_for_packed_weights(torch.backends.cpu.get_cpu_capability(),
                                                                        _cpu_description())


def give_up(what: str, error: Exception) -> None:
    """Stop using every private operator after one failed: one log line, then the plain path for good."""
    global HAS_ONEDNN, CAN_PACK, PACKS_BF16, ONEDNN_UNPACKED, PACKED_BY_MKL
    HAS_ONEDNN = CAN_PACK = PACKS_BF16 = ONEDNN_UNPACKED = PACKED_BY_MKL = False
    log.warning("%s failed on this torch (%s); t2t computes with plain PyTorch (F.linear) from here on.",
                what, str(error).splitlines()[0] if str(error) else type(error).__name__)


def _onednn_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` by oneDNN's linear kernel; ``weight`` plain (any strides) or packed (``packed_weights``)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


@torch.library.custom_op("t2t::onednn_linear", mutates_args=())
def onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` by oneDNN; ``weight`` may be a strided view (e.g. a transpose)."""
    if x.shape[-1] == 0:  # an empty sum (the weight gradient of an empty batch): oneDNN refuses it
        return x.new_zeros((*x.shape[:-1], weight.shape[0]))
    if HAS_ONEDNN:
        try:
            return _onednn_product(x, weight)
        except RuntimeError as error:
            give_up("oneDNN's linear operator (torch.ops.mkldnn._linear_pointwise)", error)
    return F.linear(x, weight)


def _product_without_grad(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` for products autograd does not record: inside ``packed_weights`` by the weight's packed
    copy, else by this CPU's faster kernel for plain weights."""
    if _packed is not None and x.numel() and CAN_PACK:
        try:
            return _by_packed_weight(x, weight)
        except RuntimeError as error:
            give_up("packing weights for MKL or oneDNN (torch.ops.mkl / torch.ops.mkldnn)", error)
    return _by_plain_weight(x, weight.to(x.dtype))


# ``t2t::linear_without_grad``: ``_product_without_grad`` as an opaque op for compiled code. The packed copy is
# looked up inside it, so that compiled decoding steps multiply by packed weights too (a graph cannot take the
# kernels' opaque packed tensors as inputs). It is never differentiated, so it is a plain library op:
# ``custom_op``'s Python wrapper cost about 30 µs of each call (37 calls a t5-small decoding step), this one's 6.
_LIBRARY = torch.library.Library("t2t", "FRAGMENT")
_LIBRARY.define("linear_without_grad(Tensor x, Tensor weight) -> Tensor")
_LIBRARY.impl("linear_without_grad", _product_without_grad, "CPU")
linear_without_grad = torch.ops.t2t.linear_without_grad.default


@onednn_linear.register_fake
def _onednn_linear_shape(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


torch.library.register_fake("t2t::linear_without_grad", _onednn_linear_shape, lib=_LIBRARY)


def _save_linear_inputs(ctx, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _onednn_linear_backward(ctx, grad: torch.Tensor):
    """Both gradients on oneDNN: ``grad @ W`` and ``grad.T @ x``, passed as transposed views; oneDNN reads a
    transposed weight in place but copies a transposed input (``grad.T`` here: about 3% of a one-thread B8
    step), which still leaves it well ahead of MKL's ``mm`` on AMD."""
    x, weight = ctx.saved_tensors
    grad_x = onednn_linear(grad, weight.t()) if ctx.needs_input_grad[0] else None
    grad_w = None
    if ctx.needs_input_grad[1]:
        grad_w = onednn_linear(grad.reshape(-1, grad.shape[-1]).t(), x.reshape(-1, x.shape[-1]).t())
    return grad_x, grad_w


onednn_linear.register_autograd(_onednn_linear_backward, setup_context=_save_linear_inputs)


def _use_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether oneDNN may take ``x @ weight.T``: fp32 on the CPU, autocast off."""
    return (HAS_ONEDNN and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu"))


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` for ``precision == "bf16"``; nothing for fp32."""
    if precision == "bf16" and device.type == "cpu":
        _warn_if_bf16_is_emulated()
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


@functools.cache
def _warn_if_bf16_is_emulated() -> None:
    """Once a process: bf16 on a CPU without bf16 instructions, which emulates it several times slower than
    fp32."""
    if not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
        log.warning("precision=bf16 on this CPU, which has no bf16 instructions (AVX512-BF16, AMX): bf16 is "
                    "emulated, several times slower than fp32; set precision=fp32 here.")


# graphs one process may compile of each function t2t compiles with fullgraph (the training step, the decoding
# step): one per model shape and precision (decoding: one more for rows of one). dynamo's default, 8 a
# function, made the ninth fail in a process training or decoding with several models, as a notebook does.
MAX_GRAPHS = 64


def many_graphs(compiled: bool = True) -> contextlib.AbstractContextManager:
    """Around a call of a function t2t compiled: it may make ``MAX_GRAPHS`` graphs, not dynamo's 8. (Nothing
    for an eager call, which need not import torch._dynamo: 1.5 s.)"""
    return torch._dynamo.config.patch(recompile_limit=MAX_GRAPHS) if compiled else contextlib.nullcontext()


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` without bias, on the faster kernel where there is one (see the module doc)."""
    dtype = _packed_product_dtype(x, weight)
    if dtype is not None:  # a decoding step's product (dynamo guards on ``_packed``: a graph for either case)
        # Eager calls skip the op's dispatch (a few µs a call; 50 when it was a ``custom_op``), 37 calls a step
        x = x if x.dtype == dtype else x.to(dtype)
        return linear_without_grad(x, weight) if torch.compiler.is_compiling() else _product_without_grad(x, weight)
    return _by_plain_weight(x, weight) if _use_onednn(x, weight) else F.linear(x, weight)


def _packed_product_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype | None:
    """The dtype in which ``linear`` multiplies ``x`` by ``weight``'s packed copy (``packed_weights``), or None
    where the product is not by a packed copy (autograd on, outside ``packed_weights``, other devices, dtypes).

    fp32; and bf16 under the CPU's bf16 autocast in compiled code, where oneDNN has bf16 kernels
    (``PACKS_BF16``): a compiled decoding step computes autocast's casts of the weights at every call (there is
    no cache of cast weights inside a graph), which can take longer than the products themselves. Eager steps
    keep autocast's cache of cast weights, which is as fast as packed copies."""
    if _packed is None or torch.is_grad_enabled():
        return None
    if _use_onednn(x, weight):  # fp32 on the CPU, autocast off
        return torch.float32
    bf16 = (PACKS_BF16 and torch.compiler.is_compiling() and x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
            and torch.get_autocast_dtype("cpu") == torch.bfloat16 and weight.dtype in (torch.float32, torch.bfloat16))
    return torch.bfloat16 if bf16 else None


def _by_plain_weight(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` (fp32, CPU) on this CPU's faster kernel for unpacked weights (``ONEDNN_UNPACKED``)."""
    return onednn_linear(x, weight) if ONEDNN_UNPACKED else F.linear(x, weight)


# weight -> ((its version, the rows and dtype it was packed for), the packed copy): the innermost
# ``packed_weights``' store
_packed: WeakIdKeyDictionary | None = None


@contextlib.contextmanager
def packed_weights(store: WeakIdKeyDictionary):
    """Inside, without autograd, ``linear`` multiplies fp32 CPU inputs by copies of the weights packed for
    MKL's or oneDNN's GEMM (``PACKED_BY_MKL``), kept in ``store`` (made on first use, remade after an in-place
    change), instead of having the kernel reorder the weight inside every product; compiled code under bf16
    autocast multiplies by bf16 copies packed for oneDNN (``_packed_product_dtype``). The decoding steps run in it
    with their decoding cache's store, so each weight is packed once per decoding call rather than once per
    token, for memory the size of the weights the steps use (``kernels: plain`` decodes without it)."""
    global _packed
    outer, _packed = _packed, (store if CAN_PACK else None)
    try:
        yield
    finally:
        _packed = outer


def _by_packed_weight(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` by ``weight``'s packed copy for the rows and dtype of ``x`` in the innermost
    ``packed_weights`` store (made on first use, and again after an in-place change), on MKL's packed GEMM or
    oneDNN's (``PACKED_BY_MKL``; bf16: oneDNN's)."""
    rows, by_mkl = x.numel() // x.shape[-1], PACKED_BY_MKL and x.dtype == torch.float32
    packed_for, packed = _packed.get(weight, (None, None))
    if packed_for != (weight._version, rows, x.dtype):
        pack = torch.ops.mkl._mkl_reorder_linear_weight if by_mkl else torch.ops.mkldnn._reorder_linear_weight
        packed = pack(weight.to(x.dtype), rows)
        _packed[weight] = (weight._version, rows, x.dtype), packed
    if by_mkl:
        return torch.ops.mkl._mkl_linear(x, packed, weight, None, rows)
    return _onednn_product(x, packed)


class Linear(nn.Linear):
    """``nn.Linear`` without bias (same parameters and state-dict keys) whose product goes through ``linear``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)


_DROP_BITS = 15  # a 64-bit word of numpy's SFC64 gives four draws of 15 bits
_DRAWS = 1 << _DROP_BITS  # the number of values a draw takes


def _bit_generators() -> list[np.random.SFC64]:
    """One generator per row inside ``dropout.row_generators``; else one for the whole mask, seeded by a draw
    from torch's generator, so that masks follow ``torch.manual_seed`` and a checkpoint's RNG state."""
    rows = row_dropout.active_row_generators("sfc64", np.random.SFC64)
    return rows if rows is not None else [np.random.SFC64(int(torch.randint(1 << 62, ()).item()))]


# Every mask drawn adds one here. The mask op writes it so that torch.compile treats each call as a side
# effect, in program order: it would otherwise merge two draws of the same shape into one mask.
_masks_drawn = torch.zeros((), dtype=torch.int64)


@torch.library.custom_op("t2t::dropout_keep_mask", mutates_args=("masks_drawn",))
def _draw_keep_mask(masks_drawn: torch.Tensor, shape: list[int], threshold: int) -> torch.Tensor:
    """A CPU uint8 mask of ``shape``: 1 where a 15-bit draw is at least ``threshold``, else 0.

    The draws are numpy's, whose SFC64 words come about twice as fast as torch's ``random_``. uint8 rather
    than bool: torch's CPU kernels convert bool to float without vectorizing."""
    masks_drawn.add_(1)
    generators = _bit_generators()
    rows = len(generators)
    if rows > 1:
        row_dropout.check_rows(shape, generators)
    n = math.prod(shape) // rows  # draws per row
    keep = np.empty((rows, n), dtype=np.bool_)
    for row, generator in zip(keep, generators):
        draws = generator.random_raw((n + 3) // 4).view(np.int16)[:n]
        np.greater_equal(np.bitwise_and(draws, _DRAWS - 1, out=draws), threshold, out=row)  # uniform on [0, 2^15)
    return torch.from_numpy(keep.view(np.uint8)).reshape(shape)


@_draw_keep_mask.register_fake
def _keep_mask_shape(masks_drawn: torch.Tensor, shape: list[int], threshold: int) -> torch.Tensor:
    return masks_drawn.new_empty(shape, dtype=torch.uint8)


def keep_mask(shape: torch.Size, p: float) -> tuple[torch.Tensor, float]:
    """A CPU uint8 mask of ``shape`` that keeps (1) each element with probability ≈ 1 - ``p``, and 1 / that
    exact probability (the scale for the kept values)."""
    threshold = min(round(p * _DRAWS), _DRAWS - 1)
    return _draw_keep_mask(_masks_drawn, list(shape), threshold), _DRAWS / (_DRAWS - threshold)


@torch.library.custom_op("t2t::relu", mutates_args=())
def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


@torch.library.custom_op("t2t::relu_backward", mutates_args=())
def _relu_backward(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.threshold_backward(grad, out, 0)


@_relu.register_fake
def _relu_shape(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@_relu_backward.register_fake
def _relu_backward_shape(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(grad)


def _save_relu_output(ctx, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(output)


_relu.register_autograd(lambda ctx, grad: _relu_backward(grad, *ctx.saved_tensors), setup_context=_save_relu_output)


def relu(x: torch.Tensor) -> torch.Tensor:
    """``F.relu``; on the CPU, where autograd records it, an opaque op whose backward reads the saved output.
    Compiled as ``F.relu``, the training graph saves ``out <= 0`` as a bool tensor instead, which inductor's
    CPU code stores many times slower than eager code does. Without autograd it stays ``F.relu``, which
    compiled code fuses (as the opaque op it would not be)."""
    if x.device.type == "cpu" and torch.is_grad_enabled() and x.requires_grad:
        return _relu(x)
    return F.relu(x)


class ReLU(nn.ReLU):
    """``nn.ReLU`` through ``relu``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu(x)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)``, with the cheaper mask on the CPU (see the module doc)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    keep, scale = keep_mask(x.shape, p)
    return x.mul(scale).mul_(keep)


class Dropout(row_dropout.Dropout):
    """The row-seeded Dropout with the cheaper mask on the CPU (``dropout``), inside ``row_generators`` or not:
    compiled code then draws what eager code draws in every case."""

    def draws_by_row(self, x: torch.Tensor) -> bool:
        return x.device.type == "cpu"

    def keep_mask(self, shape: torch.Size) -> tuple[torch.Tensor, float]:
        return keep_mask(shape, self.p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
         dropout_p: float = 0.0, scale: float | None = None) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, but one query per row on the CPU (a decoding step) as two
    matrix-vector products (``_single_query_attention``)."""
    if q.shape[-2] == 1 and dropout_p == 0.0 and scale == 1.0 and q.device.type == "cpu" and not _one_query_by_sdpa(q):
        return _single_query_attention(q, k, v, attn_mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)


def _scores(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Unscaled attention scores ``q @ k.T`` plus the additive ``bias``."""
    scores = q @ k.transpose(-2, -1)
    return scores if bias is None else scores + bias


#: Whether SDPA takes bf16 attention of one query on this CPU: where AMX runs its kernel, it is the faster.
#: Elsewhere, and in fp32 everywhere, the two matrix-vector products are. Compiled code takes the same path
#: as eager code: inductor's kernels for the two products are a little faster, but round the scores to bf16
#: where SDPA keeps them in fp32, and changed a prediction that eager decoding did not.
ONE_QUERY_BF16_BY_SDPA = torch.cpu._is_amx_tile_supported()


def _one_query_by_sdpa(q: torch.Tensor) -> bool:
    return q.dtype == torch.bfloat16 and ONE_QUERY_BF16_BY_SDPA


def _single_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            bias: torch.Tensor | None) -> torch.Tensor:
    """Attention of one query per row (a decoding step) as two matrix-vector products, the softmax in fp32.
    On the CPU, SDPA's blocked kernel is slower for one query, bf16 on AMX excepted
    (``ONE_QUERY_BF16_BY_SDPA``). In bf16 the scores are rounded to bf16 before the softmax, as autocast's
    matmul rounds them (and transformers' eager attention); SDPA's kernel keeps them in fp32."""
    return _scores(q, k, bias).softmax(-1, dtype=torch.float32).to(v.dtype) @ v




# ----------------------------------------------------------------------------------------------------------
# The seam


#: plain module type → its tuned form; a tuned module keeps the plain one's parameters (same state-dict keys)
TUNED_MODULES: dict[type[nn.Module], type[nn.Module]] = {nn.Linear: Linear, row_dropout.Dropout: Dropout, nn.ReLU: ReLU}
#: the tuned function for each of the names a module lists in ``kernel_functions`` (its plain ones are class
#: attributes: ``F.linear``, ``F.scaled_dot_product_attention``, ``T5.decoding_scope``)
TUNED_FUNCTIONS: dict[str, Callable] = {"linear": linear, "sdpa": sdpa, "decoding_scope": packed_weights}
KINDS = ("auto", "plain")


def apply(model: nn.Module, kind: str) -> nn.Module:
    """``model`` with its modules and functions in the ``kind`` form: "auto" the tuned ones of this module,
    "plain" PyTorch's own. In place (parameters are shared, nothing is copied); returns ``model``."""
    if kind not in KINDS:
        raise T2TError(f"unknown kernels {kind!r}; use one of {', '.join(KINDS)}.")
    tuned = kind == "auto"
    swap = TUNED_MODULES if tuned else {tuned_type: plain for plain, tuned_type in TUNED_MODULES.items()}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) in swap:
                setattr(parent, name, _converted(child, swap[type(child)]))
        for name in getattr(parent, "kernel_functions", ()):
            if tuned:
                setattr(parent, name, TUNED_FUNCTIONS[name])
            else:
                vars(parent).pop(name, None)  # the class attribute, the plain function, shows through
    return model


def _converted(module: nn.Module, to: type[nn.Module]) -> nn.Module:
    """``module`` as a ``to`` (a subclass of its type, or the type it subclasses), sharing its parameters."""
    converted = to.__new__(to)
    vars(converted).update(vars(module))  # the same parameters, hooks and training flag
    return converted
