"""MLflow tracker: switched on by ``settings.mlflow.enabled: true`` (needs the ``trackers`` extra).

One MLflow run per seal-platform run, tagged ``seal_platform.run_id``, in the experiment ``experiment``; a
resumed seal-platform run continues the MLflow run with that tag. What is logged (names:
:func:`seal_platform.tracking.scalars`), through ``MlflowClient`` (no global active run):

* every numeric event as metrics at the training step;
* the resolved config (:func:`seal_platform.tracking.shareable_config`) as flat parameters and as
  ``config.json``;
* each interface revision as ``interfaces/revision-NNN.md``;
* the HTML report, at the end of ``seal-platform run``, under ``report/``;
* the run's end as its status (``FINISHED``, ``FAILED`` or ``KILLED`` for an interrupted run).

``tracking_uri`` null uses MLflow's own default (``MLFLOW_TRACKING_URI``, else MLflow's local store; MLflow 3
refuses its old ``./mlruns`` folder store unless ``MLFLOW_ALLOW_FILE_STORE=true``: use ``sqlite:///mlflow.db``). A URI
with a password is a secret: give it through ``MLFLOW_TRACKING_URI`` (and MLflow's ``MLFLOW_TRACKING_USERNAME``
/ ``MLFLOW_TRACKING_PASSWORD``), not in the recipe.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, Field

from seal_platform import hookimpl
from seal_platform.config import Section
from seal_platform.tracking import describe_interface, flat, scalars, shareable_config

SECTION = "mlflow"
CLIENT_KEY = "mlflow.client"
RUN_TAG = "seal_platform.run_id"
STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
MAX_PARAM_CHARS = 6000  # MLflow's limit on a parameter's value
BATCH = 100  # MLflow's most parameters per log_batch call (metrics: 1000)


class MLflowSettings(Section):
    enabled: bool = Field(default=False, description="Log this run to MLflow.")
    tracking_uri: str | None = Field(
        default=None, description="The MLflow tracking URI (a file store, a database URL, a server); null: "
        "MLFLOW_TRACKING_URI, else MLflow's default. Put credentials in MLflow's environment variables.")
    experiment: str = Field(default="seal-platform", description="The MLflow experiment (made if missing).")
    artifact_location: str | None = Field(
        default=None, description="Where a NEW experiment keeps its artifacts (a folder or URI); null: MLflow's "
        "default for the tracking URI. An existing experiment keeps its own.")
    log_config: bool = Field(default=True, description="Log the resolved recipe as parameters and config.json.")


@hookimpl
def register_settings() -> dict[str, type[BaseModel]]:
    return {SECTION: MLflowSettings}


def _settings(ctx: Any) -> MLflowSettings:
    return ctx.settings_for(SECTION, MLflowSettings)


def _client(ctx: Any, settings: MLflowSettings) -> tuple[Any, str]:
    """(client, MLflow run id) of this run: found by its tag or made, opened once per process."""
    opened = ctx.shared.get(CLIENT_KEY)
    if opened is not None:
        return opened
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=settings.tracking_uri)
    experiment = client.get_experiment_by_name(settings.experiment)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(
        settings.experiment, artifact_location=settings.artifact_location)
    found = client.search_runs([experiment_id], filter_string=f"tags.`{RUN_TAG}` = '{_quoted(ctx.run_id)}'",
                               max_results=1)
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
    else:
        run_id = client.create_run(experiment_id, run_name=ctx.run_id, tags={RUN_TAG: ctx.run_id}).info.run_id
        if settings.log_config:
            _log_config(client, run_id, shareable_config(ctx))
    ctx.shared[CLIENT_KEY] = (client, run_id)
    return client, run_id


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _log_config(client: Any, run_id: str, config: dict[str, Any]) -> None:
    from mlflow.entities import Param

    client.log_dict(run_id, config, "config.json")
    params = [Param(key, (value if isinstance(value, str) else json.dumps(value))[:MAX_PARAM_CHARS])
              for key, value in sorted(flat(config).items())]
    for i in range(0, len(params), BATCH):
        client.log_batch(run_id, params=params[i:i + BATCH])


@hookimpl
def track(ctx: Any, event: Any) -> None:
    settings = _settings(ctx)
    if not settings.enabled:
        return
    client, run_id = _client(ctx, settings)
    if event.kind == "report":
        if event.path:
            client.log_artifact(run_id, event.path, artifact_path="report")
        return
    values = scalars(event)
    if values:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(key, float(value), now, event.step) for key, value in values.items()])
    if event.kind == "interface" and event.interface is not None:
        client.log_text(run_id, describe_interface(event.interface) + "\n",
                        f"interfaces/revision-{event.interface.revision:03d}.md")


@hookimpl
def end_run(ctx: Any, status: str) -> None:
    opened = ctx.shared.get(CLIENT_KEY)  # kept: the report event comes after the run's end
    if opened is not None:
        client, run_id = opened
        client.set_terminated(run_id, status=STATUS.get(status, "FAILED"))
