"""The plugin manager factory and what the core asks of the loaded plugins.

Plugins are found through the ``seal_platform`` entry-point group, ours and everybody else's alike, and
loaded one by one so that one broken package cannot take the others down: its failure is recorded (name,
distribution, version, error) and it is skipped, unless the recipe depends on it, in which case loading stops
with that message. A new manager is made for every run or command; there is no import-time global.

A name two plugins register (an environment, a diagnoser, an engine, ...) is not an error of every command:
it is left out of the registry, listed by :meth:`PluginHost.clashes`, and a recipe that uses it gets a
problem naming both plugins.

Environment variables (comma-separated entry-point names), applied on top of the recipe's ``plugins:``:

* ``SEAL_PLATFORM_PLUGINS`` - load only these plugins;
* ``SEAL_PLATFORM_BLOCK_PLUGINS`` - never load these plugins.
"""

from __future__ import annotations

import difflib
import os
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import click
import pluggy
from pydantic import BaseModel, ValidationError

from . import errors, hookspecs
from .errors import PluginError, SealError
from .recipe_keys import close_key
from .registry import ClusterSpec, DiagnoserSpec, EngineSpec, EnvironmentSpec, ExecutorSpec, MetricSpec

ENTRY_POINT_GROUP = "seal_platform"
ENV_ALLOW = "SEAL_PLATFORM_PLUGINS"
ENV_BLOCK = "SEAL_PLATFORM_BLOCK_PLUGINS"

# The registration hooks -> the class of the items each returns a list of (None: register_settings, which returns
# a mapping of settings section -> pydantic model class). A plugin returning anything else is failed at load.
REGISTER_HOOKS: dict[str, type | None] = {
    "register_settings": None,
    "register_environments": EnvironmentSpec,
    "register_diagnosers": DiagnoserSpec,
    "register_rollout_engines": EngineSpec,
    "register_executors": ExecutorSpec,
    "register_clusters": ClusterSpec,
    "register_metrics": MetricSpec,
}


@dataclass
class PluginRecord:
    """What happened to one plugin when the manager was built."""

    name: str
    distribution: str | None = None
    version: str | None = None
    status: str = "loaded"  # loaded | failed | blocked | not-allowed | duplicate
    error: str | None = None
    hooks: list[str] = field(default_factory=list)
    value: str = ""
    reason: str = ""  # why a blocked or not-allowed plugin was left out (who blocked or did not allow it)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "hooks": self.hooks,
        }


