"""Which trajectories of a step the GRPO update can leave out without changing it.

A trajectory's loss is ``sum_t w_t (pg_t + kl_coef kl_t - entropy_coef H_t)``. With advantage 0 its policy
term and that term's gradient are exactly 0, so what is left is the KL and entropy terms:

* no KL and no entropy term: the trajectory contributes nothing, ever;
* a k2 or k3 KL term while the policy still equals the reference (no optimizer update since the reference
  was copied): ``logp == ref`` for every token, and the estimator's value *and* gradient vanish there
  (k3' = 1 - exp(ref - logp) = 0, k2' = logp - ref = 0). The k1 estimator ``logp - ref`` has gradient
  ``d logp`` even there, so it is never skipped;
* an entropy term: the entropy has a gradient whatever the advantage, so nothing is skipped.

A mini-batch whose trajectories are all skipped does no optimizer update, so the policy stays equal to the
reference and the next mini-batch may skip as well: a GRPO group whose rewards are all equal (every advantage
0) at the start of training costs no forward or backward pass at all. The setting ``grpo.zero_advantage``
picks ``skip`` (this, the default) or ``compute`` (run everything, the reference implementation's behaviour).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .settings import GRPOSettings


def can_skip(sample: Any, settings: GRPOSettings, at_reference: bool) -> bool:
    """Whether ``sample`` (a :class:`~.samples.Sample`) adds exactly nothing to the loss and its gradient."""
    if sample.n_tokens == 0:
        return True
    if sample.advantage != 0.0 or settings.zero_advantage == "compute":
        return False
    if settings.entropy_coef > 0:
        return False
    if settings.kl_coef == 0:
        return True
    return at_reference and settings.kl_estimator != "k1"


@dataclass
class SkipCounter:
    """Skipped work of one step, for its metrics."""

    sequences: int = 0
    tokens: int = 0
    mini_batches: int = 0

    def skip(self, sample: Any) -> None:
        self.sequences += 1
        self.tokens += len(sample.input_ids)

    def metrics(self) -> dict[str, float]:
        return {
            "skipped_sequences": float(self.sequences),
            "skipped_tokens": float(self.tokens),
            "skipped_mini_batches": float(self.mini_batches),
        }


def _predicted_active(batches: Sequence[Sequence[Any]], settings: GRPOSettings, at_reference: bool
                      ) -> Iterator[tuple[int, int, list[Any]]]:
    """``(epoch, index, active)`` for each mini-batch a step on ``batches`` trains, in order over its
    ``epochs_per_step`` passes: ``active``, the samples of mini-batch ``index`` that will (or may) be run there.
    Assumes every mini-batch with something to run makes an update (if one does not, the policy stays at the
    reference longer and a few more samples are skipped than predicted: never fewer)."""
    for epoch in range(settings.epochs_per_step):
        for i, batch in enumerate(batches):
            active = [x for x in batch if not can_skip(x, settings, at_reference)]
            yield epoch, i, active
            if active:
                at_reference = False


def predicted_runs(batches: Sequence[Sequence[Any]], settings: GRPOSettings, at_reference: bool) -> list[Any]:
    """Samples that will (or may) be run after the step's first mini-batch: those need old log-probs computed
    before the first update. The first mini-batch's samples get theirs from their own first training pass
    (the policy has not moved yet); one of its samples skipped then but run in a later epoch (a zero advantage
    at the reference under a k2/k3 KL term) is here too. Each sample once, in order."""
    first: set[int] = set()
    out: list[Any] = []
    seen: set[int] = set()
    for epoch, i, active in _predicted_active(batches, settings, at_reference):
        if epoch == 0 and i == 0:
            first = {id(x) for x in active}
            continue
        for x in active:
            if id(x) not in first and id(x) not in seen:
                seen.add(id(x))
                out.append(x)
    return out


def predicted_batch_runs(batches: Sequence[Sequence[Any]], settings: GRPOSettings, at_reference: bool
                         ) -> list[list[Any]]:
    """For each of ``batches``, its samples that will (or may) be run in any of the step's epochs (in the
    mini-batch's order): what a sharded trainer partitions over its ranks, once per mini-batch."""
    runs: list[set[int]] = [set() for _ in batches]
    for _, i, active in _predicted_active(batches, settings, at_reference):
        runs[i].update(id(x) for x in active)
    return [[x for x in batch if id(x) in run] for batch, run in zip(batches, runs)]


def no_grad_passes(
    batches: Sequence[Sequence[Any]], settings: GRPOSettings, at_reference: bool
) -> dict[str, list[Any]]:
    """The samples a step on ``batches`` (its mini-batches; the policy ``at_reference`` or not when it starts)
    runs through a no-grad forward pass besides its training passes, as :class:`~.trainer.GRPOTrainer` does:

    * ``old``: old log-probs recomputed before the first update (:func:`predicted_runs`; with
      ``old_logprobs: engine`` only the samples the engine did not report every log-prob of);
    * ``reference``: the KL reference's log-probs (``kl_coef > 0`` only; none while the policy still equals the
      reference: the training pass gives them), at most once per sample over the step's epochs.

    For the cost accounting of benchmarks (a roofline must count the forward passes a step performs)."""
    old = predicted_runs(batches, settings, at_reference)
    if settings.old_logprobs == "engine":
        old = [x for x in old if not (x.n_tokens and all(lp is not None for lp in x.engine_logprobs))]
    reference: list[Any] = []
    if settings.kl_coef > 0:
        done: set[int] = set()
        for _ in range(settings.epochs_per_step):
            for batch in batches:
                active = [x for x in batch if not can_skip(x, settings, at_reference)]
                for x in active:
                    if id(x) not in done:
                        done.add(id(x))
                        if not at_reference:
                            reference.append(x)
                if active:
                    at_reference = False
    return {"old": old, "reference": reference}
