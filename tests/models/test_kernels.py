"""t2t.models.kernels: the oneDNN-routed linear layer equals F.linear; CPU dropout keeps 1-p, follows the seed."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

from t2t.models import kernels
from t2t.models.dropout import row_generators


def _takes_onednn(y: torch.Tensor) -> bool:
    """Whether ``y`` came out of the oneDNN custom op (its autograd node is named after it)."""
    return "onednn_linear" in type(y.grad_fn).__name__


@pytest.fixture
def onednn_unpacked(monkeypatch):
    """oneDNN for products by plain weights, as on AMD CPUs with AVX-512, whatever this CPU is."""
    monkeypatch.setattr(kernels, "ONEDNN_UNPACKED", True)


@pytest.fixture(params=["onednn", "mkl"])
def packed_kernel(request, monkeypatch):
    """Products by packed weights on oneDNN's GEMM (as on AMD CPUs) or MKL's (as on Intel CPUs with AVX-512)."""
    if request.param == "mkl" and not kernels.HAS_MKL_PACKING:
        pytest.skip("this torch build has no MKL packed GEMM")
    monkeypatch.setattr(kernels, "PACKED_BY_MKL", request.param == "mkl")
    return request.param


def _grads(fn, x, w, grad_out):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    y = fn(x, w)
    y.backward(grad_out)
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("shape", [(3, 7, 64), (5, 64), (0, 64)])
def test_linear_matches_f_linear_values_and_gradients(shape, onednn_unpacked):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    w = torch.randn(48, 64, generator=g)
    grad_out = torch.randn(*shape[:-1], 48, generator=g)
    ours = _grads(kernels.linear, x, w, grad_out)
    ref = _grads(F.linear, x, w, grad_out)
    if kernels.HAS_ONEDNN:  # what was compared is the oneDNN path (without it, F.linear is all there is)
        assert _takes_onednn(kernels.linear(x.requires_grad_(True), w))
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not kernels.HAS_ONEDNN, reason="this torch build has no oneDNN")
def test_fp32_cpu_takes_the_onednn_path_and_other_dtypes_do_not(onednn_unpacked):
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(6, 8)
    assert _takes_onednn(kernels.linear(x, w))
    assert kernels._use_onednn(x, w)
    assert not kernels._use_onednn(x.double(), w.double())
    assert not kernels._use_onednn(x.bfloat16(), w.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not kernels._use_onednn(x, w)


def _compiled_ops(fn, *args) -> set[str]:
    """The ops of the graph ``torch.compile`` makes of ``fn`` (as its backend receives it)."""
    graphs = []

    def record(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module

    torch.compile(fn, backend=record, fullgraph=True, dynamic=False)(*args)
    return {str(node.target) for graph in graphs for node in graph.graph.nodes if node.op == "call_function"}


@pytest.mark.skipif(not kernels.HAS_ONEDNN, reason="this torch build has no oneDNN")
def test_compiled_code_keeps_the_onednn_product_and_its_gradients(onednn_unpacked):
    called = _compiled_ops(kernels.Linear(16, 24, bias=False), torch.randn(2, 3, 16))
    assert any("t2t.onednn_linear" in target for target in called), called

    g = torch.Generator().manual_seed(0)
    x, w, grad_out = (torch.randn(*shape, generator=g) for shape in ((3, 5, 16), (24, 16), (3, 5, 24)))
    compiled = torch.compile(lambda a, b: torch.relu(kernels.linear(a, b)), fullgraph=True)
    eager = _grads(lambda a, b: torch.relu(F.linear(a, b)), x, w, grad_out)
    for a, b in zip(_grads(compiled, x, w, grad_out), eager):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not kernels.CAN_PACK, reason="this torch build cannot pack weights for oneDNN")
def test_where_mkl_is_faster_only_products_by_packed_weights_leave_f_linear(monkeypatch, packed_kernel):
    monkeypatch.setattr(kernels, "ONEDNN_UNPACKED", False)  # as on AVX2 and Intel CPUs, where MKL is faster
    products = []
    by_packed = kernels._by_packed_weight
    monkeypatch.setattr(kernels, "_by_packed_weight", lambda x, w: products.append(w) or by_packed(x, w))
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(6, 8)
    y = kernels.linear(x, w)
    y.sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(kernels.linear(x, w), y)
        assert not products and not _takes_onednn(y)  # training, its gradients and plain inference: F.linear
        with kernels.packed_weights(store := WeakIdKeyDictionary()):
            torch.testing.assert_close(kernels.linear(x, w), y)
    assert len(products) == len(store) == 1  # a decoding step's product: by the packed weight


@pytest.mark.skipif(not kernels.CAN_PACK, reason="this torch build cannot pack weights for oneDNN")
def test_compiled_code_without_autograd_keeps_opaque_ops_for_packed_products_alone(monkeypatch):
    """Without autograd, compiled code is plain ``F.linear`` and ``F.relu`` (which inductor fuses), but for
    the products by packed weights of a decoding step; the opaque relu is for graphs autograd records."""
    monkeypatch.setattr(kernels, "ONEDNN_UNPACKED", False)
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    ffn = lambda x: kernels.relu(kernels.linear(x, w))  # noqa: E731
    with torch.no_grad():
        plain = _compiled_ops(ffn, x)
        with kernels.packed_weights(WeakIdKeyDictionary()):
            packed = _compiled_ops(ffn, x)
    trained = _compiled_ops(ffn, x.requires_grad_(True))
    assert [op for op in plain if "linear" in op] and [op for op in plain if "relu" in op], plain  # a graph was made
    assert not [op for op in plain if "t2t." in op], plain
    assert any("t2t.linear_without_grad" in op for op in packed) and not any("t2t.relu" in op for op in packed)
    assert any("t2t.relu" in op for op in trained), trained


@pytest.mark.parametrize("capability, cpu, onednn", [
    ("AVX512", "vendor_id\t: AuthenticAMD\ncpu family\t: 25", True),  # Zen 4: oneDNN about twice MKL's rate
    ("AVX512", "vendor_id\t: GenuineIntel\ncpu family\t: 6", False),  # Xeon: MKL faster, most on weight grads
    ("AVX2", "vendor_id\t: AuthenticAMD\ncpu family\t: 25", False),  # Zen 3: MKL the faster
    ("AVX512", "Intel64 Family 6 Model 143 Stepping 8, GenuineIntel", False),  # Windows' platform.processor()
    ("AVX512", "AMD64 Family 25 Model 17 Stepping 1, AuthenticAMD", True),
])
def test_plain_weights_take_onednn_on_amd_cpus_with_avx512_only(capability, cpu, onednn):
    assert kernels.onednn_for_plain_weights(capability, cpu) is onednn


@pytest.mark.parametrize("capability, cpu, mkl", [
    ("AVX512", "vendor_id\t: GenuineIntel\ncpu family\t: 6", True),  # Xeon: the steps' products up to 12% faster
    ("AVX512", "Intel64 Family 6 Model 143 Stepping 8, GenuineIntel", True),  # Windows' platform.processor()
    ("AVX2", "vendor_id\t: GenuineIntel\ncpu family\t: 6", False),  # not measured: oneDNN's, as before
    ("AVX512", "vendor_id\t: AuthenticAMD\ncpu family\t: 25", False),  # Zen 4
    ("AVX2", "vendor_id\t: AuthenticAMD\ncpu family\t: 25", False),  # Zen 3
])
def test_packed_weights_take_mkl_on_intel_cpus_with_avx512_only(capability, cpu, mkl):
    assert kernels.mkl_for_packed_weights(capability, cpu) is mkl


def test_linear_module_keeps_nn_linear_parameters():
    layer = kernels.Linear(8, 6, bias=False)
    assert layer.bias is None and list(layer.state_dict()) == ["weight"]
    x = torch.randn(2, 8)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight))


def test_autocast_is_bf16_on_the_cpu_for_bf16_and_off_for_fp32():
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    with kernels.autocast("bf16", torch.device("cpu")):
        assert kernels.linear(x, w).dtype == torch.bfloat16
    with kernels.autocast("fp32", torch.device("cpu")):
        assert kernels.linear(x, w).dtype == torch.float32


@pytest.mark.parametrize("instructions, warned", [((False, False), 1), ((True, False), 0), ((False, True), 0)])
def test_bf16_on_a_cpu_without_bf16_instructions_is_said_once(instructions, warned, monkeypatch, caplog):
    avx512_bf16, amx = instructions
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    kernels._warn_if_bf16_is_emulated.cache_clear()
    for precision in ("fp32", "bf16", "bf16"):
        with kernels.autocast(precision, torch.device("cpu")):
            pass
    kernels._warn_if_bf16_is_emulated.cache_clear()
    assert caplog.text.count("bf16 is emulated, several times slower than fp32") == warned


@pytest.mark.parametrize("p", [0.1, 0.5, 0.01])
def test_cpu_dropout_keeps_one_minus_p_and_preserves_the_mean(p):
    torch.manual_seed(0)
    x = torch.ones(1_000_001)  # odd: the last 31-bit word is half used
    y = kernels.dropout(x, p, training=True)
    kept = (y != 0).double().mean().item()
    sd = (p * (1 - p) / x.numel()) ** 0.5
    assert abs(kept - (1 - p)) < 5 * sd
    _, scale = kernels.keep_mask(x.shape, p)
    assert scale == pytest.approx(1 / (1 - p), rel=1e-4)
    assert torch.all(y[y != 0] == torch.tensor(scale, dtype=y.dtype))
    assert abs(y.double().mean().item() - 1) < 5 * sd * scale


def test_cpu_dropout_masks_follow_torch_seed_and_gradients_use_the_same_mask():
    x = torch.randn(4, 33, 7)
    torch.manual_seed(3)
    a = kernels.dropout(x, 0.1, training=True)
    torch.manual_seed(3)
    xg = x.clone().requires_grad_(True)
    b = kernels.dropout(xg, 0.1, training=True)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    grad_out = torch.randn_like(x)
    b.backward(grad_out)
    torch.testing.assert_close(xg.grad, grad_out * b.detach() / x)
    torch.manual_seed(4)
    assert not torch.equal(kernels.dropout(x, 0.1, training=True), a)


def test_dropout_is_identity_in_eval_and_at_zero_and_zeroes_at_one():
    x = torch.randn(5, 6)
    assert kernels.dropout(x, 0.1, training=False) is x
    assert kernels.dropout(x, 0.0, training=True) is x
    assert torch.equal(kernels.dropout(x, 1.0, training=True), torch.zeros_like(x))
    # p rounds to a multiple of 2^-15: just below 1 keeps one draw value in 2^15 (scale 2^15, no division by
    # zero); below 2^-16 it keeps everything at scale 1
    torch.manual_seed(0)
    keep, scale = kernels.keep_mask((1 << 20,), 0.99999)
    assert scale == 2.0 ** 15 and 0 < int(keep.sum()) < 100
    keep, scale = kernels.keep_mask((1 << 20,), 1e-5)
    assert scale == 1.0 and bool(keep.all())


def test_row_generators_make_each_rows_masks_a_function_of_its_seed_alone():
    x = torch.randn(3, 4, 33)  # 132 draws per row: 33 words of four draws
    with row_generators([11, 12, 13]):
        whole = kernels.dropout(x, 0.5, training=True)
        attention_mask = kernels.keep_mask((3, 2, 5, 5), 0.5)[0]
    with row_generators([12]):
        middle = kernels.dropout(x[1:2], 0.5, training=True)
    with row_generators([13, 11]):
        swapped = kernels.dropout(x[[2, 0]], 0.5, training=True)
    torch.testing.assert_close(middle, whole[1:2], rtol=0, atol=0)
    torch.testing.assert_close(swapped, whole[[2, 0]], rtol=0, atol=0)
    assert not torch.equal(whole[0] == 0, whole[1] == 0)  # the rows differ
    assert not torch.equal(attention_mask[0], attention_mask[1])
    # the rows' generators, not torch's: reseeding torch changes nothing inside, everything outside
    torch.manual_seed(0)
    with row_generators([11, 12, 13]):
        assert torch.equal(kernels.dropout(x, 0.5, training=True), whole)
    torch.manual_seed(0)
    outside = kernels.dropout(x, 0.5, training=True)
    torch.manual_seed(0)
    assert torch.equal(kernels.dropout(x, 0.5, training=True), outside) and not torch.equal(outside, whole)
    with row_generators([1, 2]), pytest.raises(RuntimeError, match="3 rows"):
        kernels.dropout(x, 0.5, training=True)


def test_compiled_dropout_draws_the_eager_masks_in_the_eager_order():
    """Two draws of one shape in one graph stay two masks (torch.compile merges calls it thinks pure), and
    a compiled function consumes torch's generator as the eager one does: same outputs and gradients."""

    def twice(x):
        return kernels.dropout(x, 0.3, True) + 2 * kernels.dropout(x, 0.3, True)

    x = torch.randn(4, 3, 16)
    grad_out = torch.randn(4, 3, 16)
    results = []
    for fn in (twice, torch.compile(twice, fullgraph=True)):
        torch.manual_seed(5)
        xg = x.clone().requires_grad_(True)
        y = fn(xg)
        y.backward(grad_out)
        results.append((y.detach(), xg.grad, torch.randint(1 << 30, ())))  # the generator's state after
    (eager, eager_grad, eager_next), (compiled, compiled_grad, compiled_next) = results
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(compiled_grad, eager_grad, rtol=1e-6, atol=1e-6)
    assert compiled_next == eager_next
    torch.manual_seed(5)
    (first, scale), (second, _) = kernels.keep_mask(x.shape, 0.3), kernels.keep_mask(x.shape, 0.3)
    assert not torch.equal(first, second)
    torch.testing.assert_close(eager, x * first * scale + 2 * x * second * scale)


