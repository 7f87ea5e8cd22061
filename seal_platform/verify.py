"""``seal-platform verify``: score transcripts offline with an environment's own verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from .config import apply_overrides, raise_for, validate_core, validate_settings
from .context import RunContext
from .environment import BatchVerifyingEnvironment, VerifyingEnvironment
from .errors import SealError
from .lifecycle import lifecycle
from .plugins import PluginHost, make_plugin_manager


def verify_lines(benchmark: str, lines: Iterable[str | bytes], overrides: list[str],
                 host: PluginHost | None = None) -> Iterator[str]:
    """One output line (JSON) per non-blank input line, in input order; bad lines become ``{"error": ...}``
    and the lines after them are still scored. Lines may be bytes (a file opened in binary): one that is
    not UTF-8 gets an error record instead of stopping the whole file. ``host``: the plugins (default: every
    installed one)."""
    host = host or make_plugin_manager()  # a benchmark is an environment name, not a plugin name
    owner, spec = host.require("benchmark", benchmark)
    settings = apply_overrides({}, overrides, example=f"{benchmark}.KEY=VALUE with a KEY from `seal-platform settings`")
    config, issues = validate_core({"environment": benchmark, "settings": settings})  # --set bfcl=1: not a mapping
    raise_for(issues, "--set")
    assert config is not None  # validate_core gives a config or issues
    models, issues = validate_settings(config, host.settings_models())
    raise_for(issues, "--set")
    ctx = RunContext(config=config, run_id="verify", run_dir=Path("."), settings=models)
    # Only the benchmark's own plugin takes part: it alone gets start_run and end_run.
    with lifecycle(host, ctx, resumed=False, plugins=[owner]):
        env = spec.factory(ctx)
        if not isinstance(env, VerifyingEnvironment):
            raise SealError(f"benchmark {benchmark!r} (plugin {owner!r}) cannot verify transcripts offline.")
        if isinstance(env, BatchVerifyingEnvironment):
            yield from _verify_in_batches(env, lines, owner)
            return
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            yield json.dumps(score_line(env, number, line, owner))


def parse_line(number: int, line: str | bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(record, None)`` for a line holding a JSON object, else ``(None, {"error": "line N: ..."})``."""
    try:
        text = line.decode("utf-8") if isinstance(line, bytes) else line
    except UnicodeDecodeError as exc:
        return None, {"error": f"line {number}: not UTF-8 text (byte {exc.start + 1}); save the file as UTF-8"}
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, {"error": f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})"}
    except RecursionError:
        return None, {"error": f"line {number}: JSON nested too deeply"}
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        reason = str(exc).split(";", 1)[0]  # not its advice to the programmer (sys.set_int_max_str_digits)
        return None, {"error": f"line {number}: not valid JSON ({reason})"}
    if not isinstance(record, dict):
        return None, {"error": f"line {number}: each line must be a JSON object"}
    return record, None


def score_line(env: VerifyingEnvironment, number: int, line: str | bytes, owner: str = "the environment") -> dict[str, Any]:
    """The output record of one input line: the environment's verdict, or ``{"error": "line N: ..."}`` for
    anything wrong with the line (encoding, JSON, nesting, shape, a plugin failure on it). Never raises
    for the line's content, so one bad line costs only its own record."""
    record, error = parse_line(number, line)
    if record is None:
        assert error is not None  # parse_line gives one or the other
        return error
    return _score_record(env, number, record, owner)


def _score_record(env: VerifyingEnvironment, number: int, record: dict[str, Any], owner: str) -> dict[str, Any]:
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


_BATCH_LINES = 4096


def _verify_in_batches(env: BatchVerifyingEnvironment, lines: Iterable[str | bytes], owner: str) -> Iterator[str]:
    """As the per-line loop, but ``_BATCH_LINES`` records at a time through ``env.verify_records`` (if a
    batch as a whole fails, its records are scored one by one, so one bad record still costs only itself)."""

    def flush(batch: list[tuple[int, dict | None, dict | None]]) -> Iterator[str]:
        records = [record for _, record, _ in batch if record is not None]
        results: list[dict[str, Any] | None]
        texts: list[str | None]
        try:
            results = list(env.verify_records(records)) if records else []
            if len(results) != len(records):
                raise ValueError(f"{len(results)} results for {len(records)} records")
            texts = [json.dumps(result) for result in results]  # all JSON-able, each encoded once
        except Exception:
            results, texts = [None] * len(records), [None] * len(records)
        pending = iter(zip(results, texts))
        for number, record, error in batch:
            if record is None:
                yield json.dumps(error)
                continue
            result, text = next(pending)
            if result is None:
                yield json.dumps(_score_record(env, number, record, owner))
            elif set(result) == {"error"}:
                yield json.dumps({"error": f"line {number}: {result['error']}"})
            else:
                yield text  # type: ignore[misc]  # encoded with its result above

    batch: list[tuple[int, dict | None, dict | None]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record, error = parse_line(number, line)
        batch.append((number, record, error))
        if len(batch) >= _BATCH_LINES:
            yield from flush(batch)
            batch = []
    if batch:
        yield from flush(batch)
