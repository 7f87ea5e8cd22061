#!/usr/bin/env bash
# The GPU checks of one lent GPU machine (torch + transformers there, no vLLM or Ray, no seal-platform install,
# no model files): run from the repository root, with the wheels of the missing pure-Python dependencies in
# .whl/ and the SmolLM2 tokenizer's files in .gpu/tokenizer/ (see docs/scaling.md, "Which GPU paths have run, and where").
# Each part has its own time limit so that one slow part cannot take the others' time.
set -u
export PYTHONUNBUFFERED=1
LOG=${OUT:-/tmp}/gpu-checks.log
exec > >(tee "$LOG") 2>&1
source benchmarks/device_site.sh || exit 1
export SEAL_PLATFORM_TEST_TOKENIZER=$PWD/.gpu/tokenizer
nvidia-smi -L
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
part() { echo; echo "=== $1 (limit $2 s) ==="; local t0=$SECONDS; shift 2; "$@"; echo "=== rc $? in $((SECONDS - t0)) s ==="; }
# The memory checks of issue 49 (benchmarks/memory_checks.py; each prints one line ending PASS, FAIL or NOT RUN),
# each in a fresh process so that nothing else holds the GPU. `bash benchmarks/gpu_checks.sh memory` runs only
# these (about 5 minutes on an H200; 8 at most with the limits below).
memory_checks() {
  part "(A) replica start-up, Qwen2.5-7B shape: free memory when vLLM starts >= 0.9 x GPU, no transformers model" 90 \
    timeout 90 python3 benchmarks/memory_checks.py A --tokenizer .gpu/tokenizer
  part "(B) 7B-shaped trainer rank (a quarter of the blocks) + reference, start-up and one update: reserve < 2 GiB" 180 \
    timeout 180 python3 benchmarks/memory_checks.py B
  part "(C) one FSDP2 rank, Qwen2.5-1.5B shape: fp32 masters move at lr 1e-6, peak within 10% of the plan" 180 \
    timeout 180 python3 benchmarks/memory_checks.py C
}
if [ "${1:-}" = memory ]; then memory_checks; exit 0; fi
part "pytest: CUDA tests, IPC weight sync, precision, packing" 150 timeout 150 python3 -m pytest -q -p no:cacheprovider \
  tests/grpo/test_cuda.py tests/grpo/test_weight_sync_ipc.py tests/grpo/test_precision.py tests/grpo/test_packing.py
# The padded path peaks at 69-83 GiB on this batch and its seeds 1-4 (H200, 2026-11-27): on an 80 GB card skip this
# part or lower --micro. Five batches: add --seeds 0 1 2 3 4 and allow about 65 s per seed.
part "packed (prompts shared in the rows) vs padded vs packed unshared, Qwen2.5-1.5B shape, 200-5000 tokens" 150 \
  timeout 150 python3 benchmarks/bench_packed_update.py \
  --shape qwen2.5-1.5b --sequences 16 --group 4 --micro 8 --max-tokens-per-micro 16384 --repeats 2 --unshared
part "the same on a BFCL-shaped batch: one group of 8, 2,000-token prompt, gradient checkpointing" 120 \
  timeout 120 python3 benchmarks/bench_packed_update.py --shape qwen2.5-1.5b --sequences 8 --group 8 \
  --prompt-tokens 2000 --min-tokens 4000 --max-tokens 5000 --micro 8 --max-tokens-per-micro 40960 \
  --gradient-checkpointing --repeats 2 --unshared
python3 - <<'PY'
from seal_platform_libs.policy.testing import save_tiny_llama
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(".gpu/tokenizer")
tok.pad_token = tok.pad_token or tok.eos_token
save_tiny_llama("/tmp/tiny", tok)
PY
part "seal-platform run on CUDA (hf engine, tiny random model, smarthome-seal)" 90 timeout 90 python3 -m seal_platform run \
  smarthome-seal training.steps=2 rollout.engine=hf rollout.workers=32 settings.policy.model=/tmp/tiny \
  settings.policy.device=cuda settings.smarthome.n_eval=32 evaluation.every=2 settings.grpo.train_layers=null \
  rollout.dynamic_sampling.max_rounds=1 --store /tmp/e2e.sqlite --quiet
part "GRPO step, Qwen2.5-1.5B shape, 1-process FSDP2 over NCCL" 70 timeout 70 python3 benchmarks/bench_gpu_step.py --fsdp --steps 1
part "GRPO step, Qwen2.5-1.5B shape, plain trainer" 60 timeout 60 python3 benchmarks/bench_gpu_step.py --steps 1
part "probe: NCCL with two ranks on one GPU (expected: Duplicate GPU detected)" 45 timeout 45 python3 benchmarks/probe_nccl_same_gpu.py
part "weight sync per GB on one GPU: CUDA IPC vs host path" 90 timeout 90 python3 benchmarks/bench_weight_sync.py \
  --device cuda --size-mb 4096 --tensor-mb 64 --repeats 3
part "probe: CUDA IPC pushes to two colocated receivers leave no memory on the sender" 60 timeout 60 python3 benchmarks/probe_ipc_memory.py
memory_checks