def _env_names(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


# What plugin code may raise that fails only the plugin (or the one call, the one record): any error, and
# SystemExit (a plugin calling sys.exit must not end the command without a word). KeyboardInterrupt (SIGTERM's
# Terminated too) is the user's, and goes on up.
PLUGIN_FAILURES: tuple[type[BaseException], ...] = (Exception, SystemExit)


def describe_exception(exc: BaseException, when: str = "") -> str:
    """``exc`` in a sentence's words: its type and message (``SystemExit(code)`` for a sys.exit), ``when``
    it was raised, and where (its last frame)."""
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
    what = f"SystemExit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
    return f"{what}{when}{where}"


class PluginExit(Exception):
    """A plugin's hook called ``sys.exit`` (raised SystemExit): that plugin's failure, as an error in the hook
    would be, rather than the end of the command or run (the SystemExit is its ``__cause__``)."""

    def __init__(self, exc: SystemExit):
        # "it called sys.exit(3) (at FILE:LINE)": describe_exception's "SystemExit(3) (at ...)" in a sentence's
        # words
        super().__init__("it called sys.exit" + describe_exception(exc).removeprefix("SystemExit"))
        self.__cause__ = exc


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to 120 characters, for messages about what a plugin returned
    (:func:`seal_platform.errors.short_repr`)."""
    return errors.short_repr(value, 120)


def _check_registered(hook: str, result: Any) -> tuple[list[Any], str | None]:
    """The items one plugin's ``hook`` (a :data:`REGISTER_HOOKS` hook) returned (for register_settings:
    (section, model) pairs), and what is wrong with them (None when nothing is)."""
    if result is None:
        return [], None
    kind = REGISTER_HOOKS[hook]
    if kind is None:
        expected = "a dict of settings section name -> pydantic model class (a BaseModel subclass)"
        if not isinstance(result, Mapping):
            return [], f"{hook} returned {short_repr(result)} (type {type(result).__name__}), not {expected}"
        for section, model in result.items():
            if not isinstance(section, str) or not section:
                return (
                    [],
                    f"{hook} returned {short_repr(result)}: the section name {section!r} is not a non-empty string",
                )
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                return (
                    [],
                    f"{hook} returned {short_repr(result)}: section {section!r} maps to {short_repr(model)}, not a "
                    "pydantic model class (a BaseModel subclass)",
                )
        return list(result.items()), None
    expected = f"a list of {kind.__name__}"
    if isinstance(result, (str, bytes, Mapping)) or not isinstance(result, Iterable):
        return [], f"{hook} returned {short_repr(result)} (type {type(result).__name__}), not {expected}"
    items = list(result)
    for item in items:
        if not isinstance(item, kind):
            return (
                [],
                f"{hook} returned {short_repr(items)}: {short_repr(item)} (type {type(item).__name__}) is not a "
                f"{kind.__name__}; expected {expected}",
            )
        name = getattr(item, "name", None)
        if not isinstance(name, str) or not name:
            return [], f"{hook} returned {short_repr(item)}, whose name is not a non-empty string"
    return items, None


def _call_registration(pm: pluggy.PluginManager, hook: str, plugin: object) -> Any:
    """What ``plugin``'s implementation of registration ``hook`` returns, called through pluggy (argument
    matching, tracing) with every other plugin left out, so each item keeps its owner."""
    others = [p for p in pm.get_plugins() if p is not plugin]
    results = pm.subset_hook_caller(hook, remove_plugins=others)()
    return results[0] if results else None


def _settings_model_problem(section: str, model: type[BaseModel]) -> str | None:
    """Why the settings model ``model`` (registered for ``section``) cannot serve a recipe that leaves its
    section out (None when it can): the core builds an absent section from the model's defaults, so a field
    without a default is the plugin's bug, not the recipe's."""
    try:
        model.model_validate({})
    except ValidationError as exc:
        missing = [".".join(map(str, error["loc"])) for error in exc.errors() if error["type"] == "missing"]
        why = (f"field(s) without a default: {', '.join(missing)}" if missing
               else f"its defaults do not validate: {exc.errors()[0]['msg']}")
    except PLUGIN_FAILURES as exc:  # the model's own validators are plugin code
        why = f"validating its defaults raised {describe_exception(exc)}"
    else:
        return None
    return (f"register_settings: the settings model {model.__module__}.{model.__qualname__} of section {section!r} "
            f"cannot be built for a recipe that leaves the section out ({why}); a plugin's settings model must "
            "give every field a default")


def _registrations(pm: pluggy.PluginManager, plugin: object) -> tuple[dict[str, list[Any]], str | None]:
    """What ``plugin``'s registration hooks return (hook -> items; for register_settings, (section, model)
    pairs), each called once, and why the plugin cannot be used (None when nothing is wrong): each hook that
    raised or returned the wrong types, and each settings model that cannot be built from its defaults."""
    problems = []
    answers: dict[str, list[Any]] = {}
    for hook in REGISTER_HOOKS:
        if not any(impl.plugin is plugin for impl in getattr(pm.hook, hook).get_hookimpls()):
            continue
        try:
            result = _call_registration(pm, hook, plugin)
        except PLUGIN_FAILURES as exc:
            problems.append(f"{hook} raised {describe_exception(exc)}")
            continue
        items, problem = _check_registered(hook, result)
        if problem is not None:
            problems.append(problem)
            continue
        answers[hook] = items
        if hook == "register_settings":
            problems.extend(p for section, model in items if (p := _settings_model_problem(section, model)))
    if not problems:
        return answers, None
    wrong_types = " (the hook specs: seal_platform/hookspecs.py)" if any(" returned " in p for p in problems) else ""
    return answers, "; ".join(problems) + wrong_types


class PluginHost:
    """A pluggy manager plus the load report and the questions the core asks of plugins."""

    def __init__(self, pm: pluggy.PluginManager, records: list[PluginRecord],
                 registrations: dict[str, list[tuple[str, Any]]] | None = None):
        self.pm = pm
        self.records = records
        # Registration hook -> (plugin name, item) of every loaded plugin, in load order: the answers
        # make_plugin_manager checked, each registration hook having been called once per plugin.
        self._registrations = registrations if registrations is not None else {}

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def loaded(self) -> list[PluginRecord]:
        return [r for r in self.records if r.status == "loaded"]

    def failed(self) -> list[PluginRecord]:
        """Plugins that were allowed but could not be loaded (import error, hooks that match no spec...)."""
        return [r for r in self.records if r.status in ("failed", "duplicate")]

    def failure_note(self) -> str:
        """One sentence naming every plugin that failed to load, with its error ("" if none did). Added to
        every message about something a recipe names but no loaded plugin provides: the failed plugin may be
        the one that would have provided it."""
        failed = [r for r in self.records if r.status == "failed"]
        if not failed:
            return ""
        listed = "; ".join(f"{r.name!r} ({r.distribution or 'no distribution'}): {r.error}" for r in failed)
        return f"plugin(s) that failed to load and may provide it: {listed}"

    def is_loaded(self, name: str) -> bool:
        return self.pm.get_plugin(name) is not None

    def call_per_plugin(self, hook: str, *, failed: Callable[[str, Exception], Any] | None = None,
                        only: Iterable[str] | None = None, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call ``hook`` on every plugin that implements it (``only``: of those, the named ones), one plugin at
        a time, in pluggy's order, each call through pluggy (argument matching, wrappers, tracing) with every
        other plugin left out: (plugin name, what it returned; None when it returned None). A plugin that
        raises is a :class:`PluginError` saying which plugin failed in which hook (the original exception
        chained); with ``failed``, its answer is ``failed(plugin name, exception)`` instead and the other
        plugins are still called. A plugin calling ``sys.exit`` fails the same way, as a :class:`PluginExit`
        (its SystemExit chained); a KeyboardInterrupt goes on up."""
        answers = []
        keep = None if only is None else set(only)
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            if keep is not None and impl.plugin_name not in keep:
                continue
            others = [p for p in self.pm.get_plugins() if p is not impl.plugin]
            try:
                results = self.pm.subset_hook_caller(hook, remove_plugins=others)(**kwargs)
            except PLUGIN_FAILURES as raised:
                exc = PluginExit(raised) if isinstance(raised, SystemExit) else raised
                assert isinstance(exc, Exception)  # PLUGIN_FAILURES: an Exception, or a SystemExit made one
                if failed is not None:
                    answers.append((impl.plugin_name, failed(impl.plugin_name, exc)))
                    continue
                if isinstance(exc, SealError):
                    raise
                raise PluginError(
                    f"plugin {impl.plugin_name!r} failed in {hook!r}: {type(exc).__name__}: {exc}"
                ) from exc
            # A hook that is not firstresult answers with a list of its implementations' results (here one, or
            # none when it returned None); a wrapper alone may answer with anything it likes instead.
            if isinstance(results, list):
                answers.append((impl.plugin_name, results[0] if results else None))
            else:
                answers.append((impl.plugin_name, results))
        return answers

    def call_each(self, hook: str, **kwargs: Any) -> list[Any]:
        """Call ``hook`` on every plugin that implements it, in pluggy's order, as ``pm.hook.<hook>(**kwargs)``
        does, but one plugin at a time (:meth:`call_per_plugin`: through pluggy, so an implementation written
        as a pluggy wrapper runs too) and naming the plugin when one raises: a :class:`PluginError` saying
        which plugin failed in which hook (the original exception chained). Results of implementations that
        return None are left out, as pluggy does."""
        return [result for _, result in self.call_per_plugin(hook, **kwargs) if result is not None]

    def implements(self, name: str, hook: str) -> bool:
        plugin = self.pm.get_plugin(name)
        return plugin is not None and any(
            impl.plugin is plugin for impl in getattr(self.pm.hook, hook).get_hookimpls()
        )

    def takes(self, name: str, hook: str, argument: str) -> bool:
        """Whether plugin ``name``'s implementation of ``hook`` takes ``argument`` (pluggy passes only the
        arguments an implementation names)."""
        plugin = self.pm.get_plugin(name)
        return any(impl.plugin is plugin and argument in impl.argnames
                   for impl in getattr(self.pm.hook, hook).get_hookimpls())

    @staticmethod
    def _unavailable(record: PluginRecord) -> str:
        """Why the plugin of ``record`` (not loaded) is unavailable, as a predicate: "plugin 'x' <this>" and
        "plugin 'x', which <this>" both read as sentences."""
        if record.status == "failed":
            return f"failed to load: {record.error}"
        if record.status == "blocked":
            return f"is blocked by {record.reason or f'plugins.block or {ENV_BLOCK}'}"
        if record.status == "not-allowed":
            return f"is not allowed{f' by {record.reason}' if record.reason else ''}"
        if record.status == "duplicate":
            return f"was skipped as a duplicate: {record.error}"
        return f"is {record.status}{f': {record.error}' if record.error else ''}"

    def why_missing(self, name: str) -> str:
        """Why plugin ``name`` is not loaded, as a phrase for an error message: ``plugin 'x' is blocked by ...``,
        ``... failed: ...``, ``... is not installed (did you mean 'y'? loaded plugins: ...)``."""
        for record in self.records:
            if record.name == name and record.status != "loaded":
                return f"plugin {name!r} {self._unavailable(record)}"
        loaded = sorted(r.name for r in self.loaded())
        meant = close_key(name, loaded)
        guess = f"did you mean {meant!r}? " if meant else ""
        return f"plugin {name!r} is not installed ({guess}loaded plugins: {', '.join(loaded) or 'none'})"

    def call_owned(self, hook: str, owner: str, **kwargs: Any) -> Any:
        """Call ``hook`` on plugin ``owner`` only; an absent or non-implementing owner is an error."""
        plugin = self.pm.get_plugin(owner)
        if plugin is None:
            raise PluginError(f"the recipe names {owner!r} for the {hook!r} stage, but {self.why_missing(owner)}.")
        if not self.implements(owner, hook):
            raise PluginError(
                f"the recipe names plugin {owner!r} for the {hook!r} stage, but it does not implement {hook!r}."
            )
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        return self.pm.subset_hook_caller(hook, remove_plugins=others)(**kwargs)

    def call_subset(self, hook: str, names: Iterable[str], **kwargs: Any) -> list[Any]:
        """Call ``hook`` on the named plugins only; results of all of them, in pluggy's order."""
        keep = {self.pm.get_plugin(n) for n in names} - {None}
        others = [p for p in self.pm.get_plugins() if p not in keep]
        return self.pm.subset_hook_caller(hook, remove_plugins=others)(**kwargs)

    # --- plugin commands ---------------------------------------------------------------------------

    def register_commands(self, group: click.Group) -> list[PluginRecord]:
        """Let every loaded plugin add its commands to ``group`` (``register_commands``), one plugin at a
        time, in pluggy's order. Each plugin adds to a group of its own first; its commands join ``group``
        only when its hook returned and none of them takes a name ``group`` already has from the core or
        another plugin. A plugin whose hook raises or clashes adds nothing and is failed (recorded with the
        reason and left out of this host, as a plugin whose other registration hooks fail is); the others'
        commands are all added. Returns the records of the plugins failed here. Called again on the same
        group (a second ``build_cli`` in one process), a plugin replaces the commands it added before."""
        owners: dict[str, str] = group.__dict__.setdefault("_seal_platform_command_owners", {})
        failed = []
        for impl in reversed(self.pm.hook.register_commands.get_hookimpls()):
            own = click.Group(group.name)
            others = [p for p in self.pm.get_plugins() if p is not impl.plugin]
            problem: str | None
            try:
                self.pm.subset_hook_caller("register_commands", remove_plugins=others)(cli=own)
            except PLUGIN_FAILURES as exc:
                problem = f"register_commands raised {describe_exception(exc)}"
            else:
                taken = [f"{name!r} (" + (f"plugin {owners[name]!r}'s" if name in owners else "a core command") + ")"
                         for name in own.commands if name in group.commands and owners.get(name) != impl.plugin_name]
                problem = f"register_commands adds command(s) named like existing ones: {', '.join(taken)}" if taken \
                    else None
            record = next((r for r in self.records if r.name == impl.plugin_name and r.status == "loaded"), None)
            if problem is None:
                for name, command in own.commands.items():
                    group.add_command(command, name)
                    owners[name] = impl.plugin_name
            elif record is not None:
                self.pm.unregister(impl.plugin)
                record.status, record.error, record.hooks = "failed", problem, []
                failed.append(record)
        return failed

    # --- what plugins register ---------------------------------------------------------------------

    # The registries, by the name of the method that lists one -> (its registration hook, how messages name it,
    # how `seal-platform plugins` names it: kind:name).
    REGISTRIES = {
        "settings": ("register_settings", "settings section", "settings"),
        "environments": ("register_environments", "environment", "environment"),
        "engines": ("register_rollout_engines", "rollout engine", "engine"),
        "diagnosers": ("register_diagnosers", "diagnoser", "diagnoser"),
        "executors": ("register_executors", "executor", "executor"),
        "clusters": ("register_clusters", "cluster", "cluster"),
    }

    def _registered(self, hook: str) -> list[tuple[str, Any]]:
        """(plugin name, item) for every item every loaded plugin returned from a ``register_*`` hook: the
        answers make_plugin_manager read and checked (each registration hook is called once per plugin)."""
        return [(plugin, item) for plugin, item in self._registrations.get(hook, []) if self.is_loaded(plugin)]

    @staticmethod
    def _name(item: Any) -> str:
        return str(item[0] if isinstance(item, tuple) else item.name)

    def _by_name(self, registry: str) -> dict[str, list[tuple[str, Any]]]:
        """Name -> every (plugin, item) registering it, in ``registry`` (a key of :attr:`REGISTRIES`)."""
        found: dict[str, list[tuple[str, Any]]] = {}
        for plugin, item in self._registered(self.REGISTRIES[registry][0]):
            found.setdefault(self._name(item), []).append((plugin, item))
        return found

    def _unique(self, registry: str) -> dict[str, tuple[str, Any]]:
        """Name -> (plugin, item) of every name in ``registry`` that one plugin alone registers. A name two
        plugins register is left out (:meth:`clashes` has it): it is a problem only for a recipe that uses it
        (:meth:`missing`), not for every command."""
        return {name: owners[0] for name, owners in self._by_name(registry).items() if len(owners) == 1}

    def clashes(self, registry: str) -> dict[str, list[tuple[str, Any]]]:
        """Name -> every (plugin, item) registering it, for the names of ``registry`` (a key of
        :attr:`REGISTRIES`) that more than one plugin registers."""
        return {name: owners for name, owners in self._by_name(registry).items() if len(owners) > 1}

    def clash_problem(self, registry: str, name: str) -> tuple[str, str] | None:
        """What is wrong when ``name`` of ``registry`` is registered by several plugins (naming each, with its
        distribution) and the hint; None when it is not."""
        owners = self.clashes(registry).get(name)
        if owners is None:
            return None
        dists = {r.name: r.distribution for r in self.records if r.status == "loaded"}
        named = [f"{p!r}" + (f" ({dists[p]})" if dists.get(p) else "") for p, _ in owners]
        label = self.REGISTRIES[registry][1]
        return (f"{label} {name!r} is registered by more than one plugin: {' and '.join(named)}",
                f"block all but one of them (recipe plugins.block or {ENV_BLOCK}) or uninstall one")

    def provided(self) -> dict[str, list[str]]:
        """Plugin name -> what it registers, as ``kind:name`` (environment, engine, diagnoser, executor), a
        name it shares with another plugin included."""
        out: dict[str, list[str]] = {}
        for registry in ("environments", "engines", "diagnosers", "executors"):
            hook, _, kind = self.REGISTRIES[registry]
            for plugin, item in self._registered(hook):
                out.setdefault(plugin, []).append(f"{kind}:{self._name(item)}")
        return out

    def clash_notes(self) -> dict[str, list[str]]:
        """Plugin name -> each registered name it shares with other plugins, as ``kind:name (also registered
        by 'other')``; such a name is unusable until all but one of them are blocked."""
        out: dict[str, list[str]] = {}
        for registry, (_, _, kind) in self.REGISTRIES.items():
            for name, owners in self.clashes(registry).items():
                plugins = [p for p, _ in owners]
                for plugin in plugins:
                    others = ", ".join(repr(o) for o in plugins if o != plugin)
                    out.setdefault(plugin, []).append(f"{kind}:{name} (also registered by {others})")
        return out

    def settings_owners(self) -> dict[str, tuple[str, type[BaseModel]]]:
        """Settings section -> (the plugin that registered it, its pydantic model)."""
        return {name: (plugin, spec[1]) for name, (plugin, spec) in self._unique("settings").items()}

    def settings_models(self) -> dict[str, type[BaseModel]]:
        return {name: spec[1] for name, (_, spec) in self._unique("settings").items()}

    def environments(self) -> dict[str, tuple[str, EnvironmentSpec]]:
        return self._unique("environments")

    def engines(self) -> dict[str, tuple[str, EngineSpec]]:
        return self._unique("engines")

    def diagnosers(self) -> dict[str, tuple[str, DiagnoserSpec]]:
        return self._unique("diagnosers")

    def executors(self) -> dict[str, tuple[str, ExecutorSpec]]:
        return self._unique("executors")

    def clusters(self) -> dict[str, tuple[str, ClusterSpec]]:
        return self._unique("clusters")

    def metric_specs(self) -> list[MetricSpec]:
        """Every loaded plugin's metric declarations (``register_metrics``, read and checked at load), one
        plugin after another in the order pluggy calls them, each plugin's in the order it returned them. Not
        a registry: a name declared twice is no clash (:class:`~seal_platform.present.metrics.MetricCatalog`
        keeps its first declaration)."""
        by_plugin: dict[str, list[MetricSpec]] = {}
        for plugin, spec in self._registered("register_metrics"):
            by_plugin.setdefault(plugin, []).append(spec)
        return [spec for impl in reversed(self.pm.hook.register_metrics.get_hookimpls())
                for spec in by_plugin.get(impl.plugin_name, [])]

    # --- "no loaded plugin registers X": said once -------------------------------------------------------

    # kind -> (the registry it is looked up in, how a message names it, how the hint names the registry)
    KINDS = {
        "environment": ("environments", "environment", "environments"),
        "benchmark": ("environments", "benchmark", "environments"),  # verify's word for an environment
        "engine": ("engines", "rollout engine", "engines"),
        "diagnoser": ("diagnosers", "diagnoser", "diagnosers"),
        "executor": ("executors", "executor", "executors"),
    }

    def missing(self, kind: str, name: str, *, builtin: tuple[str, ...] = ()) -> tuple[str, str] | None:
        """None when one loaded plugin registers ``name`` as a ``kind`` (see :attr:`KINDS`); else what is wrong
        and the hint. Several plugins registering it: each named (:meth:`clash_problem`). None: ``no loaded
        plugin registers <kind> '<name>'``, with the registered name it most likely misspells, what is
        registered (with ``builtin`` names the core provides itself), and the plugins that failed to load,
        which may provide it. Every message about a named thing no plugin provides is made here (a recipe
        problem from it, or :meth:`require`'s error)."""
        registry, label, plural = self.KINDS[kind]
        if name in builtin:
            return None
        clash = self.clash_problem(registry, name)
        if clash is not None:
            return clash
        registered = getattr(self, registry)()
        if name in registered:
            return None
        names = [*builtin, *sorted(registered)]
        meant = close_key(name, names)
        guess = f"did you mean {meant!r}? " if meant else ""
        note = self.failure_note()
        hint = (
            f"{guess}registered {plural}: {', '.join(names) or 'none'}; install or unblock the plugin that provides it"
        )
        return f"no loaded plugin registers {label} {name!r}", f"{hint}; {note}" if note else hint

    def require(self, kind: str, name: str) -> tuple[str, Any]:
        """(owning plugin, spec) of the ``kind`` named ``name``; a :class:`SealError` saying what is
        registered instead (:meth:`missing`) when no loaded plugin registers it."""
        problem = self.missing(kind, name)
        if problem is not None:
            raise SealError(f"{problem[0]} ({problem[1]}).")
        return getattr(self, self.KINDS[kind][0])()[name]


