"""t5x checkpoints whose arrays are TensorStore files, written here with ``tensorstore`` in the layouts t5x
and orbax write (t5x/checkpoints.py ``_get_spec``; orbax's PyTreeCheckpointHandler with and without OCDBT),
must load with exactly the weights and logits of the same parameters in a Flax msgpack checkpoint; a
partial copy is one sentence naming the missing piece."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ts = pytest.importorskip("tensorstore", reason="TensorStore checkpoints need pip install 't2t[tensorstore]'")
msgpack = pytest.importorskip("msgpack", reason="t5x checkpoints need pip install 't2t[tensorstore]'")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (a tensorstore dependency)")

from t2t.checkpoints import t5x  # noqa: E402
from t2t.checkpoints.loading import load_model  # noqa: E402
from t2t.errors import T2TError  # noqa: E402

V, D, H, K, F, B = 96, 16, 2, 8, 32, 32  # vocab, d_model, heads, d_kv, d_ff, buckets
UNSYNCED = ts.Context({"file_io_sync": False})  # test files need no fsync (an OCDBT commit per array is slow)
ATTENTION = ("query", "key", "value", "out")


def t5x_params(seed: int = 0) -> dict:
    """A random T5 1.1 parameter tree in t5x's module names (kernels [in, out], rel_embedding [heads, buckets])."""
    rng = np.random.default_rng(seed)

    def arr(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def attention():
        return {n: {"kernel": arr(H * K, D) if n == "out" else arr(D, H * K)} for n in ATTENTION}

    def mlp():
        return {"wi_0": {"kernel": arr(D, F)}, "wi_1": {"kernel": arr(D, F)}, "wo": {"kernel": arr(F, D)}}

    def scale():
        return {"scale": 1 + 0.1 * arr(D)}

    encoder = {f"layers_{i}": {"attention": attention(), "pre_attention_layer_norm": scale(), "mlp": mlp(),
                               "pre_mlp_layer_norm": scale()} for i in range(2)}
    decoder = {f"layers_{i}": {"self_attention": attention(), "pre_self_attention_layer_norm": scale(),
                               "encoder_decoder_attention": attention(), "pre_cross_attention_layer_norm": scale(),
                               "mlp": mlp(), "pre_mlp_layer_norm": scale()} for i in range(2)}
    encoder.update(relpos_bias={"rel_embedding": arr(H, B)}, encoder_norm=scale())
    decoder.update(relpos_bias={"rel_embedding": arr(H, B)}, decoder_norm=scale(), logits_dense={"kernel": arr(D, V)})
    return {"token_embedder": {"embedding": arr(V, D)}, "encoder": encoder, "decoder": decoder}


def leaves(tree: dict, path: tuple = ()):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, path + (key,))
        else:
            yield path + (key,), value


def replaced(tree: dict, fn, path: tuple = ()) -> dict:
    return {k: replaced(v, fn, path + (k,)) if isinstance(v, dict) else fn(path + (k,), v) for k, v in tree.items()}


def flax_bytes(tree: dict) -> bytes:
    """Flax's msgpack: arrays as ext type 1 holding msgpack([shape, dtype name, raw bytes])."""
    def encode(value):
        if isinstance(value, np.ndarray):
            return msgpack.ExtType(1, msgpack.packb([list(value.shape), value.dtype.name, value.tobytes()]))
        raise TypeError(type(value))
    return msgpack.packb(tree, default=encode)


