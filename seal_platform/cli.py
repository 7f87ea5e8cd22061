"""The ``seal-platform`` command line.

User mistakes (a bad recipe, an unknown run, a missing plugin) end in one paragraph on stderr and exit
status 2, never a traceback; ``SEAL_PLATFORM_DEBUG=1`` shows the traceback anyway.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from .commands import (
    ENV_STORE,
    STORE_URL_KEY,
    console,
    default_store_url,
    env_store_url,
    errors,
    open_store,
    print_error,
    refuse_unknown_options,
    sigterm_interrupts,
    split_recipe_args,
    store_failure,
    store_option,
    store_option_url,
    warn_failed_plugins,
)
from .commands import clean as _clean
from .config import raise_for, stored_config
from .errors import SealError, Terminated, as_sentence
from .plugins import make_plugin_manager

__all__ = ["build_cli", "cli", "console", "errors", "main", "open_store", "store_option"]


def __getattr__(name: str) -> Any:
    """``load_recipe`` and ``plugin_host_for`` (from :mod:`.planning`, imported when first asked for: `verify`
    needs none of it), for the modules that import them from here."""
    if name in ("load_recipe", "plugin_host_for"):
        from . import planning

        return getattr(planning, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SealGroup(click.Group):
    """Turns the platform's own errors into a short message instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from .interrupts import as_interruption, interrupts_noted

        try:
            with interrupts_noted():  # a Ctrl-C that a library swallows or re-raises as another error still stops
                try:
                    return super().invoke(ctx)
                except Exception as exc:
                    stop = None if isinstance(exc, (click.exceptions.Exit, click.Abort, click.ClickException)) \
                        else as_interruption(exc)
                    if stop is None:
                        raise
                    raise stop from exc
        except KeyboardInterrupt as exc:  # one the command does not handle itself (`run` does, with a resume hint)
            errors.print(exc.how if isinstance(exc, Terminated) else "interrupted", highlight=False)
            ctx.exit(exc.exit_status if isinstance(exc, Terminated) else 130)
        except SealError as exc:
            if os.environ.get("SEAL_PLATFORM_DEBUG"):
                raise
            print_error(exc)
            ctx.exit(2)
        except Exception as exc:
            # A store the database itself refuses (a damaged page found mid-command, a lost server): the
            # store's one paragraph, as for the errors above. Anything else is a bug: its traceback.
            store_error = store_failure(ctx, exc)
            if store_error is None or os.environ.get("SEAL_PLATFORM_DEBUG"):
                raise
            print_error(store_error)
            ctx.exit(2)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``, as click.version_option says it; the version is read (the installed package's metadata)
    only when asked for, not by every command."""
    if not value or ctx.resilient_parsing:
        return
    from . import __version__

    click.echo(f"seal-platform, version {__version__}", color=ctx.color)
    ctx.exit()


@click.group(cls=SealGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_show_version,
              help="Show the version and exit.")
def cli() -> None:
    """seal-platform: train tool-use LLM agents with reinforcement learning.

    The stock recipe is SEAL: on-policy rollouts under an executable verifier, every rollout diagnosed turn
    by turn, the diagnoses driving a training-only evolution of the agent's interface and a reweighting of
    GRPO advantages. Everything that does real work is a plugin (`seal-platform plugins`).
    """


# --- run ---------------------------------------------------------------------------------------------


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, callback=refuse_unknown_options)
@click.option("--resume", "resume", metavar="RUN", default=None, help="Continue a crashed or interrupted run.")
@click.option("--run-dir", "run_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With --resume: the run's folder was moved here (the store is updated to point at it).")
@click.option("--restart-from-step", "restart_from", type=click.IntRange(0), default=None,
              help="With --resume: discard the run's history from step N on and train again from there (0: from "
                   "the start; N > 0 needs the durable checkpoint after step N - 1).")
@click.option("--takeover", is_flag=True,
              help="With --resume: take over a run the store says is running (its host died, or it ran on another "
                   "machine whose process is known to be gone).")
@click.option("--allow-plugin-changes", is_flag=True,
              help="With --resume: go on although the plugins installed now differ from those the run ran with (a "
                   "version changed, a plugin added, removed or now failing to load); without it such a resume is "
                   "refused before anything is changed. The differences and the previous plugin list are recorded "
                   "in the run's events (plugins_changed).")
@click.option("--accept-changes", is_flag=True,
              help="With --resume: go on although the run's task data changed since it started (a task file "
                   "edited); without it such a resume stops before its history is touched. The change is recorded "
                   "in the run's events (task_data).")
@click.option("--store", "store_url", default=None, callback=store_option_url,
              help=f"Run store: an SQLAlchemy URL or an SQLite file's path (default: ${ENV_STORE}, else the "
                   "recipe's store:, else <runs_dir>/store.sqlite; the read commands take --store, else "
                   f"${ENV_STORE}, else runs/store.sqlite).")
@click.option("--quiet", is_flag=True, help="No live progress display.")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Show library logs (vLLM, transformers, torch) here, not only in <run dir>/run.log.",
)
@click.option("--no-report", is_flag=True, help="Do not write <run dir>/report.html at the end.")
def run(args: tuple[str, ...], resume: str | None, run_dir: Path | None, restart_from: int | None, takeover: bool,
        allow_plugin_changes: bool, accept_changes: bool, store_url: str | None, quiet: bool, verbose: bool,
        no_report: bool) -> None:
    """Run a recipe: seal-platform run [RECIPE] [key.sub=value ...]

    RECIPE is a YAML file or the name of a shipped recipe (default: smarthome-embedded, the stock SEAL loop on
    the CPU-sized smarthome environment with the embedded model; seal-embedded runs it on BFCL). Overrides such
    as training.steps=2 or settings.grpo.lr=1e-5 change single keys; a plugin's options are its settings
    (join a Ray cluster with settings.ray.enabled=true settings.ray.address=HOST:6379).
    """
    from .loop import Runner
    from .planning import new_run_config, plan_config
    from .present.progress import RichProgress
    from .present.run_display import run_with_display
    from .recipe_secrets import shown_store_url
    from .resume import CheckpointLoadError, failed_run_state, plan_start, resumed_config
    from .store import RunStore

    given = [name for name, value in (("--run-dir", run_dir), ("--restart-from-step", restart_from),
                                      ("--takeover", takeover), ("--allow-plugin-changes", allow_plugin_changes),
                                      ("--accept-changes", accept_changes)) if value is not None and value is not False]
    row = None
    if resume is not None:
        store = open_store(store_url, write=True)  # an existing store: a mistyped path is not created
        row = store.get_run(resume, whole=True)  # a damaged row is refused, not resumed with stand-ins
    start = plan_start(row, takeover=takeover, resume_options=given)
    if start.action == "refuse":
        raise SealError(start.reason)
    if start.reason:
        errors.print(start.reason, highlight=False)
    if row is not None:
        config, recipe_name, origin, checked_with = resumed_config(store, row, args, run_dir), row.recipe, None, None
    else:
        config, recipe_name, origin, checked_with = new_run_config(
            *split_recipe_args(args), store_url or env_store_url()
        )
        store = RunStore(config.store_url())
    plan = plan_config(config, recipe_name, origin=origin, host=checked_with)
    assert plan.host is not None
    warn_failed_plugins(plan.host)
    # A resume's plugins are checked against those the run recorded by the Runner: refused (or, allowed,
    # announced here) before the store or the run's folder (--run-dir) is changed.
    runner = Runner(plan, plan.host, store, recipe=recipe_name, resume_run_id=resume,
                    progress=None if quiet else RichProgress(console), restart_from=restart_from, takeover=takeover,
                    allow_plugin_changes=allow_plugin_changes, accept_changes=accept_changes,
                    run_dir=None if run_dir is None else run_dir.resolve())
    if runner.plugin_changes is not None:
        errors.print(f"run {runner.run_id} resumes with other plugins than it ran with (--allow-plugin-changes; "
                     f"recorded in its events as plugins_changed):\n{runner.plugin_changes.listed()}",
                     highlight=False, markup=False)
    if runner.relocated is not None:
        errors.print(f"run {runner.run_id}: its folder is now {runner.run_dir} ({runner.relocated} checkpoint "
                     "path(s) updated)", highlight=False)
    store_arg = shlex.quote(shown_store_url(store.url))
    try:
        with sigterm_interrupts():
            run_with_display(runner, store, console, verbose=verbose, live=not quiet, report=not no_report)
    except KeyboardInterrupt as exc:
        _say_stopped(exc, store, runner, store_arg, report=not no_report)
    except CheckpointLoadError as exc:
        raise SealError(f"{as_sentence(str(exc))} The run {runner.run_id} is marked failed.") from exc
    except SealError as exc:
        # What runs the recipe again as a new run, for the message of a run that failed before training anything.
        rerun = None if resume is not None else shlex.join(
            ["seal-platform", "run", *args, *(["--store", store_url] if store_url else [])])
        raise SealError(f"{as_sentence(str(exc))} {failed_run_state(store, runner.run_id, rerun)}") from exc
    console.print(f"details: seal-platform show {runner.run_id} --store {store_arg}", highlight=False)


def _say_stopped(exc: KeyboardInterrupt, store: Any, runner: Any, store_arg: str, *, report: bool) -> None:
    """A run stopped by Ctrl-C or a signal: what the store says of it and how to go on (:func:`.resume.stopped_lines`);
    exits 130 (or the signal's status)."""
    from .resume import stopped_lines

    how = exc.how if isinstance(exc, Terminated) else "interrupted"
    for line in stopped_lines(store, runner.run_id, how, runner.config.training.checkpoint_every, store_arg,
                              report=report):
        errors.print(line, highlight=False)
    sys.exit(exc.exit_status if isinstance(exc, Terminated) else 130)


# --- plugins -----------------------------------------------------------------------------------------


@cli.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (every field of every plugin).")
def plugins(name: str | None, as_json: bool) -> None:
    """List installed plugins: name, version, load status, what each provides, its hooks. NAME: one plugin in
    full (distribution, entry point, every hook, settings sections, commands, the error of a failed one)."""
    host = make_plugin_manager()
    commands = click.Group("seal-platform")  # a plugin whose register_commands fails is listed as failed
    host.register_commands(commands)
    provides, clashes = host.provided(), host.clash_notes()
    rows = []
    for record in host.records:
        if name is not None and record.name != name:
            continue
        row = record.to_dict()
        row["provides"] = provides.get(record.name, []) if record.status == "loaded" else []
        row["clashes"] = clashes.get(record.name, []) if record.status == "loaded" else []
        rows.append(row)
    if name is not None and not rows:
        from .recipe_keys import close_key

        known = sorted({r.name for r in host.records})
        meant = close_key(name, known)
        raise SealError(f"no installed plugin is called {name!r}{f' (did you mean {meant!r}?)' if meant else ''}; "
                        f"installed plugins: {', '.join(known) or 'none'}.")
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from .present.plugin_listing import plugin_details, plugins_table

    if name is not None:
        owners = commands.__dict__.get("_seal_platform_command_owners", {})
        for row, record in zip(rows, [r for r in host.records if r.name == name]):
            console.print(plugin_details(row, record, host, sorted(c for c, o in owners.items() if o == name)),
                          highlight=False)
        return
    console.print(plugins_table(rows))
    for row in rows:
        if row["error"]:
            errors.print(f"{row['name']} ({row['status']}): {row['error']}", highlight=False, markup=False)
    console.print("one plugin in full (every hook, settings, commands): seal-platform plugins NAME", highlight=False)


# --- config ------------------------------------------------------------------------------------------


@cli.group()
def config() -> None:
    """Check and show recipes."""


@config.command("validate")
@click.argument("recipe", required=False)
@click.argument("overrides", nargs=-1)
def config_validate(recipe: str | None, overrides: tuple[str, ...]) -> None:
    """Report every problem in RECIPE at once; exit 1 if there is any. RECIPE defaults as for `run` and
    `config show` (smarthome-embedded); overrides may follow it or come alone."""
    from .planning import recipe_problems

    recipe, changes = split_recipe_args([recipe, *overrides] if recipe is not None else [])
    config_, issues, path = recipe_problems(recipe, changes, on_host=warn_failed_plugins)
    if issues:
        with_overrides = (
            " with its command-line overrides" if any(i.source.startswith("override ") for i in issues) else ""
        )
        errors.print(f"{path}{with_overrides}: {len(issues)} problem(s):", highlight=False)
        for issue in issues:
            errors.print(f"  - {issue}", highlight=False, markup=False)
        sys.exit(1)
    assert config_ is not None
    console.print(f"{path}: ok (config hash {config_.config_hash()})", highlight=False)


@config.command("show")
@click.argument("recipe", required=False)
@click.argument("overrides", nargs=-1)
def config_show(recipe: str | None, overrides: tuple[str, ...]) -> None:
    """Print the resolved recipe (defaults filled in) as YAML. RECIPE defaults as for `run`
    (smarthome-embedded); overrides may follow it or come alone."""
    import yaml

    from .planning import check_recipe, load_recipe, plugin_host_for

    recipe, changes = split_recipe_args([recipe, *overrides] if recipe is not None else [])
    config_, issues, path = load_recipe(recipe, changes)
    if config_ is None:
        raise_for(issues, str(path))
    assert config_ is not None
    data = config_.model_dump(mode="json")
    # Every enabled plugin's section with its defaults filled in, as the run will see it.
    checked, problems = check_recipe(config_, plugin_host_for(config_))
    if checked is None:  # a recipe a run would refuse has no resolved form (config validate lists the same)
        raise_for(problems, str(path))
    assert checked is not None
    data["settings"] = {name: model.model_dump(mode="json") for name, model in sorted(checked.settings.items())}
    from .recipe_secrets import redact_config

    models = {name: type(model) for name, model in checked.settings.items()}
    click.echo(yaml.safe_dump(redact_config(data, models), sort_keys=False))


# --- runs, show, report ------------------------------------------------------------------------------


RUNS_ON_A_TERMINAL = 50  # `runs` on a terminal lists the newest this many unless --limit says otherwise


@cli.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", type=click.IntRange(0), default=None,
              help=f"List the newest N runs; 0: all (default: the newest {RUNS_ON_A_TERMINAL} on a terminal, all "
                   "otherwise and with --json).")
def runs(store_url: str | None, as_json: bool, limit: int | None) -> None:
    """List runs in the store, newest first. Before the first run there is no store at the default place
    (runs/store.sqlite): no runs, and none is made; a store given by --store or $SEAL_PLATFORM_STORE must
    exist, as for `show`. A row that cannot be read whole is listed with what can be read, and a warning line
    says what could not."""
    named = store_url or env_store_url()
    url = named or default_store_url()
    if limit is None:
        limit = RUNS_ON_A_TERMINAL if not as_json and console.is_terminal else 0
    total = 0
    if named is None and url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        store, listed = None, []
    else:
        store = open_store(store_url)
        listed = store.list_runs(limit=limit or None)
        total = store.count_runs() if limit and len(listed) == limit else len(listed)
    if as_json:
        from .present.listings import runs_json

        rows = runs_json(store, listed)
        click.echo(json.dumps(rows, indent=2))
        return
    if not listed:
        console.print(f"no runs yet in {url}; start one with: seal-platform run [RECIPE]", highlight=False,
                      markup=False)
        return
    from .present.listings import runs_listing

    # Ids, names and statuses whole at any width: fewer columns, then a block per run, when narrow (all: --json).
    console.print(runs_listing(console, listed, f"runs in {url}"), soft_wrap=False, crop=False)
    if total > len(listed):
        console.print(f"the newest {len(listed)} of {total} runs; --limit N lists more (0: all)", highlight=False,
                     markup=False)


@cli.command()
@click.argument("run_id", metavar="RUN")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (the run's digest).")
@click.option("--all-steps", is_flag=True, help="Every step's row (a long run shows its first 10 and last 20).")
@click.option("--traceback", "tracebacks", is_flag=True, help="Only the traceback of each crash of the run, as stored.")
def show(run_id: str, store_url: str | None, as_json: bool, all_steps: bool, tracebacks: bool) -> None:
    """Show one run: config, plugins, steps, evaluations, interface revisions, events (--json: with their
    data, a crash's traceback included)."""
    from .present.reporting import show_run, show_tracebacks

    if as_json:
        from .present.digest import load_digest
        from .present.safe import json_safe

        click.echo(json_safe(load_digest(open_store(store_url), run_id).model_dump_json(indent=2)))
        return
    if tracebacks:
        if not show_tracebacks(open_store(store_url), run_id, console):
            errors.print(f"run {run_id} recorded no traceback: it has no crash event with one.", highlight=False,
                         markup=False)
        return
    show_run(open_store(store_url), run_id, console, all_steps=all_steps)


@cli.command()
@click.argument("run_id", metavar="RUN")
@store_option
@click.option(
    "--out",
    type=click.Path(),
    default=None,
    help="The HTML file (or a folder for report.html); default: report-<run id>.html in the current directory.",
)
@click.option("--eval-episodes", type=click.IntRange(0), default=20, show_default=True,
              help="Transcripts shown per evaluation (failed ones first).")
@click.option("--train-groups", type=click.IntRange(0), default=1, show_default=True,
              help="Groups of rollouts shown per training step (mixed rewards first).")
def report(run_id: str, store_url: str | None, out: str | None, eval_episodes: int, train_groups: int) -> None:
    """Write one self-contained HTML page about a run: pass rate per category, labels and A-Patch weights
    over steps, the interface revisions with their diffs, step timings, transcripts. It is written where --out
    says or in the current directory, never where the store says (the run's folder is a path from the store)."""
    from .present.digest import load_digest
    from .present.html_report import default_report_path, write_run_report
    from .present.transcripts import report_transcripts

    store = open_store(store_url)
    sample = report_transcripts(store, run_id, eval_limit=eval_episodes, train_groups=train_groups)
    digest = load_digest(store, run_id)
    path = write_run_report(digest, Path(out) if out else default_report_path(digest.id), transcripts=sample)
    console.print(f"wrote {path}", highlight=False)


@cli.command()
@click.argument("run_ids", metavar="RUN RUN ...", nargs=-1, required=True)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None, help="Also write an HTML page here.")
def compare(run_ids: tuple[str, ...], store_url: str | None, as_json: bool, html_out: str | None) -> None:
    """Final per-category pass rates and averages of several runs side by side (one column per run, one
    block of rows per evaluation set)."""
    from .present.digest import load_digest
    from .present.summary import compare_runs, comparison_view

    store = open_store(store_url)
    digests = [load_digest(store, run_id) for run_id in run_ids]
    comparison = compare_runs(digests)
    if html_out:
        from .present.html_report import comparison_html, write_page

        write_page(Path(html_out), comparison_html(comparison, digests))
    if as_json:
        from .present.safe import json_safe

        click.echo(json_safe(comparison.model_dump_json(indent=2)))
        return
    console.print(comparison_view(console, comparison), highlight=False, soft_wrap=False)
    if html_out:
        console.print(f"wrote {html_out}", highlight=False)


@cli.command()
@click.argument("run_id", metavar="RUN")
@click.option("--step", type=int, default=None, help="Only this step's episodes.")
@click.option("--task", "task", default=None, help="Only this task's episodes.")
@click.option("--label", default=None, help="Only episodes with this label (any diagnoser) in some turn.")
@click.option("--failed", is_flag=True, help="Only episodes that did not pass.")
@click.option("--eval", "evaluation", is_flag=True, help="Evaluation episodes instead of training rollouts.")
@click.option("--limit", type=click.IntRange(1), default=5, show_default=True, help="At most this many episodes.")
@click.option(
    "--width", type=click.IntRange(20), default=2000, show_default=True, help="Clip texts at this many characters."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (every field, nothing clipped).")
@click.option("--against", "against", metavar="RUN_B", default=None,
              help="Side by side with RUN_B's episodes of the same tasks (with --eval: each run's last evaluation, "
                   "or the one after --step N).")
@click.option(
    "--against-step",
    type=int,
    default=None,
    help="With --against: RUN_B's step (default: --step's; a run against itself with --eval: its last evaluation).",
)
@click.option("--differ", is_flag=True, help="With --against: only tasks whose outcomes differ.")
@click.option("--plain", is_flag=True, help="Plain text (the default when the output is not a terminal).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
              help="With --against: also write the side-by-side view as an HTML page here.")
@store_option
def transcripts(run_id: str, step: int | None, task: str | None, label: str | None, failed: bool, evaluation: bool,
                limit: int, width: int, as_json: bool, against: str | None, against_step: int | None, differ: bool,
                plain: bool, html_out: str | None, store_url: str | None) -> None:
    """What the agent did: a run's episodes turn by turn (messages, parsed calls and tool results, the
    verifier's verdict, every diagnoser's label with its rationale and A-Patch weight); with --against, two
    runs' episodes of the same tasks next to each other, the turns that differ marked."""
    from .present.transcripts import load_episodes, nothing_matched, render

    if against is not None:
        _transcripts_against(run_id, against, step=step, against_step=against_step, task=task, label=label,
                             failed=failed, evaluation=evaluation, differ=differ, limit=limit, width=width,
                             as_json=as_json, plain=plain, html_out=html_out, store_url=store_url)
        return
    if against_step is not None or differ or html_out:
        raise SealError("--against-step, --differ and --html go with --against RUN_B.")
    store = open_store(store_url)
    episodes = load_episodes(store, run_id, step=step, task=task, label=label, failed=failed,
                             evaluation=evaluation, limit=limit)
    if as_json:
        from .present.safe import json_safe

        click.echo(json_safe(json.dumps([e.model_dump(mode="json") for e in episodes], indent=2, ensure_ascii=False)))
        return
    if not episodes:
        errors.print(nothing_matched(store, run_id, evaluation=evaluation, step=step, label=label), highlight=False,
                     markup=False)
        return
    console.print(render(episodes, width=width), highlight=False, markup=False)


def _transcripts_against(run_a: str, run_b: str, *, store_url: str | None, **options: Any) -> None:
    from .present.transcript_pairs import show_pairs

    show_pairs(open_store(store_url), run_a, run_b, console=console, notes=errors, **options)


@cli.command()
@click.argument("plugin", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def settings(plugin: str | None, as_json: bool) -> None:
    """Every plugin setting: key, type or allowed values, default, description (read from the plugins' own
    pydantic models). PLUGIN: only that plugin's sections (or one section by name)."""
    from .present.listings import settings_listing
    from .present.plugin_listing import settings_rows

    host = make_plugin_manager()
    owners = host.settings_owners()
    chosen = {s: (p, m) for s, (p, m) in owners.items() if plugin is None or plugin in (p, s)}
    if plugin is not None and not chosen:
        known = ", ".join(sorted({p for p, _ in owners.values()} | set(owners)))
        raise SealError(f"no loaded plugin or settings section named {plugin!r}; known: {known}.")
    rows = [(p, *row) for s, (p, m) in sorted(chosen.items()) for row in settings_rows(m, f"settings.{s}")]
    if as_json:
        click.echo(
            json.dumps([dict(zip(("plugin", "key", "type", "default", "description"), r)) for r in rows], indent=2)
        )
        return
    console.print(settings_listing(console, rows, "plugin settings (recipe keys)"), soft_wrap=False)


@cli.command("upgrade-store")
@store_option
def upgrade_store(store_url: str | None) -> None:
    """Upgrade a run store written by an older seal-platform to this version's schema, in place (read
    commands never change a store)."""
    from .store import RunStore

    url = store_url or default_store_url()
    click.get_current_context().meta[STORE_URL_KEY] = url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise SealError(f"no run store at {url.removeprefix('sqlite:///')}.")
    before = RunStore(url, migrate=False)  # refuses a directory or a non-SQLite file; connects to nothing yet
    before.refuse_foreign()  # look before touching: reading the revision through the store switches it to WAL
    old = before.schema_revision()
    before.close()
    store = RunStore(url)
    new = store.schema_revision()
    console.print(f"{url}: schema {old} is this version's; nothing to upgrade" if old == new else
                  f"{url}: schema {old or 'none'} -> {new}", highlight=False)


@cli.command("eval")
@click.argument("run_id", metavar="RUN")
@click.option("--step", type=int, default=None,
              help="The checkpoint's step as `show` lists it: step N holds N + 1 steps of training, and is evaluated "
                   "as 'after N + 1 step(s)' (default: the last checkpoint).")
@click.option("--split", default=None, help="Task split (default: the run's evaluation split).")
@click.option("--max-tasks", type=click.IntRange(min=1), default=None, help="Evaluate on the first N tasks only.")
@click.option("--training-interface", is_flag=True,
              help="Evaluate on the training interface the run had at that checkpoint instead of the pristine one "
                   "(recorded as '<environment>@training'): the train/eval interface gap.")
@click.option("--quiet", is_flag=True, help="No live progress display.")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Show library logs (vLLM, transformers, torch) here, not only in <run dir>/run.log.",
)
@store_option
def eval_command(run_id: str, step: int | None, split: str | None, max_tasks: int | None, training_interface: bool,
                 quiet: bool, verbose: bool, store_url: str | None) -> None:
    """Evaluate a run's checkpoint on a split (pristine interface, greedy) and record the result.

    As for `run`, library logs go to <run dir>/run.log (-v shows them here too) and a progress display shows
    model load, checkpoint load and the evaluation's episodes.
    """
    from .loop import evaluate_checkpoint
    from .planning import plan_config
    from .present.digest import LOG_FILE
    from .present.listings import evaluation_table
    from .present.progress import RichProgress
    from .runlog import quiet_terminal

    store = open_store(store_url, write=True)
    row = store.get_run(run_id, whole=True)
    data = row.config
    if split:
        data = {**data, "evaluation": {**data["evaluation"], "split": split}}
    if max_tasks is not None:
        data = {**data, "evaluation": {**data["evaluation"], "max_tasks": max_tasks}}
    config_ = stored_config(data)
    plan = plan_config(config_, row.recipe or row.id)
    assert plan.host is not None
    log_path = Path(row.run_dir) / LOG_FILE
    if not verbose:
        console.print(f"library logs: {log_path} (-v shows them here)", highlight=False)
    progress = None if quiet else RichProgress(console)
    with quiet_terminal(log_path, verbose=verbose) as terminal:
        out = console
        if progress is not None and terminal is not out.file:
            from rich.console import Console

            progress.console = Console(file=terminal, width=out.width if not out.is_terminal else None)
        done, result = evaluate_checkpoint(store, plan.host, plan, row.id, step, progress=progress,
                                           training_interface=training_interface)
    console.print(evaluation_table(row.id, done, result))


# --- verify --------------------------------------------------------------------------------------------


@cli.command()
@click.option("--benchmark", required=True, help="A registered environment that can verify (e.g. bfcl).")
@click.argument("file", type=click.File("rb"))  # bytes: a non-UTF-8 line is one error record
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Settings of the benchmark's plugin, e.g. bfcl.categories=[multi_turn_base].",
)
def verify(benchmark: str, file: Any, overrides: tuple[str, ...]) -> None:
    """Score transcripts: one JSON object per input line, one result per output line, in order.

    A line that cannot be scored gets {"error": ...} in its place and the rest go on. Exit status: 0 when
    every line was scored; 1 when any line got {"error": ...} (every line is still written, and stderr says
    how many); 2 when the command cannot run (an unknown benchmark, a bad --set).
    """
    from .verify import verify_command

    verify_command(benchmark, file, overrides)


@cli.command()
@click.argument("environment", metavar="[ENV]", required=False)
def labels(environment: str | None) -> None:
    """List the failure labels of the registered diagnosers (those that label ENV when given), with the
    reference label(s) each finer label maps to."""
    from .labels import label_rows
    from .present.listings import labels_listing

    title = "labels" + (f" for environment {environment}" if environment else "")
    console.print(labels_listing(console, label_rows(make_plugin_manager(), environment), title), soft_wrap=False)


# --- check-env -----------------------------------------------------------------------------------------


@cli.command("check-env")
@click.argument("name")
@click.argument("args", metavar="[RECIPE] [KEY=VALUE ...]", nargs=-1)
@click.option("--engine", default=None, metavar="ENGINE",
              help="Run collect and evaluate with this registered engine (a scripted one needs no model); "
                   "without it no episode is run.")
@click.option("--tasks", "n_tasks", type=click.IntRange(1), default=2, show_default=True,
              help="Tasks per collect and evaluate call.")
def check_env(name: str, args: tuple[str, ...], engine: str | None, n_tasks: int) -> None:
    """Check that environment NAME keeps the core's contract, one line per check.

    It is built as a run builds it (with RECIPE and KEY=VALUE overrides when given): its object, its tasks
    per split, its pristine interface and, with --engine, collect and evaluate (counts, ids, rewards).
    Exit status 1 when a check failed (docs/write-an-environment-plugin.md, "Check your plugin").
    """
    from .conformance import check_environment, report_lines

    recipe, overrides = split_recipe_args(args)
    findings = check_environment(name, recipe=recipe, overrides=overrides, engine=engine, tasks=n_tasks)
    for line in report_lines(findings):
        click.echo(line)
    if any(f.failed for f in findings):
        raise click.exceptions.Exit(1)


def build_cli() -> click.Group:
    """The CLI with plugin commands added (``register_commands``, one plugin at a time: a plugin whose hook
    raises, or whose command takes a name the CLI has, adds nothing, is named in a warning and recorded as
    failed, and every other plugin's commands are added)."""
    try:
        host = make_plugin_manager()
    except Exception as exc:  # a broken plugin must not take the CLI down
        errors.print(_clean(f"warning: plugin commands unavailable: {exc}"), highlight=False, markup=False)
        return cli
    for record in host.register_commands(cli):
        errors.print(_clean(f"warning: plugin {record.name!r} ({record.distribution or record.value}) was not "
                            f"loaded and its commands are unavailable: {record.error}"), highlight=False, markup=False)
    return cli


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    # A built-in command needs no plugin commands: finding and loading every plugin for them would only
    # slow its start (``verify`` loads the plugins itself, once). Anything else (a plugin's command,
    # ``--help``, a misspelt command) gets the full CLI.
    group = cli if args and args[0] in cli.commands else build_cli()
    group.main(args=argv, prog_name="seal-platform")
