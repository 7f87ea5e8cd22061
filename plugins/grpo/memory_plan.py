"""The GPU memory plan of a recipe: what each GPU holds under the recipe's placement, checked before a run.

``seal-platform plan RECIPE [key=value ...] --gpus N --gpu-memory GiB [--nodes M]`` prints it (registered by
the grpo plugin's ``register_commands``); ``run`` performs the same check before loading anything on CUDA
(grpo's ``check_machine``, with this machine's GPUs). The figures are the formulas of ``docs/scaling.md``
("Memory plan"), in GiB (2^30 bytes), for decoder-only transformers of the Llama/Qwen family (N and the
block and root sizes are counted on the architecture itself when the model's ``config.json`` is on disk:
:func:`.model_shape.counted_params`; the activation formulas stay those of a dense model):

trainer rank (full fine-tune, FSDP2 over W ranks; W = 1 is the single-process trainer)
    master weights (policy dtype) N x b / W; gradients (same dtype) N x b / W; AdamW moments 2 x N x b / W;
    KL reference (``grpo.kl_coef`` > 0) N x b / W; compute copies: W = 1 on CUDA with float32 weights,
    autocast's bf16 copies of the weights, 2 N; W > 1, FSDP's gathered bf16 root + two blocks and their
    unsharded float32 gradients (2 R + 4 B_l + 4 B_l + 4 R);
    activations of one micro-batch of T = ``grpo.max_tokens_per_micro_batch`` tokens, bf16: without
    checkpointing T x L x (10 h + 4 i) x 2 B; with it T x L x h x 2 B (each block's input; twice with
    ``checkpoint_keep_attention``) + T x (10 h + 4 i) x 2 B (one block recomputed);
    log-probs: C = ``grpo.logits_chunk_tokens`` loss tokens at a time, V x C x 12 B (bf16 logits, their
    float32 copy, the float32 log-softmax);
    LoRA instead of the first four: a frozen base N x b (also the reference: adapters off) and the adapters
    P = sum over targeted projections of r x (in + out) per layer, float32: 16 P.
vLLM replica
    it claims ``engine.vllm.gpu_memory_utilization`` x the GPU: bf16 weights 2 N, about 1 GiB of activations
    and graphs, the rest KV cache (2 x L x kv heads x head dim x 2 B per token), which must hold at least one
    sequence of ``max_model_len`` tokens.
driver copy
    with ``grpo.train_workers`` > 1 the driver keeps a full copy of the policy (the weight-sync source) on
    ``policy.device``: N x b on GPU 0 unless ``settings.policy.device: cpu``.
per process and GPU: 1 GiB of CUDA context and allocator slack.

Colocated engines (``grpo.placement.colocate`` with ``engine.vllm.sleep_mode``) sleep during the update: a shared GPU
needs max(rollout phase, update phase), where the trainer's resident part (weights, moments, reference) is
held in both and its transient part (gradients, activations, log-probs, compute copies) in the update only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .model_shape import Shape, shape_for

GIB = 2**30
CONTEXT_GIB = 1.0  # CUDA context + allocator slack per process and GPU
VLLM_OVERHEAD_GIB = 1.0  # vLLM's activations, sampler and CUDA graphs


@dataclass
class Part:
    what: str
    gib: float
    setting: str  # what to change when this part does not fit
    phase: str = "both"  # "both", "update" (trainer transient) or "rollout" (an awake engine)


@dataclass
class GPU:
    index: int
    node: int
    holders: list[str] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)

    def need(self, colocated_sleep: bool) -> float:
        """Peak GiB: a sleeping engine frees its share during the update; otherwise everything adds up."""
        if not colocated_sleep:
            return sum(p.gib for p in self.parts)
        update = sum(p.gib for p in self.parts if p.phase in ("both", "update"))
        rollout = sum(p.gib for p in self.parts if p.phase in ("both", "rollout"))
        return max(update, rollout)


@dataclass
class MemoryPlan:
    model: str
    shape: Shape
    gpus: list[GPU]
    capacity_gib: float
    colocated_sleep: bool
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "parameters": self.shape.params(), "capacity_gib": self.capacity_gib,
            "gpus": [{"index": g.index, "node": g.node, "holds": g.holders,
                      "parts": [{"what": p.what, "gib": round(p.gib, 2), "phase": p.phase} for p in g.parts],
                      "need_gib": round(g.need(self.colocated_sleep), 2)} for g in self.gpus],
            "notes": self.notes, "problems": self.problems,
        }


def _dtype_bytes(name: str) -> int:
    return 2 if name in ("bfloat16", "float16") else 4


def trainer_parts(shape: Shape, grpo: Any, policy_dtype: str, world: int, on_cuda: bool = True) -> list[Part]:
    """What one trainer rank holds (see the module's formulas)."""
    n, b = shape.params(), _dtype_bytes(policy_dtype)
    parts: list[Part] = []
    sharding = "more trainer ranks (settings.grpo.train_workers) or LoRA (settings.grpo.lora)"
    if grpo.lora is not None:
        p = shape.lora_params(grpo.lora.rank, list(grpo.lora.target_modules))
        parts.append(Part(f"frozen base ({policy_dtype}, also the KL reference)", n * b / GIB,
                          "settings.policy.dtype: bfloat16 for the frozen base"))
        parts.append(Part(f"LoRA adapters, gradients, AdamW moments (float32, {p / 1e6:.1f} M)", 16 * p / GIB,
                          "a smaller settings.grpo.lora.rank"))
    else:
        parts.append(Part(f"master weights ({policy_dtype})", n * b / world / GIB, sharding))
        parts.append(Part(f"gradients ({policy_dtype})", n * b / world / GIB, sharding, "update"))
        parts.append(Part(f"AdamW moments ({policy_dtype})", 2 * n * b / world / GIB, sharding))
        if grpo.kl_coef > 0:
            parts.append(Part(f"KL reference ({policy_dtype})", n * b / world / GIB, "settings.grpo.kl_coef: 0"))
        if world > 1:
            root, block = shape.root_params(), shape.block_params()
            parts.append(Part("FSDP gathered bf16 root + 2 blocks, unsharded float32 grads",
                              (2 * root + 4 * block + 4 * block + 4 * root) / GIB, sharding, "update"))
        elif on_cuda and b == 4 and grpo.autocast != "off":
            parts.append(Part("autocast's bf16 copies of the weights", 2 * n / GIB,
                              "settings.grpo.train_workers > 1 (FSDP gathers block by block)", "update"))
    tokens = grpo.max_tokens_per_micro_batch or 16384
    h, i, layers = shape.hidden, shape.intermediate, shape.layers
    per_block = (10 * h + 4 * i) * 2
    if grpo.gradient_checkpointing:
        kept = h * 2 * layers * (2 if grpo.checkpoint_keep_attention else 1)
        act = tokens * (kept + per_block)
        what = f"activations, {tokens} tokens, checkpointing"
    else:
        act = tokens * per_block * layers
        what = f"activations, {tokens} tokens, no checkpointing"
    parts.append(Part(what, act / GIB, "settings.grpo.gradient_checkpointing: true, or a smaller "
                      "settings.grpo.max_tokens_per_micro_batch", "update"))
    chunk = min(grpo.logits_chunk_tokens or tokens, tokens)
    parts.append(Part(f"log-probs of {chunk} loss tokens (vocabulary {shape.vocab})", chunk * shape.vocab * 12 / GIB,
                      "a smaller settings.grpo.logits_chunk_tokens", "update"))
    parts.append(Part("CUDA context, allocator slack", CONTEXT_GIB, "-"))
    return parts


def engine_parts(shape: Shape, vllm: Any, capacity: float, max_model_len: int, sleeping: bool) -> tuple[list[Part], float]:
    """One vLLM replica on a GPU of ``capacity`` GiB; returns its parts and its KV cache in GiB."""
    share = vllm.gpu_memory_utilization * capacity
    weights = 2 * shape.params() / GIB
    kv = share - weights - VLLM_OVERHEAD_GIB
    phase = "rollout" if sleeping else "both"
    setting = "settings.engine.vllm.gpu_memory_utilization"
    parts = [Part("vLLM weights (bf16)", weights, setting, phase),
             Part("vLLM activations, graphs", VLLM_OVERHEAD_GIB, setting, phase),
             Part(f"vLLM KV cache ({int(max(kv, 0) * GIB / shape.kv_bytes_per_token()):,} tokens)", max(kv, 0.0),
                  setting, phase)]
    return parts, kv


def plan(config: Any, settings: dict[str, Any], gpus: int, gpu_memory: float, nodes: int = 1,
         on_ray: bool = False) -> MemoryPlan:
    """The memory plan of ``config`` (with its plugins' validated ``settings``) on ``nodes`` machines of ``gpus``
    GPUs of ``gpu_memory`` GiB each; ``on_ray``: the run's cluster is Ray (engine replicas and trainer workers
    are actors placed per ``grpo.placement``)."""
    from .engines.settings import EngineSettings, local_devices
    from .policy import PolicySettings
    from .settings import GRPOSettings

    grpo = settings.get("grpo") or GRPOSettings()
    policy = settings.get("policy") or PolicySettings()
    engine = settings.get("engine") or EngineSettings()
    shape = shape_for(policy.model)
    place = grpo.placement
    world = grpo.train_workers
    replicas = grpo.replicas
    vllm = config.rollout.engine == "vllm"
    colocate = bool(on_ray and place.colocate)
    sleeping = colocate and engine.vllm.sleep_mode
    total = gpus * nodes
    devices = [GPU(index=k % gpus, node=k // gpus) for k in range(total)]
    result = MemoryPlan(policy.model, shape, devices, gpu_memory, sleeping)
    policy_on_gpu = policy.device.startswith("cuda") or policy.device == "auto"
    dtype = policy.resolved_dtype()
    # Where the trainer ranks go: Ray actors (trainer_gpus each) or local ranks cuda:0..W-1 (W > 1), or the
    # driver's own device (W = 1).
    trainer_gpus: list[int] = []
    if world > 1:
        trainer_gpus = list(range(world))
    elif policy_on_gpu:
        trainer_gpus = [0]
    if on_ray and world > 1 and place.trainer_gpus == 0:
        trainer_gpus = []
        result.notes.append("trainer actors without GPUs (settings.grpo.placement.trainer_gpus 0): the update runs on their CPUs")
    engine_gpus: list[int] = []
    if vllm:
        if on_ray and replicas >= 1 and place.engine_gpus > 0:
            start = 0 if colocate else len(trainer_gpus)
            engine_gpus = [start + r for r in range(replicas)]
        elif not on_ray:  # one in-process engine beside the trainer, or a local replica per GPU (engine.gpus)
            local = local_devices(engine, gpus)
            engine_gpus = ([0] if policy_on_gpu else []) if local is None else [d for d in local if d is not None]
    needed = max([*trainer_gpus, *engine_gpus, -1]) + 1
    if needed > total:
        result.problems.append(
            f"the placement needs {needed} GPUs ({len(trainer_gpus)} for trainer ranks, {len(engine_gpus)} for "
            f"vLLM replicas{', shared' if colocate else ''}) but {nodes} node(s) x {gpus} = {total} are given: "
            "set settings.grpo.train_workers / settings.grpo.replicas, or settings.grpo.placement.colocate: true")
        return result
    for rank, k in enumerate(trainer_gpus):
        devices[k].holders.append(f"trainer rank {rank}" if world > 1 else "trainer")
        devices[k].parts += trainer_parts(shape, grpo, dtype, world)
    max_len = engine.vllm.max_model_len or 32768
    for r, k in enumerate(engine_gpus):
        devices[k].holders.append(f"vLLM replica {r}" if len(engine_gpus) > 1 else "vLLM")
        parts, kv = engine_parts(shape, engine.vllm, gpu_memory, max_len, sleeping and k in trainer_gpus)
        devices[k].parts += parts
        if kv * GIB < max_len * shape.kv_bytes_per_token():
            result.problems.append(
                f"GPU {k}: vLLM gets {engine.vllm.gpu_memory_utilization:.2f} x {gpu_memory:g} GiB, which after its "
                f"weights ({2 * shape.params() / GIB:.1f} GiB) leaves {max(kv, 0):.1f} GiB of KV cache, less than "
                f"one sequence of settings.engine.vllm.max_model_len {max_len} tokens "
                f"({max_len * shape.kv_bytes_per_token() / GIB:.1f} GiB): raise settings.engine.vllm.gpu_memory_utilization "
                "or lower settings.engine.vllm.max_model_len")
    if world > 1:
        if policy_on_gpu:
            devices[0].holders.append("driver copy")
            devices[0].parts.append(Part(f"driver's full policy copy ({dtype}, weight-sync source)",
                                         shape.params() * _dtype_bytes(dtype) / GIB, "settings.policy.device: cpu"))
        else:
            result.notes.append("the driver's full policy copy (weight-sync source) is in host memory "
                                f"({shape.params() * _dtype_bytes(dtype) / GIB:.1f} GiB)")
    for gpu in devices:
        need = gpu.need(sleeping)
        if need > gpu_memory:
            largest = max(gpu.parts, key=lambda p: p.gib)
            result.problems.append(
                f"GPU {gpu.index} of node {gpu.node} ({', '.join(gpu.holders)}) would need {need:.1f} GiB of "
                f"{gpu_memory:g}: the largest part is {largest.what} ({largest.gib:.1f} GiB); change "
                f"{largest.setting}")
    if not any(g.parts for g in devices):
        result.notes.append("nothing of this recipe runs on a GPU (settings.policy.device and the engine are on the CPU)")
    return result


def render(result: MemoryPlan) -> Any:
    """A rich renderable: one table per GPU in use, notes and problems."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    s = result.shape
    out: list[Any] = [Text(f"model {result.model}: {s.params() / 1e9:.2f} B parameters, {s.layers} layers, hidden "
                           f"{s.hidden}, MLP {s.intermediate}, {s.kv_heads} KV heads x {s.hd}, vocabulary {s.vocab}",
                           style="bold")]
    for gpu in result.gpus:
        if not gpu.parts:
            continue
        need = gpu.need(result.colocated_sleep)
        table = Table(title=f"GPU {gpu.index} (node {gpu.node}): {', '.join(gpu.holders)} - {need:.1f} of "
                            f"{result.capacity_gib:g} GiB", title_justify="left")
        table.add_column("part")
        table.add_column("GiB", justify="right")
        table.add_column("when")
        for part in gpu.parts:
            when = {"both": "always", "update": "update", "rollout": "rollout (sleeps in the update)"}[part.phase]
            table.add_row(part.what, f"{part.gib:.2f}", when)
        out.append(table)
    unused = [g for g in result.gpus if not g.parts]
    if unused and len(unused) < len(result.gpus):
        out.append(Text(f"unused GPUs: {len(unused)} (every GPU should hold a trainer rank or an engine)", style="yellow"))
    out += [Text(f"note: {n}") for n in result.notes]
    out += [Text(f"does not fit: {p}", style="bold red") for p in result.problems]
    if not result.problems:
        out.append(Text("fits", style="bold green"))
    return Group(*out)


def add_command(cli: Any) -> None:
    """Add ``plan`` to the CLI (through the grpo plugin's ``register_commands``)."""
    import sys

    import click

    @cli.command("plan")
    @click.argument("args", nargs=-1)
    @click.option("--gpus", type=click.IntRange(1, 1024), required=True, help="GPUs per node.")
    @click.option("--gpu-memory", type=click.FloatRange(1, 10_000), required=True, help="GiB per GPU (an 80 GB card: 80).")
    @click.option("--nodes", type=click.IntRange(1, 10_000), default=1, show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    def plan_command(args: tuple[str, ...], gpus: int, gpu_memory: float, nodes: int, as_json: bool) -> None:
        """The GPU memory plan of a recipe: plan RECIPE [key=value ...] --gpus N --gpu-memory GiB [--nodes M]

        Prints what each GPU holds under the recipe's placement (trainer ranks, vLLM replicas, the driver's
        copy) and exits 1, naming the largest part and the setting to change, when one would not fit. The
        model's shape comes from settings.policy.model's config.json, or from its name for the Qwen2.5
        (0.5B-7B) and Qwen3 (0.6B-8B) checkpoints. Figures: docs/scaling.md, "Memory plan"."""
        from seal_platform.cli import _split_recipe_args, console
        from seal_platform.config import raise_for
        from seal_platform.planning import check_recipe, load_recipe, plugin_host_for
        from seal_platform.scaleout import cluster_for

        from .on_ray import RAY

        recipe, overrides = _split_recipe_args(args)
        config, issues, path = load_recipe(recipe, overrides)
        if config is None:
            raise_for(issues, str(path))
        host = plugin_host_for(config)
        checked, issues = check_recipe(config, host)
        if checked is None:
            raise_for(issues, str(path))
        cluster = cluster_for(host, checked.config, checked.settings)
        try:
            result = plan(checked.config, checked.settings, gpus, gpu_memory, nodes,
                          on_ray=cluster is not None and cluster.name == RAY)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        if as_json:
            click.echo(json.dumps(result.to_dict(), indent=2))
        else:
            console.print(render(result))
        if result.problems:
            sys.exit(1)