def _one_query_rounding_bound(q, k, v, bias, dtype) -> torch.Tensor:
    """How far one-query attention in ``dtype`` (fp32 sums, fp32 softmax) can be from the exact result, per
    output element: q·k and the bias sum rounded to ``dtype`` (unit roundoff u) after an fp32 dot product of
    n terms (n·u32 of the sum of magnitudes); those score errors δ move each probability by a factor within
    exp(±2 max δ); the softmax's own fp32 error; the probabilities and the output rounded to ``dtype``."""
    u, u32 = torch.finfo(dtype).eps / 2, torch.finfo(torch.float32).eps / 2
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1)
    biased = scores if bias is None else scores + bias.double()
    visible = biased > torch.finfo(dtype).min / 2
    score_error = q.shape[-1] * u32 * (q.abs() @ k.abs().transpose(-2, -1)) + u * (scores.abs() + biased.abs())
    shift = 2 * score_error.where(visible, 0).amax(-1, keepdim=True)
    probs = biased.softmax(-1)
    prob_error = (torch.expm1(shift) + (k.shape[-2] + 2) * u32 + u * torch.exp(shift)) * probs
    out_error = prob_error @ v.abs() + k.shape[-2] * u32 * (probs @ v.abs())
    return out_error + u * ((probs @ v).abs() + out_error)


