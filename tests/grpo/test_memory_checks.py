"""benchmarks/memory_checks.py, the GPU memory checks (A)-(C) of benchmarks/gpu_checks.sh, run on the CPU on a
tiny shape: the same code as on a GPU, whose memory figures only a GPU gives (they report them as not measured)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "memory_checks.py"


def _module():
    spec = importlib.util.spec_from_file_location("memory_checks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["memory_checks"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_check_c_updates_one_fsdp_rank_and_moves_the_float32_masters():
    checks = _module()
    result = checks.check_c("tiny", "cpu", tiny=True)
    assert result.passed is True, result
    assert "100.0% of the float32 master weights moved" in result.line
    assert "peak memory measured on CUDA only" in result.line


def test_check_b_runs_the_sharded_start_and_an_update_and_says_the_reserve_needs_cuda():
    checks = _module()
    result = checks.check_b("tiny", "cpu", tiny=True)
    assert result.passed is None and "ran; the allocator's reserve is measured on CUDA only" in result.line
    assert str(result).endswith(": NOT RUN")


def test_check_c_compares_with_the_plans_update_phase():
    """(C)'s figure is the plan's: the update phase of a 1-rank FSDP2 worker, less context and reserve."""
    from seal_platform_libs.policy.memory_plan import ALLOCATOR_RESERVE_GIB, CONTEXT_GIB, UPDATE, trainer_parts
    from seal_platform_libs.policy.model_shape import KNOWN
    from seal_platform_plugins.grpo.settings import GRPOSettings

    checks = _module()
    grpo = GRPOSettings(gradient_checkpointing=True, max_tokens_per_micro_batch=8192)
    parts = trainer_parts(KNOWN["qwen2.5-1.5b"], grpo, "float32", 1, sharded=True)
    whole = sum(p.gib for p in parts if UPDATE in p.phases)
    assert checks.planned_update_gib("qwen2.5-1.5b", grpo) == pytest.approx(whole - CONTEXT_GIB - ALLOCATOR_RESERVE_GIB)
    assert any(p.what.startswith("FSDP gathered") for p in parts)  # planned as the FSDP2 worker it is


def test_check_a_reaches_vllms_start_through_the_replica_path_without_a_transformers_model(tmp_path, tokenizer):
    pytest.importorskip("seal_platform_libs.policy.engines.spec")  # issue 49's replica start (PolicySpec)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    result = subprocess.run([sys.executable, str(SCRIPT), "A", "--tiny", "--device", "cpu", "--tokenizer",
                             str(tmp_path / "tokenizer")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "transformers models built: 0; vLLM started from dummy weights" in result.stdout
    assert result.stdout.strip().endswith(": PASS")
