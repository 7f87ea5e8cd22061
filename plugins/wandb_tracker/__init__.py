"""The ``wandb`` tracker plugin: a run's metrics, evaluations, labels, A-Patch weights, interface revisions and
report in Weights & Biases (:mod:`.plugin`)."""
