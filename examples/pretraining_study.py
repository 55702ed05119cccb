"""Does pre-training pay off at small scale? T5's Table 1 (pre-training vs none) and Table 8 (in-domain
unlabelled data), rerun on this machine through the CLIs (docs/study.md).

    python examples/pretraining_study.py                      # the whole study (hours on 2 CPU cores; resumes)
    python examples/pretraining_study.py --scale probe        # SST-2, scratch vs generic, seed 0 (part of the study)
    python examples/pretraining_study.py --scale smoke        # every stage for a few steps (the plumbing)

Stages, each a t2t CLI call with its log in ``<out>/logs`` and its wall time in ``<out>/timings.jsonl``:
  1. t2t-vocab: an 8k SentencePiece vocabulary on ``$T2T_DATA_DIR/corpus`` (every condition uses it)
  2. t2t-train: ``configs/models/study-medium.yaml`` (9.4M parameters) pre-trained with span corruption on
     the generic corpus (``corpus_span_corruption``, condition ``generic``) and on the GLUE tasks' own
     training inputs without labels plus the corpus (``examples/study_tasks.py``, condition ``indomain``)
  3. t2t-train: each GLUE task fine-tuned on its own (§3.5's "fine-tune each task separately") from each
     pre-trained model and from random weights (``scratch``), once per seed, evaluated on the task's full
     validation set every ``eval_every`` steps; the run's score is its best evaluation (§3.1.2)
  4. ``<docs>/results.csv`` (task, condition, seed, score), the table and the curves (PNGs)
Runs go to ``--out`` (git-ignored); running the command again skips finished runs and resumes the others
(t2t's resumption is exact). Seeds are fixed; runs go ``--jobs`` at a time, one thread each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from study_summary import TASKS, finetune_run, finished, summarize  # examples/, beside this script

ROOT = Path(__file__).resolve().parent.parent
PRETRAINING = {  # condition → (pre-training task, extra t2t-train arguments)
    "generic": ("corpus_span_corruption", []),
    "indomain": ("glue_inputs_and_corpus_span_corruption", ["--module", "examples/study_tasks.py"]),
}
CONDITIONS = ("scratch", *PRETRAINING)
# fine-tuning input length: the recipe's 128, but RTE's sentence pairs are longer (with the study's vocabulary
# 568 of its 2,490 training examples exceed 128 tokens, cutting off the hypothesis; 33 exceed 256)
INPUT_LENGTH = {"rte": 256}
MODEL = "configs/models/study-medium.yaml"


@dataclasses.dataclass(frozen=True)
class Scale:
    pretrain_steps: int
    finetune_steps: dict[str, int]  # per task: long enough that the scratch runs stop improving
    eval_every: dict[str, int]
    eval_examples: int  # per evaluation; more than any validation set here means all of it
    tasks: tuple[str, ...]
    conditions: tuple[str, ...]
    seeds: tuple[int, ...]


SCALES = {
    "full": Scale(10_000, dict(cola=1500, sst2=3000, mrpc=1500, stsb=1500, rte=1500),
                  dict(cola=100, sst2=250, mrpc=100, stsb=100, rte=100), 100_000, tuple(TASKS), CONDITIONS,
                  (0, 1, 2)),
    "probe": Scale(10_000, dict(sst2=3000), dict(sst2=250), 100_000, ("sst2",), ("scratch", "generic"), (0,)),
    "smoke": Scale(20, dict.fromkeys(TASKS, 20), dict.fromkeys(TASKS, 10), 40, tuple(TASKS), CONDITIONS, (0,)),
}


class Study:
    def __init__(self, out: Path, scale: Scale):
        self.out, self.scale = out, scale
        self.vocab = out / "vocab" / "corpus8k.model"
        (out / "logs").mkdir(parents=True, exist_ok=True)

    def stage(self, name: str, command: list[str]) -> None:
        """Run ``command`` (one thread) with its output in logs/<name>.log and its wall time recorded."""
        start = time.time()
        print(f"[{time.strftime('%H:%M:%S')}] start {name}", flush=True)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        with open(self.out / "logs" / f"{name}.log", "a") as log:
            done = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"{name} failed; see {self.out / 'logs' / f'{name}.log'}")
        seconds = time.time() - start
        with open(self.out / "timings.jsonl", "a") as f:
            f.write(json.dumps({"stage": name, "seconds": round(seconds, 1), "start": round(start)}) + "\n")
        print(f"[{time.strftime('%H:%M:%S')}] done  {name} ({seconds:.0f} s)", flush=True)

    def make_vocabulary(self) -> None:
        if not self.vocab.exists():
            data = os.environ["T2T_DATA_DIR"]
            self.stage("vocab", ["t2t-vocab", f"{data}/corpus", "--output", str(self.vocab.with_suffix("")),
                                 "--vocab-size", "8000"])

    def pretrain(self, condition: str) -> None:
        run = self.out / f"pretrain_{condition}"
        if finished(run, self.scale.pretrain_steps):
            return
        task, extra = PRETRAINING[condition]
        self.stage(f"pretrain_{condition}", self.train_command(
            run, "study-pretrain", 0, self.scale.pretrain_steps, *extra, "--task", task,
            "--save-every", str(max(10, self.scale.pretrain_steps // 10)), "--log-every", "100"))

    def finetune(self, task: str, condition: str, seed: int) -> None:
        run = finetune_run(self.out, task, condition, seed)
        steps = self.scale.finetune_steps[task]
        if finished(run, steps):
            return
        init = [] if condition == "scratch" else ["--init-from", str(self.out / f"pretrain_{condition}")]
        self.stage(run.relative_to(self.out).as_posix().replace("/", "_"), self.train_command(
            run, "study-finetune", seed, steps, *init, "--mixture", TASKS[task][0],
            # a checkpoint every 500 steps, the newest kept: a run cut off (a session's end) resumes near where
            # it stopped, and exactly (t2t's resumption), instead of starting over
            "--save-every", str(min(steps, 500)), "--set", "keep_checkpoints=1",
            "--eval-every", str(self.scale.eval_every[task]), "--log-every", "50",
            "--set", f"eval_max_examples={self.scale.eval_examples}", "--set", "skip_unavailable=false",
            "--set", f"input_length={INPUT_LENGTH.get(task, 128)}"))

    def train_command(self, run: Path, recipe: str, seed: int, steps: int, *args: str) -> list[str]:
        """t2t-train with the study's model, vocabulary, bf16 and one thread, plus the stage's own ``args``."""
        return ["t2t-train", *args, "--config", f"configs/recipes/{recipe}.yaml", "--model", MODEL,
                "--vocab", str(self.vocab), "--seed", str(seed), "--train-steps", str(steps),
                "--set", "precision=bf16", "--set", "threads=1", "--output-dir", str(run)]

    def run(self, jobs: int) -> None:
        """Pre-training first; scratch fine-tuning fills free slots meanwhile; the rest waits for its model.
        After a stage fails, the runs not yet started are skipped: the study stops at its first failure."""
        self.make_vocabulary()
        runs = [(t, c, s) for s in self.scale.seeds for t in self.scale.tasks for c in self.scale.conditions]
        failed = threading.Event()

        def unless_failed(stage: Callable[..., None], *args) -> None:
            if failed.is_set():
                return
            try:
                stage(*args)
            except BaseException:
                failed.set()
                raise

        with ThreadPoolExecutor(jobs) as pool:
            pretrained = {c: pool.submit(unless_failed, self.pretrain, c)
                          for c in self.scale.conditions if c != "scratch"}

            def finetune_after_pretraining(task: str, condition: str, seed: int) -> None:
                if condition in pretrained:
                    pretrained[condition].result()
                self.finetune(task, condition, seed)

            ordered = sorted(runs, key=lambda r: r[1] != "scratch")
            finetuned = [pool.submit(unless_failed, finetune_after_pretraining, *r) for r in ordered]
            for future in [*pretrained.values(), *finetuned]:
                future.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=SCALES, default="full")
    parser.add_argument("--out", type=Path, default=None, help="runs folder (default runs/pretraining-study, -smoke for the smoke scale)")
    parser.add_argument("--docs", type=Path, default=None, help="where results.csv and the PNGs go "
                        "(default docs/study for --scale full, else <out>/docs)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, help="a subset of the scale's tasks")
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, help="a subset of its conditions")
    parser.add_argument("--seeds", nargs="+", type=int, help="other fine-tuning seeds")
    parser.add_argument("--summarize-only", action="store_true", help="write the results of finished runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("T2T_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    suffix = "-smoke" if args.scale == "smoke" else ""  # the probe is a part of the full study: it shares its runs
    out = (args.out or ROOT / "runs" / f"pretraining-study{suffix}").resolve()
    docs = args.docs or (ROOT / "docs" / "study" if args.scale == "full" else out / "docs")
    scale = dataclasses.replace(SCALES[args.scale], **{name: tuple(value) for name in ("tasks", "conditions", "seeds")
                                                       if (value := getattr(args, name))})
    study = Study(out, scale)
    if not args.summarize_only:
        study.run(args.jobs)
    print(summarize(out, study.scale.tasks, study.scale.conditions, study.scale.seeds, docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
