"""smarthome, mcp and openenv play their episodes in lock step in the run's process and never hand them to
``ctx.executor``: a recipe of theirs that names an executor is refused by ``config validate`` (their own
``check_config``), instead of validating and leaving the executor unused."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli


def _validate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["config", "validate", *args])
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(("recipe", "name", "scale"), [
    ("smarthome-embedded", "smarthome", "to go faster, scale the rollout engine instead"),
    ("mcp-example", "mcp", "for more episodes at once raise settings.mcp.max_parallel_episodes"),
    ("openenv-example", "openenv", "for more episodes at once raise settings.openenv.max_parallel_episodes"),
])
def test_an_executor_the_environment_would_not_use_is_a_recipe_problem(recipe, name, scale):
    code, said = _validate(recipe, "rollout.executor=ray", "settings.ray.enabled=true")
    assert code == 1, said
    assert "1 problem(s)" in said, said
    assert (f"override 'rollout.executor=ray': rollout.executor: environment {name} plays its episodes in lock step "
            "in the run's own process") in said, said
    assert ("never hands them to an executor, so executor 'ray' would go unused (remove rollout.executor or set it "
            f"to local; {scale}") in said, said


def test_the_local_executor_and_other_environments_executors_are_left_alone():
    code, said = _validate("smarthome-embedded", "rollout.executor=local")
    assert code == 0 and said.endswith(")") and ": ok (config hash" in said, said
    code, said = _validate("seal-ray")  # bfcl hands its episodes to ctx.executor.map: ray is used there
    assert code == 0 and ": ok (config hash" in said, said
