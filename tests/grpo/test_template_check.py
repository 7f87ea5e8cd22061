"""A chat template the token code cannot train is refused by grpo's ``check_config``, before any model loads:
only the tokenizer is read (the model folder below has no weights at all), and the verdict is the token
code's own (``tokens.chat_template_problem``). Templates that rewrite history (Qwen3's) pass: episodes are
built token in, token out."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.config import RunConfig
from seal_platform_libs.policy.loading import PolicySettings
from seal_platform_libs.policy.tokens import chat_template_problem
from seal_platform_plugins.grpo.plugin import check_config

# Shouts every message: assistant text is not rendered as it was sampled, so no episode can be exact.
REFUSED = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content']|upper }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Announces the number of messages up front, so every new message changes the beginning of the text: history
# is rewritten, which token-in-token-out building trains all the same.
REWRITING = (
    "{{ messages|length }} messages\n{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN3 = (Path(__file__).parent / "fixtures" / "qwen3_chat_template.jinja").read_text()


def _folder(tmp_path: Path, tokenizer, template: str | None) -> Path:
    """A model folder with a config.json and the tokenizer, and no weights: loading the model would fail."""
    tok = copy.deepcopy(tokenizer)
    if template is not None:
        tok.chat_template = template
    folder = tmp_path / "model"
    tok.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    return folder


def test_a_template_the_token_code_refuses_is_refused_before_any_model_loads(tmp_path, tokenizer):
    folder = _folder(tmp_path, tokenizer, REFUSED)
    refusing = copy.deepcopy(tokenizer)
    refusing.chat_template = REFUSED
    reason = chat_template_problem(refusing)  # what a run would meet after loading every model
    assert reason
    config = RunConfig(environment="bfcl", stages={"optimize": "grpo"})
    (issue,) = check_config(config, {"policy": PolicySettings(model=str(folder))}, None)
    assert issue.where == "settings.policy.model"
    assert reason in issue.what  # the token code's own message
    # Through the CLI: the recipe is refused with the message; the folder holds no weights to load.
    result = CliRunner().invoke(cli, ["config", "validate", "smarthome-seal", f"settings.policy.model={folder}"])
    assert result.exit_code == 1, result.output
    assert "cannot be trained" in " ".join(result.output.split())
    assert not any(folder.glob("*.safetensors"))


@pytest.mark.parametrize("template", [REWRITING, QWEN3], ids=["rewriting", "qwen3"])
def test_templates_that_rewrite_history_are_trained_not_refused(tmp_path, tokenizer, template):
    tok = copy.deepcopy(tokenizer)
    tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    folder = _folder(tmp_path, tok, template)
    config = RunConfig(environment="bfcl", stages={"optimize": "grpo"})
    assert check_config(config, {"policy": PolicySettings(model=str(folder))}, None) == []


def test_an_append_only_template_and_a_model_not_on_this_machine_pass(tmp_path, tokenizer):
    folder = _folder(tmp_path, tokenizer, None)  # SmolLM2's ChatML
    config = RunConfig(environment="bfcl", stages={"optimize": "grpo"})
    assert check_config(config, {"policy": PolicySettings(model=str(folder))}, None) == []
    # A hub name: nothing to read here; check_machine reports that the folder is missing.
    assert check_config(config, {"policy": PolicySettings(model="Qwen/Qwen3-8B")}, None) == []
    # A recipe that neither trains with grpo nor samples from its engines does not read the tokenizer.
    other = RunConfig(environment="bfcl", stages={"optimize": "none"}, rollout={"engine": "scripted"})
    broken = _folder(tmp_path / "b", tokenizer, REFUSED)
    assert check_config(other, {"policy": PolicySettings(model=str(broken))}, None) == []
