"""The ``hf`` rollout engine: batched, left-padded ``transformers`` generation.

By default it generates with the trainer's own model object, so new weights need no copying
(``update_weights`` is free). Concurrent requests with the same sampling settings are generated in one
``model.generate`` call (up to ``max_batch_size``); identical prompts in a batch (a group's G rollouts) are
prefilled once and their KV cache copied to the duplicates. There is no prefix cache across calls: a
dialogue's history is prefilled again at every turn (the ``vllm`` engine's prefix cache avoids that).

Log-probs are recorded during generation by a logits processor placed before every sampling warper, so they
are the raw ``log_softmax`` of the model's logits (temperature 1, no top-p) at the moment of sampling: no
extra forward pass and one vocabulary-sized row per sequence of memory.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from ..lora import adapter_name, is_lora
from .base import QueuedEngine, Request, sampling_key
from .settings import engine_section

log = logging.getLogger(__name__)

# Stop strings are searched for in the text of the last this-many generated tokens.
_STOP_WINDOW = 32


class HFEngine(QueuedEngine):
    """Rollout engine over a ``transformers`` causal LM. Thread-safe; see :mod:`.base`."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, settings: Any = None, seed: int | None = None):
        self.settings = engine_section(settings, "hf")
        limit = self.settings.max_model_len or getattr(model.config, "max_position_embeddings", None) or 4096
        super().__init__(tokenizer, int(limit))
        self.model = model if self.settings.share_model else copy.deepcopy(model)
        self.seed = seed
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if isinstance(configured, int):
            eos.add(configured)
        elif configured:
            eos.update(configured)
        self.eos_ids = sorted(eos)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self._adapter_pushes = 1  # the adapters it starts with are version 1 (as in the vllm engine)
        if is_lora(model):
            self.adapter_version = adapter_name(1)

    @property
    def dtype(self) -> str:
        """The dtype the engine generates in (its model's), as vLLM's engine names it: ``bfloat16``, ``float32``."""
        return str(self.model.dtype).removeprefix("torch.")

    def update_weights(self, model: Any, version: int | None = None) -> None:
        """Make the engine sample from ``model``'s weights. Free when the engine shares the trainer's model.

        A LoRA (peft) policy is generated from directly, adapters on; each call starts a new adapter version
        (``Generation.adapter``). A private copy receives the adapters only (the base never changes).
        ``version``: the policy version the new weights are (default: the current one plus 1).
        """
        lora = is_lora(model)
        if model is self.model and not lora:
            self.call_in_worker(lambda: self.weights_complete(version))
            return
        if lora:
            from ..lora import adapter_state_dict

            state = None if model is self.model else adapter_state_dict(model)
        else:
            state = model.state_dict()

        def apply() -> None:
            with self.loading():  # one that raises may have copied part of the weights
                if lora:
                    if state is not None:
                        from peft import set_peft_model_state_dict

                        set_peft_model_state_dict(self.model, state)
                    self._adapter_pushes += 1
                    self.adapter_version = adapter_name(self._adapter_pushes)
                else:
                    self.model.load_state_dict(state)
            self.weights_complete(version)

        self.call_in_worker(apply)

    def load_weights(self, named: dict[str, Any], version: int | None = None) -> None:
        """Copy some named tensors (state-dict names; a subset is fine) into the engine's model."""
        import torch

        def load() -> None:
            params = self.model.state_dict()
            unknown = sorted(set(named) - set(params))
            if unknown:
                raise KeyError(f"the engine's model has no tensors named {unknown[:5]}")
            with torch.no_grad(), self.loading():  # one that raises may have copied part of them
                for name, tensor in named.items():
                    params[name].copy_(tensor)
            self.weights_complete(version)

        self.call_in_worker(load)

    # --- worker -------------------------------------------------------------------------------------

    def _serve(self) -> None:
        wait_s = self.settings.batch_wait_ms / 1000.0
        while True:
            batch, stop = self._collect_batch(self.settings.max_batch_size, wait_s)
            groups: dict[str, list[Request]] = {}
            for request in batch:
                groups.setdefault(sampling_key(request.sampling), []).append(request)
            for requests in groups.values():
                try:
                    self._generate(requests)
                except Exception as exc:  # one bad batch fails its own requests only
                    log.exception("hf generate failed")
                    for request in requests:
                        if not request.future.done():
                            request.future.set_exception(exc)
            if stop:
                return

    def _stop_hit(self, tokens: list[int], stops: list[str]) -> bool:
        text = self.tokenizer.decode(tokens[-_STOP_WINDOW:], skip_special_tokens=True)
        return any(s in text for s in stops)

    def _generate(self, requests: list[Request]) -> None:
        import torch
        from transformers import (
            GenerationConfig,
            LogitsProcessor,
            LogitsProcessorList,
            StoppingCriteria,
            StoppingCriteriaList,
        )

        engine = self
        sampling = requests[0].sampling
        stops = [s for s in sampling.stop if s]
        budgets = [r.budget for r in requests]
        width = max(len(r.prompt) for r in requests)
        device = next(self.model.parameters()).device
        input_ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for i, request in enumerate(requests):
            input_ids[i, width - len(request.prompt):] = torch.tensor(request.prompt, dtype=torch.long)
            attention[i, width - len(request.prompt):] = 1

        class RawLogprobs(LogitsProcessor):
            """Sees the logits before any warper; gathers the previous step's sampled token's log-prob."""

            def __init__(self) -> None:
                self.previous: torch.Tensor | None = None
                self.steps: list[torch.Tensor] = []

            def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                if self.previous is not None:
                    self.steps.append(self.previous.gather(-1, ids[:, -1:]).squeeze(-1))
                self.previous = torch.log_softmax(scores.float(), dim=-1)
                return scores

            def finish(self, sequences: torch.Tensor) -> torch.Tensor:
                if self.previous is not None:
                    self.steps.append(self.previous.gather(-1, sequences[:, -1:]).squeeze(-1))
                return torch.stack(self.steps, dim=1) if self.steps else sequences.new_zeros((len(sequences), 0))

        class StopAndBudget(StoppingCriteria):
            """Per row: its own token budget, and the same stop-string test used to cut the result."""

            def __call__(self, ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
                n = ids.shape[1] - width
                done = torch.tensor([n >= b for b in budgets], dtype=torch.bool, device=ids.device)
                if stops:
                    rows = ids[:, width:].tolist()
                    for i, row in enumerate(rows):
                        if not done[i] and engine._stop_hit(row, stops):
                            done[i] = True
                return done

        extra: dict[str, Any] = {}
        if self.settings.share_prompt_prefill and width > 1:
            extra = self._shared_prefill(requests, input_ids, attention, device)
        recorder = RawLogprobs()
        config = GenerationConfig(
            max_new_tokens=max(budgets),
            do_sample=not sampling.greedy,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
        )
        if not sampling.greedy:
            config.temperature = sampling.temperature
            config.top_p = sampling.top_p
            config.top_k = 0
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), _half_on_cuda(self.model, device), _sampling_rng(sampling.seed, device):
                out = self.model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention.to(device),
                    generation_config=config,
                    logits_processor=LogitsProcessorList([recorder]),
                    stopping_criteria=StoppingCriteriaList([StopAndBudget()]),
                    **extra,
                )
        finally:
            self.model.train(was_training)
        sequences = out.sequences
        logprobs = recorder.finish(sequences).cpu()
        generated = sequences[:, width:].cpu().tolist()
        self.stats["batches"] += 1
        eos = set(self.eos_ids)
        for i, request in enumerate(requests):
            row = generated[i][: request.budget]
            end, reason = len(row), "length"
            for t, token in enumerate(row):
                if token in eos or (stops and self._stop_hit(row[: t + 1], stops)):
                    end, reason = t + 1, "stop"
                    break
            self._finish(request, row[:end], logprobs[i, :end].tolist(), reason)

    def _shared_prefill(self, requests: list[Request], input_ids: Any, attention: Any, device: Any) -> dict[str, Any]:
        """Prefill each distinct prompt of the batch once and copy its KV cache to its duplicates.

        A GRPO group is G identical prompts; plain batched ``generate`` would prefill each of them (G times the
        work, and prefill dominates on long tool-laden prompts). The prompts minus their last token go through
        one forward pass; ``generate`` then continues from the copied cache. Positions follow ``generate``'s
        own rule for left padding, so the result equals a plain batched generation.
        """
        import torch

        distinct: dict[tuple[int, ...], int] = {}
        rows = [distinct.setdefault(tuple(r.prompt), len(distinct)) for r in requests]
        if len(distinct) == len(requests):
            return {}
        first = [rows.index(i) for i in range(len(distinct))]
        ids = input_ids[first, :-1].to(device)
        mask = attention[first, :-1].to(device)
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        with torch.no_grad(), _half_on_cuda(self.model, device):
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                             logits_to_keep=1)
        cache = out.past_key_values
        cache.reorder_cache(torch.tensor(rows, dtype=torch.long, device=device))
        self.stats["prefills_saved"] = self.stats.get("prefills_saved", 0) + len(requests) - len(distinct)
        return {"past_key_values": cache}

    def _release(self) -> None:
        self.model = None


def _half_on_cuda(model: Any, device: Any) -> Any:
    """Generation on CUDA computes in bfloat16 (as vLLM serves there) when the policy's master weights are
    float32; elsewhere it runs in the weights' own dtype."""
    import contextlib

    import torch

    if str(getattr(device, "type", device)).startswith("cuda") and next(model.parameters()).dtype == torch.float32:
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _sampling_rng(seed: int | None, device: Any) -> Any:
    """The random state a generation samples from.

    With a seed: a private state (``fork_rng``) seeded with it, so the call is reproducible and the process's
    random stream is left as it was. Without one: the process's own stream, which advances, so every call
    draws fresh randomness (forking there would restore the state afterwards and repeat the same sample).
    """
    import contextlib

    import torch

    if seed is None:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def seeded():
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            yield

    return seeded()
