"""The GPU memory checks of issue 49, for one lent GPU with torch, transformers and peft only (no vLLM, Ray or
model files: random weights of a published shape, built from its config). Each check prints one result line.

    python benchmarks/memory_checks.py A --tokenizer .gpu/tokenizer   # (A) a replica's start-up leaves vLLM its memory
    python benchmarks/memory_checks.py B                             # (B) the trainer's reserve after empty_cache
    python benchmarks/memory_checks.py C                             # (C) a 1-rank FSDP2 update against `plan`
    python benchmarks/memory_checks.py B --tiny --device cpu         # the same code on a tiny shape (tests)

(A) An engine replica's start-up path (``engines.remote.build_engine``, kind ``vllm``) up to vLLM's
    constructor, on a 7B-shaped config without weights. vLLM is not installed there, so a stand-in ``vllm``
    package (a temporary folder put first on ``sys.path``; it holds ``LLM`` only) records, when the replica
    calls ``vllm.LLM(...)``, the GPU's free memory and the arguments, then stops the start. Passes when the free
    memory is at least 0.9 x the GPU (vLLM's start-up rule at seal-gpu8's ``gpu_memory_utilization``) and no
    transformers model was built in the process.
(B) A trainer rank of a 7B-shaped model with a KL reference through the sharded trainer's start-up (rank 0
    builds the model in host memory, the rank receives its shards) and one update, as one FSDP2 rank holding 7
    of the 28 blocks (a quarter: what a rank of four holds of the blocks; the root stays whole). Passes when
    ``memory_reserved - memory_allocated`` after ``torch.cuda.empty_cache()`` is under 2 GiB (the memory plan's
    allocator reserve).
(C) One FSDP2 rank on the Qwen2.5-1.5B shape with gradient checkpointing, packed micro-batches of 8192 tokens
    and lr 1e-6: passes when more than 90% of the float32 master weights moved, and the peak of allocated
    memory in the update is within 10% of what ``seal-platform plan``'s formulas give for it (their parts of the
    update phase but the CUDA context and the allocator's reserve, which ``max_memory_allocated`` does not see).

On a CPU (``--device cpu``) the checks run the same code and report the memory figures as not measured.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 2**30
FREE_AT_START = 0.9  # seal-gpu8's engine.vllm.gpu_memory_utilization: vLLM refuses to start below it
RESERVE_LIMIT_GIB = 2.0  # the memory plan's ALLOCATOR_RESERVE_GIB
PLAN_TOLERANCE = 0.10


@dataclass
class Result:
    check: str
    passed: bool | None  # None: not run (says why)
    line: str

    def __str__(self) -> str:
        verdict = {True: "PASS", False: "FAIL", None: "NOT RUN"}[self.passed]
        return f"({self.check}) {self.line}: {verdict}"


def shape_config(name: str, layers: int | None = None) -> dict[str, Any]:
    """A Qwen2 ``config.json`` of the memory plan's known shape ``name`` (``tiny``: a 2-layer toy)."""
    from seal_platform_libs.policy.model_shape import KNOWN, Shape

    shape = Shape(64, 128, 2, 4, 2, 512, True) if name == "tiny" else KNOWN[name]
    return dict(model_type="qwen2", hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                num_hidden_layers=layers or shape.layers, num_attention_heads=shape.heads,
                num_key_value_heads=shape.kv_heads, vocab_size=shape.vocab, tie_word_embeddings=shape.tied,
                max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6)


def build_model(config: dict[str, Any]) -> Any:
    """A float32 model of ``config`` with random weights, in host memory (what rank 0 loads)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in config.items() if k != "model_type"}
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields), dtype=torch.float32)


def samples(vocab: int, sequences: int, prompt: int, completion: int, group: int, seed: int = 0) -> list[Any]:
    """Random-token samples, ``group`` per task, half of each group rewarded."""
    import torch

    from seal_platform_plugins.grpo.objective import group_advantages
    from seal_platform_plugins.grpo.samples import Sample

    gen = torch.Generator().manual_seed(seed)
    rewards = [float(i % 2) for i in range(sequences)]
    groups = [str(i // group) for i in range(sequences)]
    adv = group_advantages(rewards, groups)
    out = []
    for i in range(sequences):
        ids = torch.randint(0, vocab, (prompt + completion,), generator=gen).tolist()
        out.append(Sample(id=str(i), group=groups[i], input_ids=ids, positions=list(range(prompt, prompt + completion)),
                          advantage=adv[i]))
    return out


@contextlib.contextmanager
def worker(config: dict[str, Any], grpo: Any, device: str) -> Iterator[Any]:
    """One FSDP2 trainer rank (world size 1) of ``config``'s random model, closed afterwards."""
    from seal_platform_libs.policy.loading import PolicySettings
    from seal_platform_plugins.grpo.distributed import free_port
    from seal_platform_plugins.grpo.sharded import TrainerWorker, WorkerOptions

    options = WorkerOptions(grpo=grpo, policy=PolicySettings(), pad_id=0, device=device,
                            build_model=functools.partial(build_model, config))
    rank = TrainerWorker(0, 1, "127.0.0.1", free_port(), options)
    try:
        yield rank
    finally:
        rank.close()


