"""``seal-platform verify``: score transcripts offline with an environment's own verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Iterator

from .config import RunConfig, apply_overrides, raise_for, validate_settings
from .context import RunContext
from .environment import VerifyingEnvironment
from .errors import SealError
from .plugins import make_plugin_manager


def verify_lines(benchmark: str, lines: IO[str], overrides: list[str]) -> Iterator[str]:
    """One output line (JSON) per input line, in input order; bad lines become ``{"error": ...}``."""
    host = make_plugin_manager()  # a benchmark is an environment name, not a plugin name
    environments = host.environments()
    if benchmark not in environments:
        known = ", ".join(sorted(environments)) or "none"
        note = host.failure_note()
        raise SealError(f"no loaded plugin registers benchmark {benchmark!r} (registered: {known})"
                        + (f"; {note}." if note else "."))
    owner, spec = environments[benchmark]
    settings = apply_overrides({}, overrides)
    config = RunConfig(environment=benchmark, settings=settings)
    models, issues = validate_settings(config, host.settings_models())
    raise_for(issues, "--set")
    ctx = RunContext(config=config, run_id="verify", run_dir=Path("."), settings=models)
    env = spec.factory(ctx)
    if not isinstance(env, VerifyingEnvironment):
        raise SealError(f"benchmark {benchmark!r} (plugin {owner!r}) cannot verify transcripts offline.")
    status = "completed"
    try:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("each line must be a JSON object")
                result = env.verify_record(record)
            except json.JSONDecodeError as exc:
                result = {"error": f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})"}
            except (ValueError, KeyError, TypeError) as exc:
                result = {"error": f"line {number}: {exc}"}
            yield json.dumps(result)
    except BaseException:
        status = "failed"
        raise
    finally:
        host.hook.end_run(ctx=ctx, status=status)
