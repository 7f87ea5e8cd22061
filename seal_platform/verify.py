"""``seal-platform verify``: score transcripts offline with an environment's own verifier."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import apply_overrides, raise_for, validate_core, validate_settings
from .context import RunContext
from .environment import BatchVerifyingEnvironment, VerifyingEnvironment
from .errors import SealError, Terminated
from .lifecycle import lifecycle
from .plugins import (
    PLUGIN_FAILURES,
    PluginHost,
    describe_exception,
    make_plugin_manager,
    short_repr,
)


@dataclass
class VerifyCounts:
    """What :func:`verify_lines` wrote, counted as it goes: output lines, and those that are ``{"error": ...}``
    (a line that could not be scored). ``seal-platform verify`` exits 1 when ``errors`` is not 0."""

    lines: int = 0
    errors: int = 0


def benchmark_host(benchmark: str, overrides: Iterable[str]) -> PluginHost:
    """The plugins that verifying with ``benchmark`` uses: every installed plugin, loaded as for any other
    command (a plugin that fails to load is warned about, a clash is heard); only the benchmark's own plugin
    takes part in the verification (:func:`verify_lines`)."""
    return make_plugin_manager()


def verify_command(benchmark: str, file: Any, overrides: tuple[str, ...]) -> None:
    """``seal-platform verify``: one result line on standard output per line of ``file``, written as they come;
    exits 1 when any line got ``{"error": ...}`` (every line is still written), with the count on standard
    error. SIGTERM ends it as Ctrl-C does (the verifier's clean-up runs: forked lanes are killed), exit 143."""
    import sys

    from .commands import errors, sigterm_interrupts, warn_failed_plugins

    host = benchmark_host(benchmark, overrides)
    warn_failed_plugins(host)  # on stderr: the output stays one JSON line per input line
    # Written as they come (a terminal still gets each line at once: its stream is line-buffered); one
    # click.echo per line would flush the stream after every record.
    out = sys.stdout
    counts = VerifyCounts()
    try:
        with sigterm_interrupts():
            for line in verify_lines(benchmark, file, list(overrides), host=host, counts=counts):
                out.write(line + "\n")
            out.flush()
    except Terminated as exc:
        with contextlib.suppress(OSError):
            out.flush()
        errors.print(f"verify: {exc.how}; the lines above are complete, the rest were not scored")
        sys.exit(exc.exit_status)
    except BrokenPipeError:  # the reader went away (| head): nothing more to say to it
        raise
    except OSError as exc:  # a full disk, a device that refuses writes (> /dev/full)
        raise SealError(f"verify: cannot write the results to standard output: {exc.strerror or exc}.") from None
    if counts.errors:  # every line is written; the status says that some could not be scored
        errors.print(f"verify: {counts.errors} of {counts.lines} line(s) could not be scored (each has "
                     '{"error": ...} in its place)', highlight=False, markup=False)
        sys.exit(1)


def verify_lines(benchmark: str, lines: Iterable[str | bytes], overrides: list[str],
                 host: PluginHost | None = None, counts: VerifyCounts | None = None) -> Iterator[str]:
    """One output line (a JSON object) per non-blank input line, in input order; bad lines become
    ``{"error": ...}`` and the lines after them are still scored. Lines may be bytes (a file opened in
    binary): one that is not UTF-8 gets an error record instead of stopping the whole file. What the plugin
    returns is checked too: a result that is not a dict, not JSON or holds a NaN or an infinity becomes an
    error record naming the plugin. ``host``: the plugins (default: :func:`benchmark_host`'s). ``counts``: updated
    with each line written. The plugin's ``ctx.run_dir`` is a temporary directory, removed at the end."""
    host = host or benchmark_host(benchmark, overrides)
    owner, spec = host.require("benchmark", benchmark)
    settings = apply_overrides({}, overrides, example=f"{benchmark}.KEY=VALUE with a KEY from `seal-platform settings`")
    config, issues = validate_core({"environment": benchmark, "settings": settings})  # --set bfcl=1: not a mapping
    raise_for(issues, "--set")
    assert config is not None  # validate_core gives a config or issues
    models, issues = validate_settings(config, host.settings_models())
    raise_for(issues, "--set")
    counts = counts if counts is not None else VerifyCounts()
    # A run folder of its own: what the plugin writes there (a tracker's files) must not land in the
    # user's current directory, nor stay behind.
    with tempfile.TemporaryDirectory(prefix="seal-platform-verify-") as run_dir:
        ctx = RunContext(config=config, run_id="verify", run_dir=Path(run_dir), settings=models)
        # Only the benchmark's own plugin takes part: it alone gets start_run and end_run. Its start_run or its
        # environment's factory failing (a sys.exit too) is a SealError naming it: the command cannot run (exit
        # 2, no traceback); a SealError of its own is its message for the user, as it is.
        with contextlib.ExitStack() as stack:
            with _cannot_run(benchmark, owner, "its start_run hook"):
                stack.enter_context(lifecycle(host, ctx, resumed=False, plugins=[owner]))
            with _cannot_run(benchmark, owner, "building its environment"):
                env = spec.factory(ctx)
            if not isinstance(env, VerifyingEnvironment):
                raise SealError(f"benchmark {benchmark!r} (plugin {owner!r}) cannot verify transcripts offline: "
                                f"{_lacks(env)}.")
            outputs: Iterable[Output]
            if isinstance(env, BatchVerifyingEnvironment):
                outputs = _verify_in_batches(env, lines, owner)
            else:
                outputs = (_score_text(env, number, line, owner)
                           for number, line in enumerate(lines, start=1) if line.strip())
            for text, failed in outputs:
                counts.lines += 1
                counts.errors += failed
                yield text


@contextlib.contextmanager
def _cannot_run(benchmark: str, owner: str, what: str) -> Iterator[None]:
    """Within: plugin ``owner``'s code failing (an error, or sys.exit) is a :class:`SealError` saying that
    ``benchmark`` cannot run, naming the plugin, ``what`` it was doing and the error."""
    try:
        yield
    except SealError:
        raise
    except PLUGIN_FAILURES as exc:
        raise SealError(f"benchmark {benchmark!r} (plugin {owner!r}) cannot run: {what} raised "
                        f"{describe_exception(exc)}.") from exc


def _lacks(env: Any) -> str:
    """What ``env`` (a benchmark's environment object) lacks to be a :class:`VerifyingEnvironment`."""
    kind = f"its environment object ({type(env).__module__}.{type(env).__qualname__})"
    if not callable(getattr(env, "verify_record", None)):
        return f"{kind} has no verify_record method"
    missing = [f"`{member}` attribute" if member == "name" else f"{member} method"
               for member in ("name", "tasks", "pristine_interface") if not hasattr(env, member)]
    return f"{kind} has verify_record but no {' and no '.join(missing) or 'match for the protocol'} " \
        "(seal_platform.environment.VerifyingEnvironment: an environment also has `name`, tasks(split) and " \
        "pristine_interface())"


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


def score_line(env: VerifyingEnvironment, number: int, line: str | bytes, owner: str | None = None) -> dict[str, Any]:
    """The output record of one input line: the environment's verdict, or ``{"error": "line N: ..."}`` for
    anything wrong with the line (encoding, JSON, nesting, shape, a plugin failure on it) or with what the
    plugin returned for it. Never raises for the line's content, so one bad line costs only its own record."""
    return json.loads(_score_text(env, number, line, owner)[0])


# An output line: its JSON text, and whether it is an error record (the line could not be scored).
Output = tuple[str, bool]


# json.dumps(result, allow_nan=False), without making an encoder for each result: of the 10-15 ms that 3,200
# results take (serial work: it follows the verifier's lanes), about 4 ms.
_STRICT_JSON = json.JSONEncoder(allow_nan=False)


def _error(message: str) -> Output:
    return json.dumps({"error": message}), True


def _score_text(env: VerifyingEnvironment, number: int, line: str | bytes, owner: str | None) -> Output:
    """:func:`score_line`'s record, as its output line."""
    record, error = parse_line(number, line)
    if record is None:
        assert error is not None  # parse_line gives one or the other
        return json.dumps(error), True
    return _score_record(env, number, record, owner)


def _plugin(owner: str | None) -> str:
    return f"plugin {owner!r}" if owner else "the environment"


def _score_record(env: VerifyingEnvironment, number: int, record: dict[str, Any], owner: str | None) -> Output:
    """The output line of one parsed record: ``verify_record``'s result, checked."""
    try:
        result = env.verify_record(record)
    except (ValueError, KeyError, TypeError) as exc:  # the record is malformed (the protocol's ValueError)
        return _error(f"line {number}: {exc}")
    except RecursionError:
        return _error(f"line {number}: the record is nested too deeply")
    except PLUGIN_FAILURES as exc:  # a plugin failing on one record (even by sys.exit) must not lose the others
        return _error(f"line {number}: {_plugin(owner)} failed on this record: {type(exc).__name__}: {exc}")
    return _checked(result, number, owner, "verify_record")


def _checked(result: Any, number: int, owner: str | None, hook: str) -> Output:
    """``result`` (what the plugin's ``hook`` returned for line ``number``) as its output line, the JSON text
    of an object; or an error record naming the plugin, when it is not a dict, is not JSON (a set, a
    cycle, ...) or holds a NaN or an infinity (which strict JSON has no way to write). A plugin's own
    ``{"error": ...}`` (that key alone) gets the line's number."""
    if not isinstance(result, dict):
        return _error(f"line {number}: {_plugin(owner)} returned {short_repr(result)} (type "
                      f"{type(result).__name__}) from {hook}, not a dict (a JSON object)")
    if len(result) == 1 and "error" in result:
        return _error(f"line {number}: {result['error']}")
    try:
        return _STRICT_JSON.encode(result), False
    except ValueError as exc:
        why = "a NaN or an infinity, which JSON cannot hold" if "Out of range float" in str(exc) else str(exc)
    except RecursionError:
        why = "a value nested too deeply"
    except PLUGIN_FAILURES as exc:  # TypeError (a set, an object), or its own __str__ or keys failing
        why = f"{type(exc).__name__}: {exc}"
    return _error(f"line {number}: {_plugin(owner)} returned a result from {hook} that is not valid JSON "
                  f"({why}): {short_repr(result)}")


_BATCH_LINES = 4096


def _verify_in_batches(env: BatchVerifyingEnvironment, lines: Iterable[str | bytes], owner: str) -> Iterator[Output]:
    """As the per-line loop, but ``_BATCH_LINES`` records at a time through ``env.verify_records`` (if a
    batch as a whole fails, or returns a number of results other than its records', its records are
    scored one by one, so one bad record still costs only itself)."""

    def flush(batch: list[tuple[int, dict | None, dict | None]]) -> Iterator[Output]:
        records = [record for _, record, _ in batch if record is not None]
        results: list[Any] | None
        try:
            results = list(env.verify_records(records)) if records else []
            if len(results) != len(records):
                raise ValueError(f"{len(results)} results for {len(records)} records")
        except PLUGIN_FAILURES:  # SystemExit too: the records are scored one by one, each failing alone
            results = None
        pending = iter(results or ())
        for number, record, error in batch:
            if record is None:
                yield json.dumps(error), True
            elif results is None:
                yield _score_record(env, number, record, owner)
            else:
                yield _checked(next(pending), number, owner, "verify_records")

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
