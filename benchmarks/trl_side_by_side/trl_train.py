"""Trains the default run's model on its smarthome tasks with TRL's GRPOTrainer. Runs in TRL's OWN venv
(make_venv.sh), never in seal-platform's; run.py starts it. Rewards come from seal-platform's own verifier
through a scorer subprocess in the project's venv (scoring.py serve), one JSON line per batch.

The settings are the default run's (recipes/smarthome-embedded.yaml): group 8, temperature 0.7, top-p 1, at
most 48 new tokens, AdamW lr 4e-5 constant (no warm-up), weight decay 0.01, grad-norm clip 1.0, no KL term
(beta 0), PPO clip 0.2, one optimizer update per batch, the token mean per completion then the mean over
completions (TRL's loss_type "grpo", the project's seq-mean-token-mean), advantages normalised per group,
only the last 10 decoder layers and the final norm trained, dropout off, float32 on the CPU. Plain GRPO:
pristine prompts, every group of the batch trained (uniform ones too), no filter, no A-Patch.

One difference the trainers cannot share: the project's engines stop generating at the first
``</tool_call>``; transformers' generate (TRL's CPU path) stops at the end-of-turn token (SmolLM2 writes it
right after the call, as its worked examples show). The reward cuts the completion after the first
``</tool_call>`` either way, so both trainers score the same text.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import time
from pathlib import Path


def freeze_all_but_top_layers(model, n: int) -> int:
    """The project's grpo.train_layers: only the last ``n`` decoder layers and the final norm train."""
    decoder = model.get_decoder()
    layers = decoder.layers
    model.requires_grad_(False)
    for module in [*layers[len(layers) - n:], decoder.norm]:
        module.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class Scorer:
    """seal-platform's verifier in a subprocess of the project's venv (``scoring.py serve``)."""

    def __init__(self, command: list[str]):
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def ask(self, request: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the scorer exited (rc {self.proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"scorer: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="the HF folder of the model (plugins/grpo/policy.py's cache)")
    p.add_argument("--dataset", required=True, help="JSON lines {task_id, category, prompt} (scoring.py)")
    p.add_argument("--scorer", required=True, help="JSON list: the command that runs scoring.py serve")
    p.add_argument("--out", required=True, help="where the trained model (HF folder) and metrics.json go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--updates", type=int, default=5)
    p.add_argument(
        "--prompts-per-update", type=int, default=2, help="groups per optimizer update (training.tasks_per_step)"
    )
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--lr", type=float, default=4e-5)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--train-layers", type=int, default=10)
    args = p.parse_args()

    started = time.perf_counter()
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(args.seed)
    rows = [json.loads(line) for line in Path(args.dataset).read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list(rows)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    trainable = freeze_all_but_top_layers(model, args.train_layers)
    scorer = Scorer(json.loads(args.scorer))
    scored: list[float] = []
    samples: list[list] = []  # [task_id, completion, reward] of every rollout, for inspection

    def smarthome_reward(prompts, completions, task_id, **_):
        rewards = scorer.ask({"pairs": [[t, c] for t, c in zip(task_id, completions)]})["rewards"]
        scored.extend(rewards)
        samples.extend([t, c, r] for t, c, r in zip(task_id, completions, rewards))
        return rewards

    batch = args.prompts_per_update * args.group
    config = GRPOConfig(
        output_dir=str(Path(args.out) / "trainer"),
        seed=args.seed,
        data_seed=args.seed,
        use_cpu=True,
        bf16=False,
        max_steps=args.updates,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=args.group,
        max_completion_length=args.max_new_tokens,
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.01,
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        num_iterations=1,
        loss_type="grpo",
        scale_rewards="group",
        mask_truncated_completions=False,
        disable_dropout=True,
        shuffle_dataset=True,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        log_completions=False,
        remove_unused_columns=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=smarthome_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer)
    train_started = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - train_started
    scorer.close()
    out = Path(args.out)
    trainer.save_model(str(out / "model"))
    tokenizer.save_pretrained(str(out / "model"))
    per_update = [round(sum(scored[i:i + batch]) / batch, 4) for i in range(0, len(scored), batch)]
    metrics = {
        "trainer": "trl", "trl_version": __import__("trl").__version__, "seed": args.seed,
        "updates": int(trainer.state.global_step), "groups_per_update": args.prompts_per_update,
        "trainable_params": trainable, "train_reward_per_update": per_update,
        "train_s": round(train_s, 1), "wall_s": round(time.perf_counter() - started, 1),
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "log_history": trainer.state.log_history, "samples": samples,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str))
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("log_history", "samples")}))


if __name__ == "__main__":
    main()