def _spec_names(pm: pluggy.PluginManager) -> list[str]:
    return sorted(name for name, caller in vars(pm.hook).items() if not name.startswith("_") and caller.has_spec())


def _unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The plugin's hook implementations whose names match no hook spec (``check_pending``, for one plugin)."""
    problems = []
    for caller in pm.get_hookcallers(plugin) or []:
        if caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin and not impl.optionalhook:
                close = difflib.get_close_matches(caller.name, _spec_names(pm), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(f"hook implementation {caller.name!r} matches no hook spec{hint}")
    return problems


def _register(pm: pluggy.PluginManager, plugin: object, record: PluginRecord) -> None:
    """Register one plugin; if any of its hook implementations matches no spec (by name or arguments) it is
    left out and recorded as failed with the reason, so a misspelt hook cannot be silently ignored."""
    try:
        pm.register(plugin, name=record.name)
    except pluggy.PluginValidationError as exc:
        record.status = "failed"
        record.error = "a hook implementation does not match its spec: " + " ".join(str(exc).split()) + \
            " (the hook specs: seal_platform/hookspecs.py)"
        return
    except PLUGIN_FAILURES as exc:  # reading its attributes ran its code (a property, a module __getattr__)
        record.status = "failed"
        record.error = describe_exception(exc)
        return
    problems = _unknown_hooks(pm, plugin)
    if problems:
        pm.unregister(plugin)
        record.status = "failed"
        record.error = "; ".join(problems) + " (the hook specs: seal_platform/hookspecs.py; mark an intentional " \
            "extra with @hookimpl(optionalhook=True))"


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def make_plugin_manager(
    *,
    allow: Iterable[str] | None = None,
    block: Iterable[str] = (),
    required: Iterable[str] = (),
    entry_points: Iterable[metadata.EntryPoint] | None = None,
    extra: Iterable[tuple[str, ModuleType | object]] = (),
) -> PluginHost:
    """Build a plugin manager with the hook specs and every allowed, loadable plugin registered.

    A plugin is failed (recorded with the reason, and left out) when it cannot be imported (its import
    raising anything but KeyboardInterrupt: ``sys.exit`` at import too, recorded as such), when a hook
    implementation matches no spec, when one of its registration hooks (:data:`REGISTER_HOOKS`) raises or
    returns the wrong types, or when a settings model it registers has a field without a default (a recipe
    may leave any plugin's section out, and the core then builds it from the defaults: a required field would
    make every recipe invalid, so it is the plugin's bug, reported as such). Each registration hook is called
    here, once per plugin; the host's registries (:meth:`PluginHost.environments`, ...) answer from that.
    ``register_commands`` is not called here: :meth:`PluginHost.register_commands` calls it (the CLI).

    :param allow: load only these entry-point names (None: all); intersected with ``$SEAL_PLATFORM_PLUGINS``.
    :param block: never load these; ``$SEAL_PLATFORM_BLOCK_PLUGINS`` adds to them.
    :param required: names the caller depends on; if one of them is blocked, not allowed or broken,
        :class:`PluginError` is raised naming it and why.
    :param entry_points: use these instead of the installed ``seal_platform`` group (tests).
    :param extra: (name, plugin object) pairs registered directly, after the entry points.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    recipe_allow = set(allow) if allow is not None else None
    env_allow = _env_names(ENV_ALLOW)
    allowed = recipe_allow
    if env_allow is not None:
        allowed = env_allow if allowed is None else allowed & env_allow
    recipe_block, env_block = set(block), _env_names(ENV_BLOCK) or set()
    blocked = recipe_block | env_block
    required = set(required)
    extra = list(extra)

    records: list[PluginRecord] = []
    eps = list(entry_points) if entry_points is not None else _entry_points()
    known = {ep.name for ep in eps} | {name for name, _ in extra}

    def not_listed(source: str, names: set[str]) -> str:
        """Why a plugin left out by the allow list ``source`` (which holds ``names``) is not allowed; an
        allowed name that no plugin has is named with the installed plugins (a typo, most likely)."""
        said = f"{source} (it lists only {', '.join(sorted(names)) or 'nothing'}"
        strays = sorted(names - known)
        if strays:
            said += f"; no installed plugin is called {', '.join(map(repr, strays))}; " \
                    f"installed plugins: {', '.join(sorted(known)) or 'none'}"
        return said + ")"
    described: dict[int, tuple[str | None, str | None]] = {}  # per distribution: its metadata file is parsed once
    for ep in eps:
        dist = getattr(ep, "dist", None)
        if dist is not None and id(dist) not in described:
            meta = dist.metadata
            described[id(dist)] = (meta["Name"], meta["Version"])
        name_version = described[id(dist)] if dist is not None else (None, None)
        record = PluginRecord(name=ep.name, distribution=name_version[0], version=name_version[1], value=ep.value)
        records.append(record)
        if ep.name in blocked:
            record.status = "blocked"
            record.reason = " and ".join(
                source
                for source, names in (("plugins.block", recipe_block), (ENV_BLOCK, env_block))
                if ep.name in names
            )
        elif allowed is not None and ep.name not in allowed:
            record.status = "not-allowed"
            if env_allow is not None and ep.name not in env_allow:
                record.reason = not_listed(ENV_ALLOW, env_allow)
            elif recipe_allow is not None:
                record.reason = not_listed("plugins.allow", recipe_allow)
        elif pm.get_plugin(ep.name) is not None:
            record.status = "duplicate"
            record.error = f"another plugin named {ep.name!r} is already loaded; this one ({ep.value}) was skipped"
        else:
            try:
                plugin = ep.load()
            except PLUGIN_FAILURES as exc:  # a broken third-party plugin must not take the others down
                record.status = "failed"
                # sys.exit at import: named as such (its message alone reads as the command's own)
                record.error = (f"raised {describe_exception(exc, ' at import')}" if isinstance(exc, SystemExit)
                                else describe_exception(exc))
            else:
                _register(pm, plugin, record)
    for name, plugin in extra:
        record = PluginRecord(name=name, value=repr(plugin))
        records.append(record)
        _register(pm, plugin, record)
    pm.check_pending()  # every implementation left matches a spec (the per-plugin check above made sure)

    # A registration hook that raises or returns the wrong types (or a settings model that cannot be built
    # from its defaults) fails its plugin, as an import error does: recorded and left out, so it breaks
    # neither the listing nor a command that does not need it. Each registration hook is called here, once
    # per plugin; the host answers from what was read here.
    registrations: dict[str, list[tuple[str, Any]]] = {hook: [] for hook in REGISTER_HOOKS}
    for record in records:
        plugin = pm.get_plugin(record.name)
        if plugin is not None and record.status == "loaded":
            answers, problem = _registrations(pm, plugin)
            if problem is not None:
                pm.unregister(plugin)
                record.status = "failed"
                record.error = problem
                continue
            for hook, items in answers.items():
                registrations[hook].extend((record.name, item) for item in items)

    for record in records:
        plugin = pm.get_plugin(record.name)
        if plugin is not None and record.status == "loaded":
            record.hooks = sorted(
                caller.name for caller in pm.get_hookcallers(plugin) or [] if not caller.name.startswith("_")
            )

    host = PluginHost(pm, records, registrations)
    # Names that are not entry points at all (an environment registered under another name, say) are
    # checked later against what the loaded plugins register.
    for record in records:
        if record.name in required and record.status != "loaded" and not host.is_loaded(record.name):
            raise PluginError(f"the recipe depends on plugin {record.name!r}, which {host._unavailable(record)}.")
    return host

