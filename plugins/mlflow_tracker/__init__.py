"""The ``mlflow`` tracker plugin: a run's metrics, evaluations, labels, A-Patch weights, interface revisions and
report in MLflow (:mod:`.plugin`)."""