# --- (A) ------------------------------------------------------------------------------------------------------

STAND_IN = '''
"""A stand-in for vLLM (benchmarks/memory_checks.py, check (A)): records the moment a replica starts vLLM."""
import json, os

__version__ = "0.0.0+memory-check"


class StartRecorded(RuntimeError):
    pass


class LLM:
    def __init__(self, model=None, **kwargs):
        import torch

        seen = {"model": str(model), "load_format": kwargs.get("load_format"),
                "gpu_memory_utilization": kwargs.get("gpu_memory_utilization")}
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            seen.update(free=free, total=total)
        with open(os.environ["SEAL_MEMORY_CHECK_PROBE"], "w") as f:
            json.dump(seen, f)
        raise StartRecorded("vllm.LLM reached: the start-up is recorded")
'''


def check_a(shape: str, tokenizer_dir: str, device: str) -> Result:
    """(A): see the module's docstring. Run it in a fresh process (nothing else on the GPU)."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    what = f"replica start-up, {shape} shape, {device}"
    try:
        from seal_platform_libs.policy.engines.remote import build_engine
        from seal_platform_libs.policy.engines.settings import EngineSettings
        from seal_platform_libs.policy.engines.spec import PolicySpec
    except ImportError as exc:
        return Result("A", None, f"{what}: this tree has no replica start from a PolicySpec ({exc})")
    built: list[str] = []
    original = transformers.PreTrainedModel.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    with tempfile.TemporaryDirectory() as tmp:
        folder, probe = Path(tmp) / "model", Path(tmp) / "probe.json"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(shape_config(shape)))
        (Path(tmp) / "vllm").mkdir()
        (Path(tmp) / "vllm" / "__init__.py").write_text(textwrap.dedent(STAND_IN))
        os.environ["SEAL_MEMORY_CHECK_PROBE"] = str(probe)
        sys.path.insert(0, tmp)
        transformers.PreTrainedModel.__init__ = counting  # type: ignore[method-assign]
        try:
            if device == "cuda":
                torch.cuda.init()  # the replica's CUDA context exists when vLLM measures
            spec = PolicySpec(config=shape_config(shape), name_or_path=str(folder), dtype="float32")
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
            settings = EngineSettings(vllm={"gpu_memory_utilization": FREE_AT_START})
            try:
                build_engine("vllm", settings, spec, tokenizer, 0)
            except Exception as exc:  # noqa: BLE001 - the stand-in stops the start; anything else is reported
                if not probe.is_file():
                    return Result("A", False, f"{what}: the start failed before vLLM: {type(exc).__name__}: {exc}")
        finally:
            transformers.PreTrainedModel.__init__ = original  # type: ignore[method-assign]
            sys.path.remove(tmp)
            sys.modules.pop("vllm", None)
        if not probe.is_file():
            return Result("A", False, f"{what}: the replica never started vLLM")
        seen = json.loads(probe.read_text())
    models = f"transformers models built: {len(built)}{' (' + ', '.join(built) + ')' if built else ''}"
    start = f"vLLM started from {'dummy weights' if seen['load_format'] == 'dummy' else 'the checkpoint folder'}"
    if "free" not in seen:
        return Result("A", not built, f"{what}: {models}; {start}; free memory not measured on {device}")
    share = seen["free"] / seen["total"]
    line = (f"{what}: free {seen['free'] / GIB:.1f} of {seen['total'] / GIB:.1f} GiB when vLLM starts ({share:.3f} x "
            f"total, needs >= {FREE_AT_START}); {models}; {start}")
    return Result("A", share >= FREE_AT_START and not built, line)


# --- (B) ------------------------------------------------------------------------------------------------------


def check_b(shape: str, device: str, tiny: bool = False) -> Result:
    """(B): see the module's docstring."""
    import torch

    from seal_platform_plugins.grpo.settings import GRPOSettings

    full = shape_config(shape)
    layers = max(1, full["num_hidden_layers"] // 4)
    config = shape_config(shape, layers)
    tokens, group = (64, 2) if tiny else (2048, 8)
    grpo = GRPOSettings(kl_coef=0.001, gradient_checkpointing=True, pack_sequences=True, micro_batch_size=4,
                        max_tokens_per_micro_batch=4 * tokens, mini_batch_tasks=2)
    what = (f"trainer start-up + sharding + one update, {shape} shape ({layers} of {full['num_hidden_layers']} "
            f"blocks: one rank's quarter), KL reference, {device}")
    with worker(config, grpo, device) as rank:
        rank.step(samples(config["vocab_size"], 2 * group, tokens // 2, tokens // 2, group))
        if device != "cuda":
            return Result("B", None, f"{what}: ran; the allocator's reserve is measured on CUDA only")
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        ref = next((p.dtype for p in getattr(rank.trainer, "ref_model", torch.nn.Module()).parameters()), None)
    slack = (reserved - allocated) / GIB
    line = (f"{what}: after empty_cache allocated {allocated / GIB:.2f} GiB, reserved {reserved / GIB:.2f} GiB, "
            f"reserved - allocated {slack:.2f} GiB (< {RESERVE_LIMIT_GIB:g}); reference dtype {ref}")
    return Result("B", slack < RESERVE_LIMIT_GIB, line)


# --- (C) ------------------------------------------------------------------------------------------------------


def planned_update_gib(shape_name: str, grpo: Any) -> float:
    """What the memory plan gives a 1-rank FSDP2 worker's update, less the CUDA context and allocator reserve."""
    from seal_platform_libs.policy.memory_plan import UPDATE, trainer_parts
    from seal_platform_libs.policy.model_shape import Shape

    shape = Shape.from_config(shape_config(shape_name))
    parts = trainer_parts(shape, grpo, "float32", 1, sharded=True)
    return sum(p.gib for p in parts if UPDATE in p.phases and p.setting != "-")


def check_c(shape: str, device: str, tiny: bool = False) -> Result:
    """(C): see the module's docstring."""
    import torch

    from seal_platform_plugins.grpo.settings import GRPOSettings

    config = shape_config(shape)
    tokens, group = (64, 2) if tiny else (2048, 8)
    grpo = GRPOSettings(lr=1e-6, kl_coef=0.001, gradient_checkpointing=True, pack_sequences=True, micro_batch_size=4,
                        max_tokens_per_micro_batch=4 * tokens, mini_batch_tasks=2, logits_chunk_tokens=1024)
    what = f"one FSDP2 rank, {shape} shape, checkpointing, packed {4 * tokens}-token micro-batches, lr 1e-6, {device}"
    with worker(config, grpo, device) as rank:
        def full(p: Any) -> Any:
            return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().to("cpu", copy=True)

        before = [full(p) for p in rank.model.parameters()]
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        rank.step(samples(config["vocab_size"], 2 * group, tokens // 2, tokens // 2, group))
        peak = torch.cuda.max_memory_allocated() / GIB if device == "cuda" else None
        after = [full(p) for p in rank.model.parameters()]
        dtypes = {str(p.dtype).removeprefix("torch.") for p in rank.model.parameters()}
    moved = sum(int((a != b).sum()) for a, b in zip(after, before)) / sum(b.numel() for b in before)
    line = f"{what}: {100 * moved:.1f}% of the {'/'.join(sorted(dtypes))} master weights moved (> 90%)"
    passed = moved > 0.9 and dtypes == {"float32"}
    if peak is None:
        return Result("C", passed, f"{line}; peak memory measured on CUDA only")
    plan = planned_update_gib(shape, grpo)
    off = (peak - plan) / plan
    line += (
        f"; peak allocated {peak:.1f} GiB, plan {plan:.1f} GiB ({100 * off:+.0f}%, within {100 * PLAN_TOLERANCE:.0f}%)"
    )
    return Result("C", passed and abs(off) <= PLAN_TOLERANCE, line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=["A", "B", "C"])
    parser.add_argument("--tiny", action="store_true", help="a 2-layer toy shape (the CPU test)")
    parser.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    parser.add_argument("--tokenizer", default=os.environ.get("SEAL_PLATFORM_TEST_TOKENIZER", ".gpu/tokenizer"),
                        help="(A) a tokenizer folder, saved beside the config as vLLM's dummy start needs")
    args = parser.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.check == "A":
        result = check_a("tiny" if args.tiny else "qwen2.5-7b", args.tokenizer, device)
    elif args.check == "B":
        result = check_b("tiny" if args.tiny else "qwen2.5-7b", device, args.tiny)
    else:
        result = check_c("tiny" if args.tiny else "qwen2.5-1.5b", device, args.tiny)
    print(result, flush=True)
    sys.exit(0 if result.passed is not False else 1)


if __name__ == "__main__":
    main()
