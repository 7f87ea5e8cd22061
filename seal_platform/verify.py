"""``seal-platform verify``: score transcripts offline with an environment's own verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from .config import RunConfig, apply_overrides, raise_for, validate_settings
from .context import RunContext
from .environment import VerifyingEnvironment
from .errors import SealError
from .plugins import make_plugin_manager


def verify_lines(benchmark: str, lines: Iterable[str | bytes], overrides: list[str]) -> Iterator[str]:
    """One output line (JSON) per non-blank input line, in input order; bad lines become ``{"error": ...}``
    and the lines after them are still scored. Lines may be bytes (a file opened in binary): one that is
    not UTF-8 gets an error record instead of stopping the whole file."""
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
            yield json.dumps(score_line(env, number, line, owner))
    except BaseException:
        status = "failed"
        raise
    finally:
        host.hook.end_run(ctx=ctx, status=status)


def score_line(env: VerifyingEnvironment, number: int, line: str | bytes, owner: str = "the environment") -> dict[str, Any]:
    """The output record of one input line: the environment's verdict, or ``{"error": "line N: ..."}`` for
    anything wrong with the line (encoding, JSON, nesting, shape, a plugin failure on it). Never raises
    for the line's content, so one bad line costs only its own record."""
    try:
        text = line.decode("utf-8") if isinstance(line, bytes) else line
    except UnicodeDecodeError as exc:
        return {"error": f"line {number}: not UTF-8 text (byte {exc.start + 1}); save the file as UTF-8"}
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"error": f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})"}
    except RecursionError:
        return {"error": f"line {number}: JSON nested too deeply"}
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        return {"error": f"line {number}: not valid JSON ({exc})"}
    if not isinstance(record, dict):
        return {"error": f"line {number}: each line must be a JSON object"}
    try:
        result = env.verify_record(record)
        json.dumps(result)
        return result
    except (ValueError, KeyError, TypeError) as exc:
        return {"error": f"line {number}: {exc}"}
    except RecursionError:
        return {"error": f"line {number}: the record is nested too deeply"}
    except Exception as exc:  # a plugin failing on one record must not lose the others
        return {"error": f"line {number}: {owner} failed on this record: {type(exc).__name__}: {exc}"}
