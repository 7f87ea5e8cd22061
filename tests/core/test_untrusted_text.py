"""Text that plugins, tools and models put in the store reaches the terminal shown, never obeyed: no escape
sequence (clear screen, set window title), no C1 control, no bidi override, no rich markup interpreted, and a
label thousands of characters long clipped with a note (seal_platform/present/safe.py, used by every renderer
of such text: `run`'s end summary, `show`, `transcripts`, `transcripts --against`, `labels`, `settings`)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from rich.console import Console

from seal_platform.capability import CapabilityState
from seal_platform.cli import cli
from seal_platform.present.digest import load_digest
from seal_platform.present.listings import labels_listing, settings_listing
from seal_platform.present.safe import clean, safe_text
from seal_platform.present.summary import compare_runs, comparison_view, run_summary
from seal_platform.present.transcript_pairs import pair_episodes, render_rich
from seal_platform.store import RunStore
from seal_platform.types import EvalResult, Interface, Message, ToolCall, Trajectory, TurnLabel, TurnVerdict

# What the audit's plugin produced (AUDIT_FAULT=diag_hostile / hostile_short): ESC sequences (clear screen,
# colour, an OSC window title ended by BEL), a C1 CSI, a bidi override, rich markup and a 5,000-character label.
ATTACK = "\x1b]0;pwned\x07\x1b[2J\x1b[31m[bold red]RED[/]\u202eevil\x9b"
LONG_LABEL = "\x1b[2J\x1b[31m[bold red]boom[/]\u202e" + "L" * 5000
SHORT_LABEL = "[bold red]bad[/]\x1b[2J"
FORBIDDEN = ("\x1b", "\x07", "\x9b", "\u202e")
RUN_A, RUN_B = "20260101-000000-aaaaaa", "20260101-000001-bbbbbb"


def _trajectory(run_id: str, phase: str, step: int, k: int) -> Trajectory:
    return Trajectory(
        id=f"{phase}-{run_id}-{step}-{k}",
        task_id=f"task-{k}",
        category=f"cat{ATTACK}",
        group=f"g{k}",
        reward=float(k % 2),
        finish=f"completed{ATTACK}",
        messages=[
            Message(role="system", content=f"system {ATTACK}"),
            Message(role="user", content=f"user asks {ATTACK}"),
            Message(role="assistant", content=f"model says {ATTACK}\nsecond line", trainable=True),
            Message(role="tool", content=f"tool says {ATTACK}"),
        ],
        tool_calls=[
            ToolCall(turn=0, name=f"fn{ATTACK}", arguments={"x": ATTACK}, result=f"result {ATTACK}"),
            ToolCall(turn=0, name="fn2", error=f"error {ATTACK}"),
        ],
        turn_verdicts=[TurnVerdict(turn=0, passed=bool(k % 2), reached=True, checks={"check": ATTACK})],
    )


def _labels(run_id: str, step: int, k: int) -> list[TurnLabel]:
    return [TurnLabel(trajectory_id=f"train-{run_id}-{step}-{k}", turn=0, label=LONG_LABEL, source=f"diag{SHORT_LABEL}",
                      rationale=f"because {ATTACK}", reference_label=f"ref{SHORT_LABEL}"),
            TurnLabel(trajectory_id=f"train-{run_id}-{step}-{k}", turn=0, label=SHORT_LABEL, source="coarse",
                      rationale=ATTACK)]


@pytest.fixture
def hostile_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = RunStore(url)
    for run_id in (RUN_A, RUN_B):
        store.create_run(run_id, name=f"run{SHORT_LABEL}", recipe="r.yaml", config={"environment": "hostile"},
                         config_hash="0123456789abcdef", seed=0, run_dir=str(tmp_path / run_id), plugins=[])
        pristine = Interface(revision=0, system_text="base")
        store.add_interface(run_id, pristine, None)
        for step in range(2):
            store.record_step(
                run_id,
                step=step,
                epoch=0,
                trajectories=[_trajectory(run_id, "train", step, k) for k in range(2)],
                labels=[lab for k in range(2) for lab in _labels(run_id, step, k)],
                label_weights={LONG_LABEL: 1.5, SHORT_LABEL: 0.5},
                state=CapabilityState(),
                interface_revision=0,
                metrics={f"metric{SHORT_LABEL}": 1.0},
                timings={f"collect{SHORT_LABEL}": 1.0},
            )
        store.add_interface(run_id, Interface(revision=1, parent=0, step=1, system_text=f"base\nguideline {ATTACK}",
                                              changes=[f"direct: +{ATTACK} (evidence)"], driven_by=[LONG_LABEL]),
                            pristine)
        for step in (0, 2):
            episodes = [_trajectory(run_id, "eval", step, k) for k in range(2)]
            store.add_evaluation(run_id, step, EvalResult(split=f"test{SHORT_LABEL}",
                                                          per_category={f"cat{ATTACK}": 50.0, "plain": 10.0 * step},
                                                          n_tasks=4, trajectories=episodes))
        store.add_event(run_id, f"kind{SHORT_LABEL}", f"message {ATTACK}", {"x": ATTACK})
        store.finish_run(run_id, "failed", f"PluginError: {ATTACK}")
    store.close()
    return url


def _assert_neutral(output: str, *, markup: bool = True) -> None:
    found = [repr(c) for c in FORBIDDEN if c in output]
    assert not found, f"reached the output: {found}\n{output[:3000]}"
    assert not re.search("L{200}", output), "a 5,000-character label printed unclipped"
    if markup:  # printed as text, not interpreted as a style
        assert "[bold red]" in output, output[:3000]


def _console(width: int = 80) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, color_system=None, force_terminal=False), out


def test_clean_shows_control_characters_and_clips():
    text = clean(ATTACK)
    assert "\x1b" not in text and "␛]0;pwned␇␛[2J" in text and "\\u202e" in text and "\\x9b" in text
    assert clean("a\nb\tc\r\nd", lines=True) == "a\nb\tc\nd" and clean("a\nb\tc") == "a␊b␉c"
    assert clean(clean(ATTACK)) == clean(ATTACK)
    assert clean("L" * 5000, 64) == "L" * 64 + " ... [4936 more characters]"
    assert safe_text("[bold red]x[/]").plain == "[bold red]x[/]"  # a Text: never parsed as markup


def test_the_end_of_run_summary_shows_labels_and_categories_as_text(hostile_store):
    store = RunStore(hostile_store)
    try:
        console, out = _console()
        console.print(run_summary(load_digest(store, RUN_A), report="r.html", log="run.log"), highlight=False)
        _assert_neutral(out.getvalue())
        assert "more characters]" in out.getvalue()  # the long label: clipped, with a note
        console, out = _console(60)  # compare: a run's name in its column head
        digests = [load_digest(store, RUN_A), load_digest(store, RUN_B)]
        console.print(comparison_view(console, compare_runs(digests)), highlight=False)
        _assert_neutral(out.getvalue())
    finally:
        store.close()


def test_show_prints_the_stored_text_as_text(hostile_store):
    result = CliRunner().invoke(cli, ["show", RUN_A, "--store", hostile_store], terminal_width=80)
    assert result.exit_code == 0, result.output
    _assert_neutral(result.output)
    assert "␛[2J" in result.output  # shown, for what it is


@pytest.mark.parametrize("args", [[], ["--eval"], ["--width", "40"]])
def test_transcripts_print_messages_tool_results_and_labels_as_text(hostile_store, args):
    result = CliRunner().invoke(cli, ["transcripts", RUN_A, "--store", hostile_store, *args], terminal_width=100)
    assert result.exit_code == 0, result.output
    _assert_neutral(result.output)
    if not args:
        assert "tool says ␛]0;pwned␇" in result.output and "result ␛]0;pwned" in result.output


def test_a_filter_that_matches_nothing_lists_the_labels_as_text(hostile_store):
    result = CliRunner().invoke(cli, ["transcripts", RUN_A, "--store", hostile_store, "--label", "nope"])
    assert result.exit_code == 0, result.output
    _assert_neutral(result.output)


def test_transcripts_side_by_side_plain_and_in_columns(hostile_store):
    plain = CliRunner().invoke(cli, ["transcripts", RUN_A, "--against", RUN_B, "--store", hostile_store],
                               terminal_width=120)
    assert plain.exit_code == 0, plain.output
    _assert_neutral(plain.output)
    store = RunStore(hostile_store)
    try:
        pairs = pair_episodes(store, RUN_A, RUN_B, evaluation=False)
        assert pairs
        console, out = _console(160)
        console.print(render_rich(pairs, {RUN_A: f"A {SHORT_LABEL}", RUN_B: "B"}), highlight=False, markup=False)
        _assert_neutral(out.getvalue())
    finally:
        store.close()


def test_labels_and_settings_listings_print_what_plugins_registered_as_text():
    rows = [SimpleNamespace(diagnoser=f"diag{SHORT_LABEL}", plugin="p", label=LONG_LABEL, reference=(SHORT_LABEL,),
                            meaning=f"means {ATTACK}"),
            SimpleNamespace(diagnoser="coarse", plugin="p", label="ok", reference=(), meaning=ATTACK)]
    for width in (200, 80, 30):  # the table, the narrow table, the blocks
        console, out = _console(width)
        console.print(labels_listing(console, rows, "labels"), soft_wrap=False)
        _assert_neutral(out.getvalue())
    settings = [(f"p{SHORT_LABEL}", "p.key", "str", ATTACK, f"what {ATTACK}")]
    for width in (200, 30):
        console, out = _console(width)
        console.print(settings_listing(console, settings, "settings"), soft_wrap=False)
        _assert_neutral(out.getvalue())


@pytest.mark.parametrize("args", [["show", RUN_A], ["transcripts", RUN_A, "--eval"],
                                  ["transcripts", RUN_A, "--against", RUN_B]])
def test_json_outputs_escape_what_a_terminal_would_obey_and_keep_the_data(hostile_store, args):
    """JSON escapes C0 controls itself; DEL, C1 and bidi controls it leaves raw (ensure_ascii=False, pydantic):
    they are written as \\u escapes, so the same strings come back from a JSON reader."""
    import json

    result = CliRunner().invoke(cli, [*args, "--store", hostile_store, "--json"])
    assert result.exit_code == 0, result.output
    found = [repr(c) for c in FORBIDDEN if c in result.output]
    assert not found, found
    data = json.loads(result.output)

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for key, item in value.items():
                yield key
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    assert any(ATTACK in text for text in strings(data))  # every character kept


def test_the_cli_prints_a_plugins_error_text_as_text(capsys):
    """A failed plugin's error, and an exception a plugin raised into a command, reach the terminal cleaned
    (the CLI's own lines: its failure paragraph and its warnings about plugins that did not load)."""
    from seal_platform.commands import print_error as _print_error
    from seal_platform.commands import warn_failed_plugins as _warn_failed_plugins
    from seal_platform.plugins import PluginRecord

    record = PluginRecord(name="evil" + ATTACK, distribution="evil-dist", status="failed", error="boom " + ATTACK)
    _warn_failed_plugins(SimpleNamespace(failed=lambda: [record]))
    _print_error(RuntimeError("stage failed: " + ATTACK))
    err = capsys.readouterr().err
    assert "boom" in err and "stage failed" in err
    _assert_neutral(err)