@pytest.fixture
def one_query_calls(monkeypatch) -> list:
    """A list that gets an entry for each call of ``kernels._single_query_attention``."""
    calls = []
    one_query = kernels._single_query_attention
    monkeypatch.setattr(kernels, "_single_query_attention", lambda *a: calls.append(1) or one_query(*a))
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_query_attention_is_sdpa_up_to_rounding(dtype, one_query_calls, monkeypatch):
    """A decoding step's attention (one query per row, no dropout) takes its own path on the CPU, and computes
    SDPA's attention (unscaled, additive mask) within the rounding of ``dtype``."""
    monkeypatch.setattr(kernels, "ONE_QUERY_BF16_BY_SDPA", False)  # as on CPUs without AMX
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 1, 16, generator=g).to(dtype)
    k, v = (torch.randn(3, 4, 9, 16, generator=g).to(dtype) for _ in range(2))
    bias = torch.randn(3, 1, 1, 9, generator=g).to(dtype)
    bias[0, ..., 5:] = torch.finfo(dtype).min  # masked keys
    for b in (bias, None):
        mask = None if b is None else b.double()
        exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=1.0)
        got = kernels.sdpa(q, k, v, attn_mask=b, scale=1.0)
        assert got.dtype == dtype and got.shape == (3, 4, 1, 16)
        error, bound = (got.double() - exact).abs(), _one_query_rounding_bound(q, k, v, b, dtype)
        assert (error <= bound).all(), f"worst error/bound {(error / bound).max():.3f}"
    assert len(one_query_calls) == 2


