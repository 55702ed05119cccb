#!/usr/bin/env bash
# Everything t2t checks and measures on a GPU, in one command, on a machine with CUDA, torch and transformers
# (and nai-t5 for bench_peers.py):
#
#     bash benchmarks/run_gpu.sh [RESULTS_DIR] [tests|bench|all]
#
# tests: the test files whose CUDA paths the CPU cannot take (FlexAttention gradients and training, compiled
# training and decoding, decoding replayed as CUDA graphs, the fused projections, which use the GPU when there
# is one, and Adafactor's step, which must not wait for the device); bench: bench_packed_bias.py (packed rows
# with a position bias each or one shared, a minute), bench_optimizer.py (an optimizer step of t5.1.1-base:
# t2t's Adafactor against torch's, transformers' and fused AdamW, a minute), bench_peers.py (t5-small against
# transformers and nai-t5, and t2t with separate projections, a few minutes), bench_precision.py (bf16 and
# fp16), bench_memory.py (activation checkpointing's memory and time, a minute), bench_gpu.py
# (t5.1.1-base at nanoT5's setting against transformers, the longest) and, where $T2T_DATA_DIR holds GLUE and
# the vocabulary, bench_data_wait.py (real training steps on GLUE: do they wait for their batches?) on the GPU.
# Exit status 1 if any failed.
set -uo pipefail
out=${1:-benchmarks/results}
what=${2:-all}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
if [[ $what != bench ]]; then
    fused=tests/models/test_architectures.py::test_fused_projections_give_the_separate_products_loss_and_gradients
    python -m pytest -q -p no:cacheprovider -W ignore::UserWarning tests/models/test_flex_attention.py \
        tests/models/test_compiled_decoding.py tests/models/test_cuda_graph_decoding.py \
        tests/training/test_compiled_training.py tests/training/test_optim.py "$fused" || status=1
fi
if [[ $what != tests ]]; then  # the quick ones first: leases of GPU time are often short
    python benchmarks/bench_packed_bias.py --device cuda --preset t5.1.1-base --batch 128 --precision bf16 \
        --out "$out/packed-bias-cuda.json" || status=1
    python benchmarks/bench_optimizer.py --device cuda --preset t5.1.1-base --out "$out/optimizer-cuda.json" \
        || status=1
    if python -c "import nai_t5" 2>/dev/null; then
        python benchmarks/bench_peers.py --device cuda --precision bf16 --workloads train greedy encoder \
            --other-projections --out "$out/peers-cuda.json" || status=1
    else
        echo "nai-t5 is not installed: bench_peers.py skipped (pip install nai-t5)"
    fi
    python benchmarks/bench_precision.py --device cuda --out "$out/precision-cuda.json" || status=1
    python benchmarks/bench_memory.py --device cuda --preset t5.1.1-base --out "$out/memory-cuda.json" || status=1
    python benchmarks/bench_gpu.py --out "$out/gpu.json" || status=1
    if [[ -d ${T2T_DATA_DIR:-/nonexistent}/glue ]]; then
        python benchmarks/bench_data_wait.py --optimizers adafactor adamw --profile --out "$out/data-wait-cuda.json" \
            || status=1
    else
        echo "no glue/ under \$T2T_DATA_DIR: bench_data_wait.py skipped (it trains on GLUE)"
    fi
fi
exit $status
