"""docs/settings.md, generated from the settings dataclasses: ``python -m t2t.cli.settings_doc > docs/settings.md``.

Each setting is listed with its type, its default and the comment written beside its field, so the
reference cannot drift from the code (tests/cli/test_cli.py's
``test_settings_reference_is_in_sync_with_the_dataclasses`` compares the file with ``render()``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json

from t2t import config

SECTIONS = [  # (title, "module:Class", how users set them)
    ("t2t-train", "t2t.training.train:TrainConfig", "flags, `--config FILE`, `--set key=value` (nested: "
                                           "`--set optimizer.schedule=rsqrt`)"),
    ("t2t-eval", "t2t.evaluation.evaluate:EvalConfig", "flags, `--config FILE`, `--set key=value`"),
    ("t2t-predict", "t2t.evaluation.predict:PredictConfig", "flags, `--config FILE`, `--set key=value`"),
    ("t2t-serve", "t2t.serve.settings:ServeConfig", "flags (`batch_size` is `--max-batch-size`), `--config FILE`, "
                                                    "`--set key=value`"),
    ("t2t-study", "t2t.training.study:StudyConfig", "flags, `--config FILE`, `--set key=value`"),
]


def render() -> str:
    """The whole reference as Markdown."""
    parts = ["# Settings reference\n",
             "Generated from the settings dataclasses by `python -m t2t.cli.settings_doc > docs/settings.md`; "
             "edit the comments beside the fields, not this file. Every command prints its resolved "
             "settings with `--print-config`.\n"]
    for title, target, how in SECTIONS:
        module, name = target.split(":")
        cls = getattr(importlib.import_module(module), name)
        parts.append(f"## {title} — `{name}`\n\nSet with {how}.\n")
        parts.append("| setting | type | default | meaning |\n|---|---|---|---|")
        parts += [f"| `{key}` | {cell(kind)} | {cell(default)} | {cell(comment)} |"
                  for key, kind, default, comment in rows(cls)]
        parts.append("")
    return "\n".join(parts)


def rows(cls, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted name, type, default, comment) for each field; nested settings dataclasses are expanded."""
    out = []
    for f in dataclasses.fields(cls):
        hint, default, comment = config.describe(cls, f.name)
        if dataclasses.is_dataclass(hint):
            out += rows(hint, f"{prefix}{f.name}.")
            continue
        out.append((prefix + f.name, config.type_name(hint), value_text(default), comment))
    return out


def value_text(value) -> str:
    """The default as a settings file writes it (JSON is YAML: null, true, "text", [0.9, 0.999])."""
    return f"`{json.dumps(value)}`"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(render(), end="")
