"""The ``plan`` command: the memory plan (:mod:`.memory_plan`) of a recipe's placement, per GPU and phase, as
a table on the terminal."""

from __future__ import annotations

import json
import re
from typing import Any

from seal_platform_libs.policy.memory_plan import ALL, GPU, LOAD, PHASES, EngineStart, MemoryPlan, plan


def _span(phases: tuple[str, ...]) -> str:
    if phases == ALL:
        return "always"
    if phases == tuple(p for p in ALL if p != LOAD):
        return "from engine start"
    return ", ".join(phases)


def _groups(gpus: list[GPU]) -> list[list[GPU]]:
    """GPUs in use, those holding the same parts together (their tables would be identical)."""
    groups: dict[Any, list[GPU]] = {}
    for gpu in gpus:
        if gpu.parts:
            key = tuple((p.what, round(p.gib, 6), p.phases) for p in gpu.parts)
            groups.setdefault(key, []).append(gpu)
    return list(groups.values())


def render(result: MemoryPlan) -> Any:
    """A rich renderable: a table per GPU in use (GPUs with the same parts share one), its total in each phase,
    vLLM's start-up rule, notes and problems."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    s = result.shape
    out: list[Any] = [Text(f"model {result.model}: {s.params() / 1e9:.2f} B parameters, {s.layers} layers, hidden "
                           f"{s.hidden}, MLP {s.intermediate}, {s.kv_heads} KV heads x {s.hd}, vocabulary {s.vocab}",
                           style="bold"),
                      Text("phases: load (trainer ranks load and shard), start-up (engines start beside them), push "
                           "(weights to the engines), rollout, update")]
    starts: dict[tuple[int, int], list[EngineStart]] = {}
    for e in result.engine_starts:
        starts.setdefault((e.node, e.gpu), []).append(e)
    for group in _groups(result.gpus):
        gpu = group[0]
        phases = gpu.phases()
        if len(group) == 1:
            names = f"GPU {gpu.index} (node {gpu.node}): {', '.join(gpu.holders)}"
        else:
            kinds = ", ".join(re.sub(r" \d+$", "", h) for h in gpu.holders)
            names = (f"GPUs {', '.join(str(g.index) for g in group)} (node "
                     f"{', '.join(sorted({str(g.node) for g in group}))}), alike: one {kinds} each")
        table = Table(title=f"{names} - peak {gpu.need():.1f} of {result.capacity_gib:g} GiB", title_justify="left")
        table.add_column("part")
        table.add_column("GiB", justify="right")
        table.add_column("held")
        for part in gpu.parts:
            table.add_row(part.what, f"{part.gib:.2f}", _span(part.phases))
        out.append(table)
        out.append(Text("  per phase (GiB): " + ", ".join(f"{p} {phases[p]:.1f}" for p in PHASES
                                                        if any(p in q.phases for q in gpu.parts))))
        for start in starts.get((gpu.node, gpu.index), []):
            out.append(Text(f"  vLLM start-up rule ({start.holder}): {start.free_gib:.1f} GiB free at its start >= "
                            f"{start.wants_gib:.1f} wanted (gpu_memory_utilization x GPU): "
                            f"{'met' if start.met else 'NOT met'}"))
    unused = [g for g in result.gpus if not g.parts]
    if unused and len(unused) < len(result.gpus):
        out.append(
            Text(f"unused GPUs: {len(unused)} (every GPU should hold a trainer rank or an engine)", style="yellow")
        )
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
    @click.option(
        "--gpu-memory", type=click.FloatRange(1, 10_000), required=True, help="GiB per GPU (an 80 GB card: 80)."
    )
    @click.option("--nodes", type=click.IntRange(1, 10_000), default=1, show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    def plan_command(args: tuple[str, ...], gpus: int, gpu_memory: float, nodes: int, as_json: bool) -> None:
        """The GPU memory plan of a recipe: plan RECIPE [key=value ...] --gpus N --gpu-memory GiB [--nodes M]

        Prints what each GPU holds under the recipe's placement (trainer ranks, vLLM replicas, the driver's
        copy) and exits 1, naming the largest part and the setting to change, when one would not fit. The
        model's shape comes from settings.policy.model's config.json, or from its name for the Qwen2.5
        (0.5B-7B) and Qwen3 (0.6B-8B) checkpoints. Figures: docs/scaling.md, "Memory plan"."""
        from seal_platform.commands import console, split_recipe_args
        from seal_platform.config import raise_for
        from seal_platform.planning import check_recipe, load_recipe, plugin_host_for
        from seal_platform.scaleout import cluster_for
        from seal_platform_libs.policy.on_ray import RAY

        recipe, overrides = split_recipe_args(args)
        config, issues, path = load_recipe(recipe, overrides)
        if config is None:
            raise_for(issues, str(path))
        assert config is not None  # load_recipe gives no config only with the issues raised above
        host = plugin_host_for(config)
        checked, issues = check_recipe(config, host)
        if checked is None:
            raise_for(issues, str(path))
        assert checked is not None  # likewise
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
