"""t2t-export: a trained run becomes a folder that transformers loads, with the same logits, greedy strings
and token ids as t2t."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers", reason="export tests load the result with transformers")

from t2t import (
    cli,  # noqa: E402
    config,  # noqa: E402
    durable,  # noqa: E402
)
from t2t.checkpoints.hf import to_hf  # noqa: E402
from t2t.checkpoints.loading import load_model
from t2t.checkpoints.native import save_checkpoint  # noqa: E402
from t2t.data.vocab import SentencePieceVocabulary, train_vocabulary  # noqa: E402
from t2t.errors import T2TError  # noqa: E402
from t2t.models import decoding  # noqa: E402
from t2t.models.t5 import T5, ModelConfig, resolve_model_config  # noqa: E402
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary  # noqa: E402
from t2t.training.train import TrainConfig, train  # noqa: E402

transformers.logging.set_verbosity_error()
logging.getLogger("transformers").setLevel(logging.ERROR)

SENTENCES = ["the cat sat on the mat", "a dog ran in the park", "the baker opened her shop",
             "the river runs to the sea", "children play in the garden", "the old man reads a book"]
# T5-style text: sentinels between words, as span corruption writes them, and glued to the next character
SAMPLES = ["copy: the quick brown fox", "the <extra_id_0> dog ran <extra_id_1> park", "<extra_id_0> cat <extra_id_1>",
           "numbers 3.75 and -12.5, twenty-three years", "end <extra_id_99>", "the <extra_id_0>. dog"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A T5 1.1-style tiny model trained 12 steps on a copy task (enough to decode words, not sentinels), with t2t.testing's tiny vocabulary."""
    root = tmp_path_factory.mktemp("export")
    model = root / "tiny.yaml"
    model.write_text(json.dumps(dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                     feed_forward_proj="gated-gelu", tie_word_embeddings=False)))
    rows = [{"text": s} for s in SENTENCES]
    task = in_memory_task("export_copy", {"train": rows},
                          preprocessors=[lambda ex: {"inputs": "copy: " + ex["text"], "targets": ex["text"]}])
    settings = config.from_dict(TrainConfig, dict(
        mixture="export_copy", model=str(model), vocab=str(tiny_vocabulary().path), output_dir=str(root / "run"),
        train_steps=12, batch_size=6, input_length=16, target_length=16, pack=False, log_every=12,
        save_every=12, seed=1, dropout_rate=0.0, optimizer={"name": "adamw", "learning_rate": 1e-2}))
    with temporarily_registered(task):
        train(settings)
    return root / "run"


def export(*args: str) -> int:
    return cli.export_main(list(args))


def test_export_loads_in_transformers_with_the_same_logits_strings_and_ids(trained_run, tmp_path):
    out = tmp_path / "hf"
    assert export("--checkpoint", str(trained_run), "--to", "hf", str(out)) == 0
    hf, info = transformers.T5ForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    ours, vocab = load_model(trained_run).eval(), tiny_vocabulary()

    for text in SAMPLES:
        assert tokenizer(text).input_ids == vocab.encode(text) + [vocab.eos_id], text
    for i in (0, 1, 99):
        assert tokenizer.convert_tokens_to_ids(f"<extra_id_{i}>") == vocab.sentinel_id(i)

    inputs = [f"copy: {s}" for s in SENTENCES]
    batch = tokenizer(inputs, return_tensors="pt", padding=True)
    dec = torch.tensor([[0] + vocab.encode(s)[:6] for s in SENTENCES])
    with torch.no_grad():
        theirs = hf.eval()(**batch, decoder_input_ids=dec).logits
        mine = ours(batch.input_ids, dec)
    assert ((mine - theirs).abs().max() / theirs.abs().max()).item() < 1e-4

    generated = hf.generate(**batch, do_sample=False, num_beams=1, max_new_tokens=12)
    ids = ours.generate(batch.input_ids, max_new_tokens=12)
    strings = tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert strings == vocab.decode_batch(ids.tolist()) and all(strings)