@pytest.mark.parametrize("dtype, by_sdpa", [(torch.bfloat16, True), (torch.float32, False)])
def test_with_amx_bf16_attention_of_one_query_takes_sdpa(dtype, by_sdpa, one_query_calls, monkeypatch):
    monkeypatch.setattr(kernels, "ONE_QUERY_BF16_BY_SDPA", True)  # as on a CPU with AMX
    q, k, v = (torch.randn(2, 4, n, 16).to(dtype) for n in (1, 9, 9))
    bias = torch.zeros(2, 1, 1, 9, dtype=dtype)
    torch.testing.assert_close(kernels.sdpa(q, k, v, attn_mask=bias, scale=1.0),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0))
    assert len(one_query_calls) == (0 if by_sdpa else 1)


def test_compiled_bf16_attention_of_one_query_takes_the_eager_path(monkeypatch):
    """Compiled code computes one query's bf16 attention as eager code does (SDPA with AMX), so compiled and eager
    decoding round alike: the faster products in a graph changed a prediction (``ONE_QUERY_BF16_BY_SDPA``)."""
    monkeypatch.setattr(kernels, "ONE_QUERY_BF16_BY_SDPA", True)  # as on a CPU with AMX
    q, k, v = (torch.randn(2, 4, n, 16, generator=torch.Generator().manual_seed(n)).bfloat16() for n in (1, 9, 9))
    bias = torch.zeros(2, 1, 1, 9, dtype=torch.bfloat16)
    attend = lambda q, k, v, bias: kernels.sdpa(q, k, v, attn_mask=bias, scale=1.0)  # noqa: E731
    ops = _compiled_ops(attend, q, k, v, bias)
    assert [op for op in ops if "scaled_dot_product" in op] and "<built-in function matmul>" not in ops, ops


