#!/usr/bin/env bash
# Small-scale replication of the T5 paper's headline findings (docs/study-first-round.md), through the CLIs only.
#
#   examples/replicate_t5.sh --scale smoke   # ~3 min on 2 idle cores: every stage with 20-40 steps (plumbing)
#   examples/replicate_t5.sh --scale full    # ~30 min on 2 idle CPU cores (65 on a busy one): docs/study-first-round.md
#
# Stages (runs go to runs/study/<scale>/, which git ignores; a rerun resumes finished/unfinished runs):
#   1. t2t-vocab: an 8k SentencePiece vocabulary on $T2T_DATA_DIR/corpus
#   2. t2t-train: pre-train configs/models/study-small.yaml with span corruption (Table 1's objective, Table 7
#      row "3") and, for Table 4's comparison, with prefix language modelling
#   3. t2t-train: fine-tune on the GLUE mixture from each pre-trained model, and from random weights
#      ("No pre-training", Table 1), same recipe and budget (full: 800 steps, then seed 0 on to 1,600);
#      and span corruption pre-trained on to 2,000 steps, then fine-tuned for 800 ("span_corruption_long")
#   4. t2t-eval:  every fine-tuned model on the full validation sets of CoLA, SST-2, MRPC, STS-B, RTE
#   The conditions run as chains side by side.
#   5. examples/summarize_study.py: the table and curves into docs/ (only for --scale full, unless --docs)
#
# Needs T2T_DATA_DIR with glue/ and corpus/ (default: ../shared/data next to the checkout). Seeds are fixed:
# pre-training uses seed 0 (initialisation, data order, noise); fine-tuning uses each seed of --seeds (data
# order, dropout, and the random initialisation of "no pre-training"); full: "0 1" for span corruption and no
# pre-training, seed 0 for prefix LM. --conditions picks a subset (default "span_corruption prefix_lm scratch
# span_corruption_long").
# Each process uses one thread (OMP_NUM_THREADS=1); the conditions run side by side (JOBS=1: one at a time).
set -euo pipefail

SCALE=smoke
DOCS=0
SEEDS=""
CONDITIONS="span_corruption prefix_lm scratch span_corruption_long"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --scale) SCALE="$2"; shift 2 ;;
    --scale=*) SCALE="${1#*=}"; shift ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --conditions) CONDITIONS="$2"; shift 2 ;;
    --docs) DOCS=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1; use --scale smoke|full [--seeds '0 1'] [--conditions '...'] [--docs]" >&2
       exit 2 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export T2T_DATA_DIR="${T2T_DATA_DIR:-$ROOT/../shared/data}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
JOBS="${JOBS:-4}"

case "$SCALE" in
  smoke) PRETRAIN_STEPS=20; FINETUNE_STEPS=20; SAVE=10; EVAL_EVERY=10; EVAL_MAX="--max-examples 40"; LOG=5
         SEEDS="${SEEDS:-0}"; LONG_STEPS=40; LONG_PRETRAIN=40 ;;
  full)  PRETRAIN_STEPS=800; FINETUNE_STEPS=800; SAVE=200; EVAL_EVERY=200; EVAL_MAX=""; LOG=20
         SEEDS="${SEEDS:-0 1}"; LONG_STEPS=1600; LONG_PRETRAIN=2000 ;;
  *) echo "error: --scale must be smoke or full, not $SCALE" >&2; exit 2 ;;
esac
[[ "$SCALE" == full ]] && DOCS=1

OUT="runs/study/$SCALE"
VOCAB="runs/study/vocab/corpus8k.model"
# Table 1's pair (span corruption vs no pre-training) is fine-tuned once per seed in SEEDS (seed 0 is also the
# pre-training and initialisation seed); the other objectives are fine-tuned with the first seed only.
read -r -a SEED_LIST <<<"$SEEDS"
GLUE_TASKS=(cola sst2 mrpc stsb rte)
mkdir -p "$OUT/logs"
TIMES="$OUT/timings.jsonl"

