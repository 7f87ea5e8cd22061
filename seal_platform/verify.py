"""``seal-platform verify``: score transcripts offline with an environment's own verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Iterator

from .config import RunConfig, apply_overrides, raise_for, validate_settings
from .context import RunContext
from .environment import BatchVerifyingEnvironment, VerifyingEnvironment
from .errors import SealError
from .plugins import make_plugin_manager


def verify_lines(benchmark: str, lines: IO[str], overrides: list[str]) -> Iterator[str]:
    """One output line (JSON) per input line, in input order; bad lines become ``{"error": ...}``."""
    host = make_plugin_manager(required=[benchmark])
    environments = host.environments()
    if benchmark not in environments:
        known = ", ".join(sorted(environments)) or "none"
        raise SealError(f"no loaded plugin registers benchmark {benchmark!r} (registered: {known}).")
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
        if isinstance(env, BatchVerifyingEnvironment):
            yield from _verify_in_batches(env, lines)
            return
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


_BATCH_LINES = 512


def _verify_in_batches(env: BatchVerifyingEnvironment, lines: IO[str]) -> Iterator[str]:
    """As the per-line loop, but ``_BATCH_LINES`` records at a time through ``env.verify_records``."""

    def flush(batch: list[tuple[int, dict | None, dict | None]]) -> Iterator[str]:
        records = [record for _, record, _ in batch if record is not None]
        results = iter(env.verify_records(records) if records else [])
        for number, record, error in batch:
            result = error if record is None else next(results)
            if record is not None and set(result) == {"error"}:
                result = {"error": f"line {number}: {result['error']}"}
            yield json.dumps(result)

    batch: list[tuple[int, dict | None, dict | None]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("each line must be a JSON object")
            batch.append((number, record, None))
        except json.JSONDecodeError as exc:
            batch.append((number, None, {"error": f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})"}))
        except ValueError as exc:
            batch.append((number, None, {"error": f"line {number}: {exc}"}))
        if len(batch) >= _BATCH_LINES:
            yield from flush(batch)
            batch = []
    if batch:
        yield from flush(batch)