def write_zarr(spec_kvstore: dict, array: np.ndarray, driver: str = "zarr", compressor: str = "gzip") -> None:
    chunks = [max(1, n // 2) for n in array.shape]  # several chunk files per matrix
    metadata = ({"shape": list(array.shape), "chunks": chunks, "compressor": {"id": compressor}} if driver == "zarr"
                else {"shape": list(array.shape), "chunk_grid": {"name": "regular",
                                                                  "configuration": {"chunk_shape": chunks}}})
    store = ts.open({"driver": driver, "kvstore": spec_kvstore, "metadata": metadata,
                     "dtype": array.dtype.name}, create=True, context=UNSYNCED).result()
    store.write(array).result()


def write_msgpack(folder: Path, params: dict) -> Path:
    """t5x's msgpack-only checkpoint: checkpoint_N/checkpoint = {version, optimizer: {target, state}}."""
    folder.mkdir(parents=True)
    state = {"step": np.array(7, np.int32)}
    (folder / "checkpoint").write_bytes(flax_bytes({"version": 3, "optimizer": {"target": params, "state": state}}))
    return folder


def write_t5x_tensorstore(folder: Path, params: dict, gcs: bool = False) -> Path:
    """t5x's own Checkpointer: each array in a gzip zarr folder ``target.<path>``; the msgpack keeps its spec
    (for a gs:// run, a gcs kvstore with t5x's dummy bucket and the path beside it)."""
    folder.mkdir(parents=True)

    def spec(path, array):
        name = ".".join(("target",) + path)
        write_zarr({"driver": "file", "path": str(folder / name)}, array)
        where = ({"kvstore": {"driver": "gcs", "bucket": "t5x-dummy-bucket"}, "path": name} if gcs
                 else {"kvstore": {"driver": "file", "path": name}})
        return {"driver": "zarr", "dtype": array.dtype.name, **where,
                "metadata": {"compressor": {"id": "gzip"}, "shape": list(array.shape),
                             "chunks": np.array([max(1, n // 2) for n in array.shape])}}

    tree = {"version": 3, "optimizer": {"target": replaced(params, spec), "state": {"step": np.array(7, np.int32)}}}
    (folder / "checkpoint").write_bytes(flax_bytes(tree))
    return folder


def write_orbax(folder: Path, params: dict, ocdbt: bool, zarr3: bool = False, metadata: bool = True,
                aggregate: bool = False) -> Path:
    """t5x's orbax layout: checkpoint_N/state/ with arrays named ``target.<path>``, zstd zarr (or zarr3), in
    an OCDBT database or one folder each; the tree in ``_METADATA`` and/or (older orbax) a ``checkpoint``
    msgpack of ``PLACEHOLDER://<name>`` leaves."""
    state = folder / "state"
    state.mkdir(parents=True)
    tree = {"target": params}
    entries = {}
    for path, array in leaves(tree):
        name = ".".join(path)
        kvstore = ({"driver": "ocdbt", "base": f"file://{state}/", "path": name} if ocdbt
                   else {"driver": "file", "path": str(state / name)})
        write_zarr(kvstore, array, "zarr3" if zarr3 else "zarr", compressor="zstd")
        entries[str(path)] = {"key_metadata": [{"key": k, "key_type": 2} for k in path],
                              "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False}}
    if metadata:
        (state / "_METADATA").write_text(json.dumps({"tree_metadata": entries, "use_ocdbt": ocdbt,
                                                     "use_zarr3": zarr3, "custom_metadata": None}))
    if aggregate:
        placeholders = replaced(tree, lambda path, _: "PLACEHOLDER://" + ".".join(path))
        (state / "checkpoint").write_bytes(flax_bytes({**placeholders, "state": {"step": np.array(7, np.int32)}}))
    return folder


LAYOUTS = {
    "t5x-zarr": write_t5x_tensorstore,
    "t5x-zarr-written-to-gcs": lambda f, p: write_t5x_tensorstore(f, p, gcs=True),
    "orbax-zarr-placeholders": lambda f, p: write_orbax(f, p, ocdbt=False, metadata=False, aggregate=True),
    "orbax-zarr": lambda f, p: write_orbax(f, p, ocdbt=False),
    "orbax-ocdbt": lambda f, p: write_orbax(f, p, ocdbt=True),
    "orbax-ocdbt-zarr3": lambda f, p: write_orbax(f, p, ocdbt=True, zarr3=True),
    "orbax-ocdbt-placeholders": lambda f, p: write_orbax(f, p, ocdbt=True, metadata=False, aggregate=True),
    "orbax-ocdbt-no-metadata": lambda f, p: write_orbax(f, p, ocdbt=True, metadata=False),
}


def logits_of(model) -> torch.Tensor:
    enc = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
    dec = torch.tensor([[0, 11, 12], [0, 13, 14]])
    with torch.no_grad():
        return model.eval()(enc, dec)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The parameters and the model t2t reads from them in a msgpack-only checkpoint."""
    params = t5x_params()
    folder = write_msgpack(tmp_path_factory.mktemp("msgpack") / "checkpoint_7", params)
    return params, t5x.from_t5x(folder)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_tensorstore_layouts_load_the_weights_and_logits_of_msgpack(reference, tmp_path, layout):
    params, expected = reference
    folder = LAYOUTS[layout](tmp_path / "checkpoint_7", params)
    model = load_model(folder)  # through the --init-from dispatch
    assert model.config == expected.config and model.config.feed_forward_proj == "gated-gelu"
    state = model.state_dict()
    for key, value in expected.state_dict().items():
        assert torch.equal(state[key], value), key
    assert torch.equal(logits_of(model), logits_of(expected.eval()))


def test_orbax_aggregate_file_passed_itself(reference, tmp_path):
    params, expected = reference
    folder = LAYOUTS["orbax-ocdbt-placeholders"](tmp_path / "checkpoint_7", params)
    model = load_model(folder / "state" / "checkpoint")
    assert torch.equal(logits_of(model), logits_of(expected))


def test_bfloat16_zarr_arrays_read_as_msgpack_bfloat16(tmp_path):
    """t5x saves targets in bfloat16 by default (save_dtype): both stores give the same float32 weights."""
    params = replaced(t5x_params(seed=1), lambda _, a: a.astype(ml_dtypes.bfloat16))
    from_msgpack = t5x.from_t5x(write_msgpack(tmp_path / "m", params))
    from_zarr = t5x.from_t5x(write_t5x_tensorstore(tmp_path / "z", params))
    assert from_zarr.state_dict()["shared.weight"].dtype == torch.float32
    for key, value in from_msgpack.state_dict().items():
        assert torch.equal(from_zarr.state_dict()[key], value), key
    assert torch.equal(logits_of(from_zarr), logits_of(from_msgpack))


def test_the_real_t5x_checkpoint_rewritten_as_ocdbt_gives_its_logits(data_dir, tmp_path):
    """The t5x test checkpoint's own tree (real t5x module names and shapes) moved into an OCDBT database."""
    file = data_dir / "checkpoints" / "t5x_test_t5_tiny" / "test_t5_tiny.checkpoint_0"
    if not file.is_file():
        pytest.skip(f"real-data test: the t5x test checkpoint {file} is missing")

    def numpy_of(code, data):
        shape, dtype, raw = msgpack.unpackb(data)
        return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape)

    target = msgpack.unpackb(file.read_bytes(), ext_hook=numpy_of)["optimizer"]["target"]
    model = load_model(write_orbax(tmp_path / "checkpoint_0", target, ocdbt=True))
    expected = t5x.from_t5x(file)
    assert model.config == expected.config
    assert torch.equal(logits_of(model), logits_of(expected))


# ----------------------------------------------------------------------------------------------------------
# One sentence for a missing extra, a partial copy, a checkpoint that is not one


def one_sentence(error: pytest.ExceptionInfo, *names) -> str:
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message and "tensorstore_spec" not in message, message
    for name in names:
        assert str(name) in message, message
    return message


@pytest.fixture
def t5x_zarr(tmp_path) -> Path:
    return write_t5x_tensorstore(tmp_path / "checkpoint_7", t5x_params())


@pytest.fixture
def ocdbt(tmp_path) -> Path:
    return write_orbax(tmp_path / "checkpoint_7", t5x_params(), ocdbt=True) / "state"


def test_without_tensorstore_the_extra_is_named(monkeypatch, ocdbt):
    monkeypatch.setitem(sys.modules, "tensorstore", None)
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(ocdbt.parent)
    one_sentence(e, "pip install 't2t[tensorstore]'")


WO = "target.encoder.layers_1.mlp.wo.kernel"


def test_a_missing_array_folder_is_named(t5x_zarr):
    shutil.rmtree(t5x_zarr / WO)
    with pytest.raises(T2TError) as e:
        load_model(t5x_zarr)
    one_sentence(e, f"lacks the array folder {t5x_zarr / WO}", "partial")


def test_a_missing_chunk_is_named_not_read_as_zeros(t5x_zarr):
    (t5x_zarr / WO / "1.1").unlink()
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(t5x_zarr)
    one_sentence(e, f"lacks {t5x_zarr / WO / '1.1'}", "partial")


def test_a_truncated_chunk_is_named(t5x_zarr):
    chunk = t5x_zarr / WO / "0.0"
    chunk.write_bytes(chunk.read_bytes()[:40])
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(t5x_zarr / "checkpoint")  # the msgpack file itself
    one_sentence(e, f"array {WO} of checkpoint {t5x_zarr} cannot be read", "partial or damaged")


def test_ocdbt_without_its_manifest_or_data_is_named(ocdbt):
    data = sorted((ocdbt / "d").iterdir())
    shutil.rmtree(ocdbt / "d")
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(ocdbt)
    one_sentence(e, ocdbt / "d", "partial")
    assert any(str(f) in str(e.value) for f in data)
    (ocdbt / "manifest.ocdbt").unlink()
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(ocdbt)
    one_sentence(e, ocdbt, "manifest.ocdbt is missing")


def test_an_array_listed_in_metadata_but_absent_from_the_database_is_named(ocdbt):
    metadata = json.loads((ocdbt / "_METADATA").read_text())
    metadata["tree_metadata"]["('target', 'decoder', 'extra')"] = {
        "key_metadata": [{"key": k, "key_type": 2} for k in ("target", "decoder", "extra")], "value_metadata": {}}
    (ocdbt / "_METADATA").write_text(json.dumps(metadata))
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(ocdbt)
    one_sentence(e, "lacks the array target.decoder.extra in its OCDBT database")


def test_a_spec_naming_a_path_outside_the_checkpoint_is_refused(tmp_path):
    params = {"token_embedder": {"embedding": {"driver": "zarr", "kvstore": {"driver": "file", "path": "../x"}}}}
    folder = tmp_path / "checkpoint_1"
    folder.mkdir()
    (folder / "checkpoint").write_bytes(flax_bytes({"version": 3, "optimizer": {"target": params}}))
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(folder)
    one_sentence(e, "outside its folder ('../x')")


def test_metadata_that_is_not_orbax_is_one_sentence(tmp_path):
    (tmp_path / "_METADATA").write_text(json.dumps({"something": "else"}))
    with pytest.raises(T2TError) as e:
        load_model(tmp_path)
    one_sentence(e, tmp_path / "_METADATA", "tree_metadata")
