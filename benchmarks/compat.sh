#!/usr/bin/env bash
# Re-proves the torch, Python and transformers ranges setup.cfg declares, each in a fresh virtual environment
# installed the way a user installs t2t (torch first, then t2t with its extras):
#
#     T2T_DATA_DIR=/path/to/shared/data bash benchmarks/compat.sh [ENV ...] [--keep]
#
# ENV (default: all of them, one after another):
#   floor    Python 3.11, torch 2.7.1 (the floor setup.cfg declares), transformers 5
#   newest   Python 3.12, torch 2.15, transformers 5
#   py310    Python 3.10 (the oldest Python declared), torch 2.7.1
#   py313    Python 3.13 (the newest Python tested), torch 2.13
#   tf4      Python 3.11, torch 2.13, transformers 4.57 through the hf4 extra (huggingface_hub < 1.0)
# Each runs the model and data unit tests, HF interop (parity, conversion, export), 2-process DDP and FSDP
# against 1 process, and a 5-step training run on RTE. PyPI's torch wheels are CUDA builds of several GB: the
# machine's pip constraint file may cap torch below the one asked for, so its installs lift it. Logs and
# environments go under $COMPAT_DIR (default /tmp/t2t-compat); environments are deleted after their checks
# unless --keep. Exit status 1 if any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${COMPAT_DIR:-/tmp/t2t-compat}
keep=0
envs=()
for arg in "$@"; do
    if [[ $arg == --keep ]]; then keep=1; else envs+=("$arg"); fi
done
[[ ${#envs[@]} -gt 0 ]] || envs=(floor newest py310 py313 tf4)
mkdir -p "$out"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
[[ -n ${T2T_DATA_DIR:-} ]] || echo "T2T_DATA_DIR is not set: the real-data tests skip and the training run fails"

UNIT=(tests/test_config.py tests/models/test_model.py tests/models/test_flex_attention.py tests/data/test_vocab.py
      tests/data/test_preprocessors.py tests/data/test_features.py)
HF=(tests/models/test_hf_parity.py tests/checkpoints/test_hf.py tests/checkpoints/test_hf_family.py
    tests/checkpoints/test_export.py)
PROCESSES=(tests/training/test_train.py::test_two_processes_match_one tests/training/test_adafactor_sharded.py)

# name: python version, torch requirement, t2t's extras, further requirements
declare -A PYTHON=([floor]=3.11 [newest]=3.12 [py310]=3.10 [py313]=3.13 [tf4]=3.11)
declare -A TORCH=([floor]="torch==2.7.1" [newest]="torch==2.15.*" [py310]="torch==2.7.1" [py313]="torch==2.13.0"
                  [tf4]="torch==2.13.0")
declare -A EXTRAS=([floor]=test [newest]=test [py310]=test [py313]=test [tf4]=test,hf4)
declare -A MORE=([floor]="" [newest]="" [py310]="" [py313]="" [tf4]="transformers==4.57.*")

find_python() {  # a pyenv build of that version, else pythonX.Y on PATH
    local found
    found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$1".*/bin/python 2>/dev/null | sort -V | tail -1)
    echo "${found:-$(command -v "python$1")}"
}

check() {  # name, log, command...: runs the command, records its verdict
    local name=$1 log=$2
    shift 2
    if "$@" >>"$log" 2>&1; then echo "  ok      $name"; else echo "  FAILED  $name (see $log)"; status=1; return 1; fi
}

status=0
for env in "${envs[@]}"; do
    [[ -n ${PYTHON[$env]:-} ]] || { echo "unknown environment $env; choose from ${!PYTHON[*]}"; exit 2; }
    venv=$out/$env
    log=$out/$env.log
    python=$(find_python "${PYTHON[$env]}")
    [[ -n $python ]] || { echo "$env: no Python ${PYTHON[$env]} found"; status=1; continue; }
    rm -rf "$venv"
    : >"$log"
    "$python" -m venv "$venv"
    echo "$env: $("$venv/bin/python" --version), ${TORCH[$env]} ${MORE[$env]}"
    check install "$log" env PIP_CONSTRAINT=/dev/null "$venv/bin/pip" install "${TORCH[$env]}" || continue
    # shellcheck disable=SC2086
    check "install t2t[${EXTRAS[$env]}]" "$log" \
        env PIP_CONSTRAINT=/dev/null "$venv/bin/pip" install -e "$root[${EXTRAS[$env]}]" ${MORE[$env]}
    "$venv/bin/pip" list 2>/dev/null | grep -iE '^(torch|transformers|datasets|huggingface.hub|tokenizers) ' |
        sed 's/^/    /'
    check "model and data unit tests" "$log" "$venv/bin/python" -m pytest -q -p no:cacheprovider -m unit "${UNIT[@]}"
    check "HF interop" "$log" "$venv/bin/python" -m pytest -q -p no:cacheprovider "${HF[@]}"
    check "2 processes match 1 (DDP, FSDP)" "$log" "$venv/bin/python" -m pytest -q -p no:cacheprovider "${PROCESSES[@]}"
    rm -rf "$out/$env-run"  # a run folder left over would resume, not train
    check "t2t-train --task rte --config cpu-smoke --train-steps 5" "$log" "$venv/bin/t2t-train" --task rte \
        --config cpu-smoke --train-steps 5 --output-dir "$out/$env-run"
    [[ $keep == 1 ]] || rm -rf "$venv" "$out/$env-run"
done
exit $status
