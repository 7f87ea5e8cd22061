"""How the GRPO update's step metrics are shown (``register_metrics``): its headline metrics, the count of
updates, what it trained on and why a step did not update. The trainer writes them
(:meth:`~.trainer.GRPOTrainer._step_metrics`, :meth:`~.skipping.SkipCounter.metrics`)."""

from __future__ import annotations

from collections.abc import Mapping

from seal_platform.registry import MetricSpec

UPDATES, TRAINED_SEQUENCES, SKIPPED_SEQUENCES = "updates", "trained_sequences", "skipped_sequences"


def _every_advantage_zero(metrics: Mapping[str, float]) -> bool:
    return metrics[SKIPPED_SEQUENCES] > 0 and metrics.get(TRAINED_SEQUENCES, 0) == 0


METRIC_SPECS = (
    MetricSpec("loss", "the GRPO loss, mean over the step's updates", role="update"),
    MetricSpec("grad_norm", "gradient norm before clipping, mean over the updates", label="grad norm", role="update"),
    MetricSpec("kl", "KL divergence to the reference policy", label="KL", role="update"),
    MetricSpec("entropy", "token entropy of the policy", role="update"),
    MetricSpec("clip_frac", "fraction of tokens whose ratio was clipped", label="clip fraction", role="update"),
    MetricSpec(UPDATES, "optimizer updates the step made", role="updates", format=".0f", skip_reason="advantages 0"),
    MetricSpec("skipped_updates", "updates skipped: the gradient norm was not finite", format=".0f",
               skip_reason="non-finite gradient"),
    MetricSpec(TRAINED_SEQUENCES, "trajectories trained on", role="trained_sequences", format=".0f"),
    MetricSpec(SKIPPED_SEQUENCES, "advantage 0, nothing to learn", role="skipped_sequences", format=".0f",
               skip_reason="every advantage was 0", skipped=_every_advantage_zero),
    MetricSpec("trained_tokens", "tokens trained on", role="trained_tokens", format=".0f"),
    MetricSpec("own_pass_ratio_samples", "samples trained after an update with old log-probs from their own pass "
               "(ratio 1, never clipped): a wrong update; always 0", label="own-pass ratios", format=".0f"),
    MetricSpec("update_s", "seconds the update took", role="update_seconds"),
    MetricSpec("tokens_per_s", "trained tokens per second of the update", role="tokens_per_s", format=".0f"),
)