def _bf16_product_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """How far a bf16 product of ``x`` and ``w`` (operands rounded to bf16, fp32 sums in any order, the result
    rounded to bf16) can be from the exact product of the rounded operands: γ_K · (|x| @ |w|.T) for the sums,
    then the result's rounding, u = 2^-8 of it."""
    x, w = x.bfloat16().double(), w.bfloat16().double()
    K, u32, u = x.shape[-1], 2.0 ** -24, 2.0 ** -8
    sums = K * u32 / (1 - K * u32) * (x.abs() @ w.abs().T)
    return sums + u * ((x @ w.T).abs() + sums)


@pytest.mark.skipif(not kernels.PACKS_BF16, reason="this CPU or torch build has no oneDNN bf16 kernels")
def test_compiled_bf16_products_multiply_by_packed_copies_not_by_weights_cast_in_the_graph():
    """Under bf16 autocast a compiled decoding step would cast every weight at every call (a graph has no cache
    of cast weights); inside ``packed_weights`` it multiplies by bf16 copies packed once per store, giving
    autocast's product (bf16 operands, fp32 sums, a bf16 result); eager code keeps autocast's own product."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 64, generator=g), torch.randn(48, 64, generator=g)
    product = lambda x: kernels.linear(x, w)  # noqa: E731
    store = WeakIdKeyDictionary()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), kernels.packed_weights(store):
        eager = product(x)
        assert len(store) == 0  # eager: autocast's product, its cache of cast weights
        ops = _compiled_ops(product, x)
        compiled = torch.compile(product, fullgraph=True, dynamic=False)(x)
    assert "t2t.linear_without_grad.default" in ops and not [op for op in ops if "linear" in op and "t2t" not in op]
    (_, packed), = store.values()
    assert packed.dtype == compiled.dtype == eager.dtype == torch.bfloat16
    exact = x.bfloat16().double() @ w.bfloat16().double().T
    for y in (compiled, eager):
        assert ((y.double() - exact).abs() <= _bf16_product_bound(x, w)).all()


def _saved_dtypes(fn, x: torch.Tensor) -> list[torch.dtype]:
    """The dtypes of the tensors ``fn`` saves for its backward pass."""
    dtypes = []

    def pack(t):
        dtypes.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x).sum().backward()
    return dtypes


def test_relu_equals_f_relu_and_compiles_without_saving_a_bool_mask():
    """Compiled, F.relu's training graph saves ``out <= 0`` as bools, which inductor's CPU code stores slowly;
    ``kernels.relu`` saves its float output instead and computes what F.relu computes."""
    x = torch.tensor([[-1.0, 0.0, 2.0, -0.0, 3.5]]).repeat(4, 13)
    grad_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    x.requires_grad_(True)
    ours, ref = (torch.autograd.functional.vjp(relu, x, grad_out) for relu in (kernels.relu, F.relu))
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])  # values, and gradients (0 at 0)
    assert _saved_dtypes(torch.compile(lambda x: F.relu(x) * 2.0), x) == [torch.bool]  # the control
    assert _saved_dtypes(torch.compile(lambda x: kernels.relu(x) * 2.0), x) == [torch.float32]


def _rounding_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The worst-case rounding of fp32 ``x @ w.T`` summed in any order: γ_K · (|x| @ |w|.T), γ_K = Ku/(1-Ku)."""
    K, u = x.shape[-1], 2.0 ** -24
    return K * u / (1 - K * u) * (x.abs().double() @ w.abs().double().T)