def random_run(root: Path, vocab: SentencePieceVocabulary, preset: str = "t5-tiny", **changes) -> Path:
    """An untrained run of ``preset`` whose settings name ``vocab`` (as t2t-train records it)."""
    torch.manual_seed(0)
    cfg = resolve_model_config(preset)
    for key, value in changes.items():
        setattr(cfg, key, value)
    save_checkpoint(root / "run", 1, T5(cfg), settings={"vocab": str(vocab.path)})
    return root / "run"


def test_export_of_a_run_with_t5s_vocabulary(t5_vocab_path, tmp_path):
    vocab = SentencePieceVocabulary(t5_vocab_path)
    run = random_run(tmp_path, vocab)
    assert export("--checkpoint", str(run), "--to", "hf", str(tmp_path / "hf")) == 0
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    for text in SAMPLES + ["translate English to German: That is good.", "Ünïcödé façade, naïve café"]:
        assert tokenizer(text).input_ids == vocab.encode(text) + [1], text
    assert tokenizer.convert_tokens_to_ids("<extra_id_0>") == vocab.sentinel_id(0) == 32099
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    enc = torch.tensor([vocab.encode("summarize: the harbour town woke slowly") + [1]])
    dec = torch.tensor([[0] + vocab.encode("the town")])
    with torch.no_grad():
        theirs, mine = hf(input_ids=enc, decoder_input_ids=dec).logits, load_model(run).eval()(enc, dec)
    assert ((mine - theirs).abs().max() / theirs.abs().max()).item() < 1e-4


def test_export_refuses_a_folder_with_other_files_and_a_vocabulary_too_large(tmp_path, capsys):
    run = random_run(tmp_path, tiny_vocabulary(), vocab_size=512)
    out = tmp_path / "hf"
    out.mkdir()
    (out / "pytorch_model.bin").write_bytes(b"another model")
    assert export("--checkpoint", str(run), "--to", "hf", str(out)) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: export folder {out} holds files an export does not write (pytorch_model.bin)")
    assert error.count("\n") == 1

    (out / "pytorch_model.bin").unlink()
    assert export("--checkpoint", str(run), "--to", "hf", str(out)) == 0
    assert export("--checkpoint", str(run), "--to", "hf", str(out)) == 0  # an earlier export is replaced
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                    "spiece.model", "t5_beam_search.json", "tokenizer.json",
                                                    "tokenizer_config.json"]

    small = random_run(tmp_path / "small", tiny_vocabulary(), vocab_size=256)  # 484 ids > 256 embeddings
    with pytest.raises(T2TError, match="has 484 ids but the model only 256 embeddings"):
        to_hf(load_model(small), tmp_path / "small_hf", vocabulary=tiny_vocabulary())


def test_export_vocab_flag_overrides_the_runs_and_says_so(tmp_path, capsys):
    vocab = tiny_vocabulary()
    run = random_run(tmp_path, vocab, vocab_size=512)
    other = tmp_path / "other.model"
    shutil.copyfile(vocab.path, other)
    assert export("--checkpoint", str(run), "--to", "hf", str(tmp_path / "hf"), "--vocab", str(other)) == 0
    assert f"using --vocab {other} instead of the run's vocabulary ({vocab.path})" in capsys.readouterr().out


def test_exported_tokenizer_decodes_as_transformers_own_t5_tokenizer(t5_vocab_path, tmp_path):
    """transformers' own T5 tokenizer, built from the same spiece.model, decodes [3, 1465] ("▁", "▁positive")
    to " positive" where sentencepiece (and so t2t-predict) gives "positive": its decoder drops the "▁" of the
    first piece only, sentencepiece every leading one, and it writes sentinels without sentencepiece's spaces.
    The export decodes as transformers' own, so that it reads like Google's T5 folders on the hub."""
    pytest.importorskip("sentencepiece", reason="transformers converts spiece.model with sentencepiece")
    pytest.importorskip("google.protobuf", reason="transformers converts spiece.model with protobuf")
    vocab = SentencePieceVocabulary(t5_vocab_path)
    assert export("--checkpoint", str(random_run(tmp_path, vocab)), "--to", "hf", str(tmp_path / "hf")) == 0
    (tmp_path / "spiece_only").mkdir()
    shutil.copyfile(t5_vocab_path, tmp_path / "spiece_only" / "spiece.model")
    theirs = transformers.T5TokenizerFast.from_pretrained(tmp_path / "spiece_only")
    ours = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    cases = [[3, 1465], [3, 1465, 1], [3, 3, 1465], [1465, 3], [0, 3, 1465, 1, 0], [32099, 3, 1465],
             [32099, 1465, 32098], [10, 32099, 5, 1]] + [vocab.encode(text) for text in SAMPLES]
    for ids in cases:
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip), ids
    assert (ours.decode([3, 1465]), vocab.decode([3, 1465])) == (" positive", "positive")