# stage NAME CMD...: run CMD with its output in $OUT/logs/NAME.log and its wall time in timings.jsonl
stage() {
  local name="$1"; shift
  local start end
  start=$(date +%s)
  echo "[$(date -u +%H:%M:%S)] start $name"
  if "$@" >"$OUT/logs/$name.log" 2>&1; then
    end=$(date +%s)
    echo "{\"stage\": \"$name\", \"seconds\": $((end - start)), \"start\": $start, \"end\": $end}" >>"$TIMES"
    echo "[$(date -u +%H:%M:%S)] done  $name ($((end - start)) s)"
  else
    echo "[$(date -u +%H:%M:%S)] FAILED $name; see $OUT/logs/$name.log" >&2
    tail -5 "$OUT/logs/$name.log" >&2
    return 1
  fi
}

# wait for background jobs until fewer than JOBS are running
throttle() { while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || FAIL=1; done; }
FAIL=0

study_start=$(date +%s)
echo "study scale=$SCALE conditions=$CONDITIONS fine-tuning seeds=$SEEDS pretrain=$PRETRAIN_STEPS finetune=$FINETUNE_STEPS data=$T2T_DATA_DIR"

# 1. vocabulary (the corpus folder, read like the corpus tasks read it: .txt and .raw files, docs left out)
if [[ ! -f "$VOCAB" ]]; then
  stage vocab t2t-vocab "$T2T_DATA_DIR/corpus" --output "${VOCAB%.model}" --vocab-size 8000
fi

common=(--vocab "$VOCAB" --save-every "$SAVE" --log-every "$LOG")

evaluate() {  # evaluate RUN: every GLUE task's full validation set, one t2t-eval each
  local run="$1" task
  for task in "${GLUE_TASKS[@]}"; do
    # already evaluated (a rerun): the task's metrics are newer than the run's latest checkpoint
    [[ "$OUT/$run/eval/validation/glue_${task}_v002.metrics.json" -nt "$(ls -d "$OUT/$run"/step_* | tail -1)" ]] && continue
    t2t-eval --task "$task" --checkpoint "$OUT/$run" --vocab "$VOCAB" $EVAL_MAX --batch-size 64 \
      --output-dir "$OUT/$run/eval" || return 1
  done
}

finetune() {  # finetune CONDITION [--init-from RUN]: the GLUE mixture, same recipe and budget everywhere,
  local name="$1" seed run; shift  # once per seed (run folder finetune_<condition>, _seed<N> for N != 0)
  local seeds=("${SEED_LIST[@]}")
  [[ "$name" == scratch || "$name" == span_corruption ]] || seeds=("${SEED_LIST[0]}")
  for seed in "${seeds[@]}"; do
    run="finetune_$name"; [[ "$seed" == 0 ]] || run="finetune_${name}_seed$seed"
    stage "$run" t2t-train --config configs/recipes/study-finetune.yaml "${common[@]}" --seed "$seed" \
      --train-steps "$FINETUNE_STEPS" --eval-every "$EVAL_EVERY" --set eval_max_examples=96 "$@" \
      --output-dir "$OUT/$run" &&
    stage "eval_$run" evaluate "$run" || return 1
  done
  # seed 0 fine-tuned further, to LONG_STEPS: a copy of the finished run resumed with more steps (the constant
  # learning rate and exact resumption make it the same as one LONG_STEPS-step run)
  if [[ " ${seeds[*]} " == *" 0 "* && -n "${LONG_STEPS:-}" ]]; then
    local long="finetune_${name}_${LONG_STEPS}"
    if [[ ! -d "$OUT/$long" ]]; then
      rm -rf "$OUT/$long.tmp" && cp -r "$OUT/finetune_$name" "$OUT/$long.tmp" && rm -rf "$OUT/$long.tmp/eval" &&
      mv "$OUT/$long.tmp" "$OUT/$long"
    fi
    stage "$long" t2t-train --config configs/recipes/study-finetune.yaml "${common[@]}" --seed 0 \
      --train-steps "$LONG_STEPS" --eval-every "$EVAL_EVERY" --set eval_max_examples=96 "$@" \
      --output-dir "$OUT/$long" &&
    stage "eval_$long" evaluate "$long" || return 1
  fi
}

