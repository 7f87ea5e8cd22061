"""The tiny random model of the grpo tests (tests/grpo/conftest.py), loaded by path: the end-to-end run of the
MCP example needs a policy, not a good one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_grpo_conftest", Path(__file__).parents[1] / "grpo" / "conftest.py")
_grpo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_grpo)

smollm2_dir = _grpo.smollm2_dir
tokenizer = _grpo.tokenizer
tiny_model_dir = _grpo.tiny_model_dir
