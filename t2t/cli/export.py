"""``t2t-export``: a run's model and vocabulary as a Hugging Face T5 folder, or its LoRA layers as a PEFT
adapter folder."""

from __future__ import annotations

import argparse

from t2t.checkpoints.hf import to_hf
from t2t.checkpoints.loading import load_model
from t2t.checkpoints.peft import to_peft
from t2t.checkpoints.run import checkpoint_path, open_run
from t2t.cli.common import new_parser, run_cli
from t2t.data.vocab import load_vocabulary
from t2t.models.lora import drop_lora

EXAMPLES = """\
  t2t-export --checkpoint runs/glue-small --to hf exported/glue-small
then, in Python: T5ForConditionalGeneration.from_pretrained("exported/glue-small") and
                 AutoTokenizer.from_pretrained("exported/glue-small"); generate() is greedy, as t2t-predict;
                 generation_config=GenerationConfig.from_pretrained("exported/glue-small", "t5_beam_search.json")
                 is the closest transformers has to t2t-predict --beam-size 4 (T5's length penalty, alpha 0.6)
  t2t-export --checkpoint runs/rte-lora --to peft exported/rte-lora
then: PeftModel.from_pretrained(AutoModelForSeq2SeqLM.from_pretrained("exported/rte-lora/base"),
                                "exported/rte-lora")   (--to hf folds LoRA into the weights instead)
"""


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-export", "Write a run's model and vocabulary as a Hugging Face T5 folder "
                   "(model.safetensors, config.json, generation_config.json, t5_beam_search.json, spiece.model, "
                   "tokenizer.json, tokenizer_config.json) that transformers' T5ForConditionalGeneration and AutoTokenizer "
                   "load with from_pretrained.", EXAMPLES)
    p.add_argument("--checkpoint", required=True, type=checkpoint_path,
                   help="a run's output dir (its latest checkpoint), RUN:best (the checkpoint it records as its "
                        "best), or one step_* checkpoint")
    p.add_argument("--to", required=True, choices=["hf", "peft"],
                   help="format to write: hf (Hugging Face transformers; LoRA layers folded into the weights) or "
                        "peft (a LoRA run's adapter for peft, with its base model in OUT_DIR/base)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="folder to write: new, or one an earlier export wrote")
    p.add_argument("--model-type", choices=["t5", "mt5", "umt5"],
                   help="the transformers class config.json names (default: umt5 for a model with a position "
                        "bias in every layer, else t5; mt5 for MT5ForConditionalGeneration)")
    p.add_argument("--vocab", help="SentencePiece .model, vocab.json or byte to ship instead of the run's vocabulary")
    return p


@run_cli
def export_main(argv=None) -> int:
    args = parser().parse_args(argv)
    run = open_run(args.checkpoint)  # its vocabulary resolves inside the run, also after a move
    if args.vocab:
        print(f"using --vocab {args.vocab} instead of the run's vocabulary ({run.vocab or 'default'})")
    vocab = load_vocabulary(args.vocab or run.vocab, data_dir=run.data_dir)
    model = load_model(args.checkpoint)
    if args.to == "peft":
        out = to_peft(model, args.out_dir, vocabulary=vocab)
        print(f"wrote {out}: load it with peft's PeftModel.from_pretrained onto the model in {out / 'base'}")
        return 0
    if model.config.lora_rank:
        print("folding the LoRA updates into the weights (--to peft writes them as an adapter instead)")
        drop_lora(model, merge=True)
    out = to_hf(model, args.out_dir, vocabulary=vocab, model_type=args.model_type)
    print(f"wrote {out}: load it with transformers' T5ForConditionalGeneration and AutoTokenizer")
    return 0