def test_a_full_disk_during_an_export_leaves_the_earlier_export_whole(tmp_path, capsys, monkeypatch):
    """config.json and the tokenizer files were rewritten in place: a disk that filled up while tokenizer.json
    was written left the new weights beside a truncated tokenizer.json, which AutoTokenizer cannot read."""
    vocab, out = tiny_vocabulary(), tmp_path / "hf"
    assert export("--checkpoint", str(random_run(tmp_path / "a", vocab, vocab_size=512)), "--to", "hf", str(out)) == 0
    earlier = {path.name: path.read_bytes() for path in out.iterdir()}
    real_write = durable.write_file

    def disk_fills_at_the_tokenizer(path, data):
        if Path(path).name == "tokenizer.json":
            real_write(path, bytes(data)[:100])  # part of it got out, then the disk was full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(path, data)

    monkeypatch.setattr(durable, "write_file", disk_fills_at_the_tokenizer)
    other = random_run(tmp_path / "b", vocab, vocab_size=512, d_ff=48)  # other weights, another config.json
    assert export("--checkpoint", str(other), "--to", "hf", str(out)) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: cannot write the Hugging Face export {out} (No space left on device); free disk "
                            f"space") and error.count("\n") == 1, error
    assert {path.name: path.read_bytes() for path in out.iterdir()} == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "hf"]  # no half-written folder left behind
    transformers.AutoTokenizer.from_pretrained(out)
    transformers.T5ForConditionalGeneration.from_pretrained(out)


def test_an_export_never_writes_through_a_symbolic_link(tmp_path, capsys):
    """A link planted in the export folder is replaced, not written through; the folder itself given as a link
    is refused (the folder it names is what to pass)."""
    run = random_run(tmp_path, tiny_vocabulary(), vocab_size=512)
    out, precious = tmp_path / "hf", tmp_path / "precious.txt"
    out.mkdir()
    precious.write_text("keep me")
    (out / "config.json").symlink_to(precious)
    assert export("--checkpoint", str(run), "--to", "hf", str(out)) == 0
    assert precious.read_text() == "keep me"
    assert not (out / "config.json").is_symlink() and json.loads((out / "config.json").read_text())["d_model"] == 64

    (tmp_path / "link").symlink_to(out)
    assert export("--checkpoint", str(run), "--to", "hf", str(tmp_path / "link")) == 2
    assert capsys.readouterr().err == (f"error: export folder {tmp_path / 'link'} is a symbolic link; pass the folder "
                                       f"it names ({out}).\n")


# AutoTokenizer in a python that cannot import protobuf (as after `pip install transformers` alone): the ids of
# each line of stdin, as JSON
_NO_PROTOBUF_TOKENIZER = """
import json, sys
sys.modules["google.protobuf"] = None  # import google.protobuf raises ImportError from here on
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps([tokenizer(line).input_ids for line in sys.stdin.read().split("\\n")]))
"""


