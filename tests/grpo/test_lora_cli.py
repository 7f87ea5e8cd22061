"""A LoRA run as a user drives it, on the tiny model and the seal-arithmetic example environment: it stops
with a failure, `run --resume` continues it from the adapter checkpoint, `eval` evaluates the checkpoint, and
`export-merged` writes a plain transformers model whose logits are the adapted policy's."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
arith = pytest.importorskip("seal_arithmetic.plugin")

from click.testing import CliRunner  # noqa: E402

from seal_platform.cli import build_cli  # noqa: E402
from seal_platform.store import RunStore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "seal-arithmetic" / "recipe.yaml"


# About a minute on 2 CPU cores (three CLI commands, each loading the model and building an engine).
@pytest.mark.slow
def test_lora_run_resumes_evaluates_and_exports_merged(tmp_path, tiny_model_dir, tokenizer, monkeypatch):
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    overrides = [
        "training.steps=3", "training.tasks_per_step=2", "training.group_size=2", "training.checkpoint_every=1",
        "rollout.engine=hf", "rollout.max_new_tokens=8", "rollout.workers=2", "evaluation.max_tasks=2",
        "evaluation.max_new_tokens=8", f"runs_dir={tmp_path / 'runs'}", "settings.arithmetic.n_eval=2",
        f"settings.policy.model={tiny_model_dir}", "settings.grpo.lora.rank=4", "settings.grpo.lr=1e-2",
        "settings.grpo.kl_coef=0.01", "settings.grpo.mini_batch_tasks=1",
    ]
    original = arith.collect
    names = list(inspect.signature(original).parameters)

    @functools.wraps(original)  # same signature and hookimpl marker: pluggy passes the arguments by position
    def failing_collect(*args):
        if args[names.index("step")] == 2:
            raise RuntimeError("simulated crash at step 2")
        return original(*args)

    monkeypatch.setattr(arith, "collect", failing_collect)
    runner = CliRunner()
    first = runner.invoke(build_cli(), ["run", str(RECIPE), *overrides, "--store", store_url, "--quiet"])
    assert first.exit_code != 0
    assert "simulated crash at step 2" in first.output, first.output
    store = RunStore(store_url)
    (row,) = store.list_runs()
    assert row.status == "failed"
    assert [c.step for c in store.checkpoints(row.id)] == [0, 1]
    ckpt = Path(store.checkpoints(row.id)[-1].path) / "grpo"
    assert (ckpt / "adapter" / "adapter_model.safetensors").is_file() and not (ckpt / "model.safetensors").exists()

    monkeypatch.setattr(arith, "collect", original)
    resumed = runner.invoke(build_cli(), ["run", "--resume", row.id, "--store", store_url, "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert RunStore(store_url).get_run(row.id).status == "completed"
    assert [s.step for s in RunStore(store_url).steps(row.id)] == [0, 1, 2]

    evaluated = runner.invoke(build_cli(), ["eval", row.id, "--store", store_url])
    assert evaluated.exit_code == 0, evaluated.output
    assert "average" in evaluated.output

    out = tmp_path / "merged"
    exported = runner.invoke(build_cli(), ["export-merged", row.id, str(out), "--step", "1", "--store", store_url])
    assert exported.exit_code == 0, exported.output
    assert (out / "config.json").is_file() and (out / "seal_export.json").is_file()
    assert not (out / "adapter_config.json").exists()

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    adapted = PeftModel.from_pretrained(base, Path(store.checkpoints(row.id)[1].path) / "grpo" / "adapter").eval()
    ids = torch.tensor([tokenizer.encode("What is 12 times 7?")])
    with torch.no_grad():
        want, got = adapted(input_ids=ids).logits, merged(input_ids=ids).logits
        with adapted.disable_adapter():
            plain = adapted(input_ids=ids).logits
    # (The tiny random model never solves a task, so its rewards - and these adapters' updates - are zero;
    # test_lora.py checks the merge of adapters that did move.)
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(plain, want, atol=1e-5)

    again = runner.invoke(build_cli(), ["export-merged", row.id, str(out), "--store", store_url])
    assert again.exit_code == 2 and "not empty" in again.output
