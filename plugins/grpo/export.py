"""``seal-platform export-merged RUN OUT [--step N]``: a run's checkpoint as a full Hugging Face model directory.

For a LoRA run the base model named by the run's ``policy`` settings is loaded, the checkpoint's adapters
are put on it (after checking they were trained on that base) and folded into its weights
(``merge_and_unload``); for a full fine-tuning run the checkpoint's weights are loaded into the model. Either
way the result is a plain transformers directory (config, safetensors, tokenizer) that vLLM, transformers or
any other tool loads without peft, plus ``seal_export.json`` saying where it came from. The directory is
written next to OUT and renamed into place, so an interrupted export leaves nothing half-written.

Registered through the grpo plugin's ``register_commands`` hook; torch, transformers and peft are imported
only when the command runs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from seal_platform.errors import SealError

EXPORT_FILE = "seal_export.json"


def _checkpoint_dir(store: Any, run_id: str, step: int | None) -> tuple[int, Path]:
    from . import checkpoint

    rows = [c for c in store.checkpoints(run_id) if (Path(c.path) / checkpoint.SUBDIR / "state.json").is_file()]
    if step is not None:
        rows = [c for c in rows if c.step == step]
    if not rows:
        which = f"at step {step}" if step is not None else "with grpo weights"
        raise SealError(f"run {run_id} has no checkpoint {which} (see `seal-platform show {run_id}`).")
    last = rows[-1]
    return int(last.step), Path(last.path)


def export_merged(run_config: dict[str, Any], checkpoint_dir: Path, out: Path) -> dict[str, Any]:
    """Write the merged model of ``checkpoint_dir`` (a run's checkpoint, written with ``run_config``'s
    settings) into the new directory ``out``; return what ``seal_export.json`` records."""
    import torch
    from safetensors.torch import load_model

    from seal_platform_libs.policy import lora
    from seal_platform_libs.policy.loading import PolicySettings, load_policy

    from . import checkpoint
    from .settings import GRPOSettings

    sections = run_config.get("settings") or {}
    policy = PolicySettings.model_validate(sections.get("policy") or {}).model_copy(update={"device": "cpu"})
    grpo = GRPOSettings.model_validate(sections.get("grpo") or {})
    src = checkpoint_dir / checkpoint.SUBDIR
    state = json.loads((src / "state.json").read_text())
    model, tokenizer = load_policy(policy)
    record: dict[str, Any] = {"checkpoint": str(checkpoint_dir), "step": state.get("step"),
                              "updates": state.get("updates"), "lora": bool(state.get("lora"))}
    if state.get("lora"):
        if grpo.lora is None:
            raise SealError(f"{src} holds LoRA adapters but the run's recipe has no settings.grpo.lora.")
        model = lora.wrap(model, grpo.lora)
        try:
            checkpoint._load_lora(src, model)
        except (ValueError, FileNotFoundError) as exc:
            raise SealError(str(exc)) from exc
        record["base"] = json.loads((src / checkpoint.BASE_FILE).read_text())
        record["lora_settings"] = grpo.lora.model_dump()
        with torch.no_grad():
            model = lora.merged_model(model)
    else:
        weights = src / "model.safetensors"
        if not weights.is_file():
            raise SealError(f"{weights} is missing: the checkpoint holds no policy weights.")
        missing, unexpected = load_model(model, str(weights), strict=False)
        if missing or unexpected:
            raise SealError(f"{weights} does not fit policy {policy.model!r} (missing {sorted(missing)[:3]}, "
                            f"unexpected {sorted(unexpected)[:3]}).")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SealError(f"{out} already exists and is not empty: name a new directory.")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / EXPORT_FILE).write_text(json.dumps(record, indent=2, default=str))
        staging.chmod(0o755)
        if out.exists():
            out.rmdir()
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


def add_commands(cli: click.Group) -> None:
    """Add ``export-merged`` to the CLI."""
    from seal_platform.commands import console, open_store, store_option

    @cli.command("export-merged")
    @click.argument("run_id", metavar="RUN")
    @click.argument("out", type=click.Path(file_okay=False, path_type=Path))
    @click.option("--step", type=int, default=None, help="The checkpoint's step (default: the last checkpoint).")
    @store_option
    def export_merged_command(run_id: str, out: Path, step: int | None, store_url: str | None) -> None:
        """Write a run's checkpoint as a full Hugging Face model directory OUT (LoRA adapters merged)."""
        store = open_store(store_url)
        row = store.get_run(run_id)
        done, directory = _checkpoint_dir(store, row.id, step)
        record = export_merged(row.config, directory, out)
        kind = "LoRA adapters merged into the base" if record["lora"] else "full weights"
        console.print(f"wrote {out} (run {row.id}, checkpoint after step {done}: {kind})", highlight=False)