def ids_without_protobuf(export_dir: Path, texts: list[str]) -> list[list[int]]:
    done = subprocess.run([sys.executable, "-c", _NO_PROTOBUF_TOKENIZER, str(export_dir)], input="\n".join(texts),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def real_sentences(data_dir: Path) -> list[str]:
    """RTE dev premises with sentinels where span corruption puts them, and where users type them: glued to
    punctuation, at the start and end, two in a row, with runs of spaces."""
    rows = (data_dir / "glue" / "RTE" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:41]
    sentences = [row.split("\t")[1] for row in rows]
    with_sentinels = []
    for i, sentence in enumerate(sentences[:20]):
        words = sentence.split(" ")
        words[len(words) // 2] = f"<extra_id_{i}>"
        with_sentinels.append(" ".join(words) + f" <extra_id_{99 - i}>.")
    return sentences + with_sentinels + [
        "<extra_id_0>, said the <extra_id_1>'s owner", "<extra_id_0> <extra_id_1>  two  spaces <extra_id_2>",
        "  leading and trailing  ", "Ünïcödé façade, naïve café ½ ﬁ",
        "translate English to German: That is good."]


@pytest.mark.integration
def test_exported_tokenizer_json_gives_t2ts_ids_without_protobuf(t5_vocab_path, data_dir, tmp_path):
    vocab = SentencePieceVocabulary(t5_vocab_path)
    assert export("--checkpoint", str(random_run(tmp_path, vocab)), "--to", "hf", str(tmp_path / "hf")) == 0
    tokenizer = json.loads((tmp_path / "hf" / "tokenizer.json").read_text())
    assert {t["content"]: t["id"] for t in tokenizer["added_tokens"]}["<extra_id_0>"] == 32099
    texts = real_sentences(data_dir)
    assert ids_without_protobuf(tmp_path / "hf", texts) == [vocab.encode(t) + [vocab.eos_id] for t in texts]


@pytest.mark.integration
def test_exported_tokenizer_of_a_custom_vocabulary_without_protobuf(tmp_path):
    vocab = tiny_vocabulary()
    run = random_run(tmp_path, vocab, vocab_size=512)
    assert export("--checkpoint", str(run), "--to", "hf", str(tmp_path / "hf")) == 0
    texts = SAMPLES + ["the <extra_id_0>. dog <extra_id_1>, ran", "jam <extra_id_0>ly", "Quiet  please <extra_id_7>"]
    assert ids_without_protobuf(tmp_path / "hf", texts) == [vocab.encode(t) + [vocab.eos_id] for t in texts]


def test_export_of_a_bpe_vocabulary_has_no_tokenizer_json_and_says_so(tmp_path, caplog):
    bpe = SentencePieceVocabulary(train_vocabulary(iter(SENTENCES * 20), tmp_path / "bpe", vocab_size=60,
                                                   model_type="bpe", num_threads=1, character_coverage=1.0))
    run = random_run(tmp_path, bpe, vocab_size=256)
    with caplog.at_level(logging.WARNING, logger="t2t.checkpoints.hf"):
        assert export("--checkpoint", str(run), "--to", "hf", str(tmp_path / "hf")) == 0
    assert not (tmp_path / "hf" / "tokenizer.json").exists()
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["tokenizer_class"] == "T5Tokenizer"
    assert "is not a unigram model, so the export has no tokenizer.json" in caplog.text


def test_a_hugging_face_folder_is_read_with_its_own_vocabulary(trained_run, tmp_path, monkeypatch):
    """t2t-eval, t2t-predict and --init-from take the folder's spiece.model (as transformers' tokenizer does),
    before $T2T_VOCAB: here a path that does not exist, so reading it would fail."""
    from t2t.evaluation.evaluate import load_model_and_vocabulary

    assert export("--checkpoint", str(trained_run), "--to", "hf", str(tmp_path / "hf")) == 0
    monkeypatch.setenv("T2T_VOCAB", str(tmp_path / "nowhere.model"))
    _, vocab = load_model_and_vocabulary(str(tmp_path / "hf"), None, None)
    assert vocab.path == tmp_path / "hf" / "spiece.model"
    rows = [{"text": s} for s in SENTENCES]
    task = in_memory_task("export_copy_again", {"train": rows},
                          preprocessors=[lambda ex: {"inputs": "copy: " + ex["text"], "targets": ex["text"]}])
    settings = config.from_dict(TrainConfig, dict(
        mixture=task.name, init_from=str(tmp_path / "hf"), output_dir=str(tmp_path / "run"), train_steps=1,
        batch_size=2, input_length=16, target_length=16, pack=False, optimizer={"name": "adamw"}))
    with temporarily_registered(task):
        train(settings)
    assert (tmp_path / "run" / "spiece.model").read_bytes() == tiny_vocabulary().path.read_bytes()


def test_an_export_without_a_vocabulary_leaves_no_earlier_tokenizer_behind(trained_run, tmp_path):
    assert export("--checkpoint", str(trained_run), "--to", "hf", str(tmp_path / "hf")) == 0
    to_hf(load_model(trained_run), tmp_path / "hf")
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["config.json", "generation_config.json",
                                                                   "model.safetensors", "t5_beam_search.json"]


def test_exported_generation_configs_are_greedy_by_default_and_t5s_beam_search_by_name(tmp_path):
    """generation_config.json decodes greedily, as t2t-predict does by default; t5_beam_search.json is 4 beams,
    length_penalty 0.6 and early_stopping "never" (transformers refuses a length_penalty with one beam), so with
    it transformers runs t2t's beam search under its own penalty, length ** 0.6; where T5's ((5 + length) / 6)
    ** 0.6 picks the same hypotheses, it is what t2t-predict --beam-size 4 gives."""
    torch.manual_seed(0)
    ours = T5(ModelConfig(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                          dropout_rate=0.0)).eval()
    with torch.no_grad():
        ours.shared.weight[1] *= 2.0  # EOS likely enough that some hypotheses end at once and others run on
    to_hf(ours, tmp_path / "hf")
    beam = json.loads((tmp_path / "hf" / "t5_beam_search.json").read_text())
    # "never": the search t2t runs (a row stops once no live beam can win); transformers' default guesses
    assert (beam["num_beams"], beam["length_penalty"], beam["early_stopping"]) == (4, 0.6, "never")
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    enc = torch.randint(2, 128, (16, 12), generator=torch.Generator().manual_seed(1))
    greedy = hf.generate(input_ids=enc, max_new_tokens=16)[:, 1:]
    greedy = greedy.masked_fill((greedy == 1).long().cumsum(1) - (greedy == 1).long() > 0, 0)  # EOS-filled: pad
    ours_greedy = ours.generate(enc, max_new_tokens=16)
    assert torch.equal(greedy[:, :ours_greedy.shape[1]], ours_greedy) and not greedy[:, ours_greedy.shape[1]:].any()

    by_name = transformers.GenerationConfig.from_pretrained(tmp_path / "hf", "t5_beam_search.json")
    theirs = hf.generate(input_ids=enc, max_new_tokens=16, generation_config=by_name)[:, 1:]  # start token dropped
    theirs = theirs.masked_fill((theirs == 1).long().cumsum(1) - (theirs == 1).long() > 0, 0)  # EOS-filled: pad
    hf_penalty = decoding.beam_search(ours, enc, 16, num_beams=4, length_penalty=lambda n: n ** 0.6)
    assert torch.equal(theirs[:, :hf_penalty.shape[1]], hf_penalty) and not theirs[:, hf_penalty.shape[1]:].any()
    assert not torch.equal(hf_penalty, ours_greedy), "beam search should beat greedy here"

    t5_penalty = ours.generate(enc, max_new_tokens=16, beam_size=4)  # t2t-predict --beam-size 4
    width = max(t5_penalty.shape[1], theirs.shape[1])
    t5_penalty, theirs, hf_penalty = (F.pad(ids, (0, width - ids.shape[1])) for ids in (t5_penalty, theirs, hf_penalty))
    same = [torch.equal(a, b) for a, b in zip(t5_penalty, hf_penalty)]
    assert torch.equal(theirs[same], t5_penalty[same])
    assert sum(same) == 14  # the penalties pick different hypotheses on 2 of the 16 rows

    hf.generation_config = by_name
    hf.save_pretrained(tmp_path / "saved")  # transformers 4 refuses a beam setting without beams