pretrain_then_finetune() {  # OBJECTIVE: pre-train on corpus_<objective> (seed 0), then fine-tune from it
  local objective="$1" target=32
  # a finished pre-training run is kept (t2t-train would only reload it)
  if [[ -d "$OUT/pretrain_$objective/step_$(printf %08d "$PRETRAIN_STEPS")" ]]; then
    finetune "$objective" --init-from "$OUT/pretrain_$objective"; return
  fi
  # prefix LM's targets are the rest of a 127-token chunk cut at a uniform point; 64 keeps its cost near span
  # corruption's on this CPU budget (longer continuations are truncated: the loss covers their first 63 tokens)
  [[ "$objective" == prefix_lm ]] && target=64
  stage "pretrain_$objective" t2t-train --task "corpus_$objective" --config configs/recipes/study-pretrain.yaml \
    "${common[@]}" --seed 0 --train-steps "$PRETRAIN_STEPS" --set target_length=$target \
    --output-dir "$OUT/pretrain_$objective" &&
  finetune "$objective" --init-from "$OUT/pretrain_$objective"
}

longer_pretraining() {  # span corruption pre-trained on to LONG_PRETRAIN steps (a resumed copy of the 800-step
  local pre="pretrain_span_corruption_$LONG_PRETRAIN" run="finetune_span_corruption_pre$LONG_PRETRAIN"
  while [[ ! -d "$OUT/pretrain_span_corruption/step_$(printf %08d "$PRETRAIN_STEPS")" ]]; do
    sleep 30  # run), then fine-tuned with seed 0 for FINETUNE_STEPS like the others
  done
  if [[ ! -d "$OUT/$pre" ]]; then
    rm -rf "$OUT/$pre.tmp" && cp -r "$OUT/pretrain_span_corruption" "$OUT/$pre.tmp" && mv "$OUT/$pre.tmp" "$OUT/$pre"
  fi
  stage "$pre" t2t-train --task corpus_span_corruption --config configs/recipes/study-pretrain.yaml \
    "${common[@]}" --seed 0 --train-steps "$LONG_PRETRAIN" --output-dir "$OUT/$pre" &&
  stage "$run" t2t-train --config configs/recipes/study-finetune.yaml "${common[@]}" --seed 0 \
    --train-steps "$FINETUNE_STEPS" --eval-every "$EVAL_EVERY" --set eval_max_examples=96 \
    --init-from "$OUT/$pre" --output-dir "$OUT/$run" &&
  stage "eval_$run" evaluate "$run"
}

# 2-5: one chain per condition, side by side (JOBS at a time): [pre-train →] fine-tune → evaluate
pids=()
for condition in $CONDITIONS; do
  throttle
  if [[ "$condition" == scratch ]]; then
    finetune scratch & pids+=($!)
  elif [[ "$condition" == span_corruption_long ]]; then
    longer_pretraining & pids+=($!)
  else
    pretrain_then_finetune "$condition" & pids+=($!)
  fi
done
for pid in "${pids[@]}"; do  # 127: already reaped by throttle, which recorded its status
  rc=0; wait "$pid" || rc=$?; [[ $rc == 0 || $rc == 127 ]] || FAIL=1
done
[[ $FAIL == 0 ]] || { echo "a run failed; see $OUT/logs" >&2; exit 1; }

study_end=$(date +%s)
echo "{\"stage\": \"total\", \"seconds\": $((study_end - study_start)), \"start\": $study_start, \"end\": $study_end}" >>"$TIMES"
echo "study finished in $((study_end - study_start)) s"

# 5. tables and plots
if [[ $DOCS == 1 ]]; then
  python examples/summarize_study.py "$OUT" --docs docs
else
  python examples/summarize_study.py "$OUT" --docs "$OUT/docs"
fi