@pytest.mark.skipif(not kernels.CAN_PACK, reason="this torch build cannot pack weights for oneDNN")
def test_packed_weights_give_the_product_and_follow_in_place_changes(onednn_unpacked, packed_kernel):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 7, 64, generator=g), torch.randn(48, 64, generator=g)
    exact = lambda: x.double() @ w.double().T  # noqa: E731
    store = WeakIdKeyDictionary()
    with torch.no_grad(), kernels.packed_weights(store):
        y = kernels.linear(x, w)
        assert len(store) == 1  # the packed path was taken
        assert ((y.double() - exact()).abs() <= _rounding_bound(x, w)).all()
        w.mul_(-2)  # an in-place change must not leave the old packed copy in use
        y = kernels.linear(x, w)
        assert ((y.double() - exact()).abs() <= _rounding_bound(x, w)).all()
        x = x[:2]  # other rows (a copy packed for them)
        y = kernels.linear(x, w)
        assert ((y.double() - exact()).abs() <= _rounding_bound(x, w)).all()
    assert kernels._packed is None  # outside, nothing is packed
    with kernels.packed_weights(store := WeakIdKeyDictionary()):  # with autograd on, nothing is packed either
        assert _takes_onednn(kernels.linear(x.requires_grad_(True), w))
    assert len(store) == 0


@pytest.mark.skipif(not kernels.CAN_PACK, reason="this torch build cannot pack weights for oneDNN")
def test_eager_products_without_autograd_run_the_kernel_without_the_custom_ops_dispatch(packed_kernel):
    """The op is for compiled code (which must not look inside for the packed copy); eager code calls its body
    and skips the dispatch (50 µs a product when it was a ``custom_op``, 37 products a t5-small decoding step)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            called.append(str(func))
            return func(*args, **(kwargs or {}))

    x, w, called = torch.randn(4, 8), torch.randn(6, 8), []
    with torch.no_grad(), kernels.packed_weights(WeakIdKeyDictionary()), Ops():
        kernels.linear(x, w)
    kernel = "_mkl_linear" if packed_kernel == "mkl" else "_linear_pointwise"
    assert any(kernel in op for op in called) and not any("t2t" in op for op in called), called


@pytest.mark.skipif(not kernels.CAN_PACK, reason="this torch build cannot pack weights for oneDNN")
def test_decoding_steps_pack_the_weights_and_give_the_unpacked_tokens(monkeypatch, packed_kernel):
    from t2t.models.t5 import T5, ModelConfig

    torch.manual_seed(0)
    model = T5(ModelConfig(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)).eval()
    x = torch.randint(3, 96, (3, 11), generator=torch.Generator().manual_seed(2))
    packed = {"encoder": [], "decoder": []}
    for stack in packed:  # how many weights are packed when each stack's last product runs
        getattr(model, stack).blocks[-1].ff.wo.register_forward_hook(
            lambda *_, stack=stack: packed[stack].append(len(kernels._packed or ())))
    tokens = model.generate(x, max_new_tokens=6, min_new_tokens=6)
    assert packed["encoder"] == [0]  # run once per call: packing it would not pay
    assert min(packed["decoder"][1:]) > 0  # every step after the first (begin_decoding runs the first)
    kernels.apply(model, "plain")  # the opt-out
    packed["decoder"].clear()
    torch.testing.assert_close(model.generate(x, max_new_tokens=6, min_new_tokens=6), tokens, rtol=0, atol=0)
    assert max(packed["decoder"]) == 0
