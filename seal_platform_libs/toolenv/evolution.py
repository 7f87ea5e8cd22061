"""Closed-loop evolution of a tool environment's *training* interface from the capability state.

Written for BFCL (its label taxonomy drives the changes) and used by every environment that renders its tools
with :mod:`seal_platform_libs.toolenv.interface` (the ``bfcl`` and ``smarthome`` plugins). Evaluation never sees any
of this: it always runs on revision 0, whose spec is ``{}`` and which every function in
:mod:`seal_platform_libs.toolenv.interface` renders as the untouched official presentation.

The changes
-----------
An interface spec activates named *changes*, per scope (a category name, or ``"*"`` for every category):

==================  =========================================================================================
change              what the agent sees differently (rendered by ``toolenv.interface``)
==================  =========================================================================================
required_markers    ``[required]`` in front of the description of every required parameter
enum_values         ``Allowed values: a, b, c.`` after the description of parameters with a closed value set
                    (from the ``enum`` field or from the "[Enum]: ..." / "Options are: ..." descriptions)
type_hints          ``Type: integer.`` after every parameter description (off unless enabled in settings)
hide_optional       optional parameters removed from the docs (off unless enabled in settings)
no_invent_note      a system note: call only the listed tools, never invent one
recovery            after a parse error or a tool error (``{"error": ...}`` results and
                    ``Error during execution: ...`` strings) a hint naming the problem is appended
guidelines          a short system block, one line per high-pressure label (at most ``max_guidelines``)
==================  =========================================================================================

What drives them (failure type -> cue type)
-------------------------------------------
For each scope the *pressure* of a label is ``prevalence x (1 - mean reward)``, where prevalence is the
label's share of the scope's labelled turns (``excluded_labels`` left out: by default ``gt_error`` and
``checker_error``, not the agent's doing, and ``unreached_turn``, as A-Patch does) and mean reward is the mean reward of
the trajectories that contain the label. A label is *eligible* in a scope when it has at least ``min_count`` occurrences
and a prevalence of at least ``min_prevalence`` there. A change is switched on when one of its trigger labels is
eligible with pressure of at least ``activate_pressure``. Each failure type drives ONE cue type (:data:`CUE_TYPE`), as
the paper maps failure types to cues:

========================== ================ =====================================================
failure type               cue type         changes
========================== ================ =====================================================
argument_mismatch          constraint info  required_markers, enum_values (type_hints, hide_optional if allowed)
instance_mismatch          constraint info  required_markers, type_hints
state_mismatch             constraint info  enum_values
invalid_tool_call          tool list        no_invent_note
recovery_failure           recovery         recovery
missing_tool_call,         guideline        a guideline line (``max_guidelines`` of highest pressure; ties by
empty_turn_model_response,                  label name); ``pass``, ``correct_abstention`` and the excluded
spurious_tool_call,                         labels have none. A label not in the table (a third-party
response_mismatch,                          diagnoser's) is a guideline target when a text exists for it
unreached_turn                              (``guideline_texts``)
========================== ================ =====================================================

Both the reference taxonomy (instance/state mismatch, spurious call, empty turn) and the finer one
(invalid tool call, argument mismatch, recovery failure) drive changes, so a diagnoser that only emits the
reference labels still closes the loop.

The failure profile (``table``): ``round`` (default, the paper's Eq. 14) reads the current step's labels only;
``window`` the current epoch's; ``totals`` the run's. A scope is only re-decided when the table holds at least
``min_evidence`` labelled turns for it, so a thin round changes nothing. A change is switched off again when
the pressure of all its trigger labels has fallen below ``release_pressure`` (default 0.02, below
``activate_pressure``'s 0.05: a band in which nothing flips back and forth); null keeps every change once on.
Guidelines are re-chosen each time a scope is re-decided. Everything is a pure function of (current spec,
state, settings, cue texts): the same inputs give the same revision, and specs list their entries in sorted
order.

Cue texts belong to the environment: :class:`CueTexts` holds guideline lines by label and recovery hints by
kind; an environment plugin passes its own to :func:`evolve` (guidelines) and to
:func:`seal_platform_libs.toolenv.interface.recovery_hint` (hints). :data:`BFCL_CUES` are BFCL's.

Modes
-----
``reference`` (default: the paper's active configuration, the public release's behaviour): static schema
affordances (required markers, enum values, the no-invent note) on for every category (or those the
``categories`` switch names) from the first call, whatever the state, and never anything else.
``closed_loop`` (this platform's extension, the ``*-closed-loop`` recipes): the above. The core
calls ``evolve_interface`` once with the empty state before step 0's rollouts, so the static affordances are in
place from the very first training rollout (the paper: "on from step 0").
``off`` (vanilla GRPO): never a new revision.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from seal_platform.capability import CapabilityState, CapabilityTables
from seal_platform.config import Section
from seal_platform.labels import EXCLUDED_LABELS, UNREACHED_LABEL
from seal_platform.types import Interface

from .interface import ALL_SCOPES, Guideline, InterfaceSpec, ScopeSpec, describe_system

CHANGES = (
    "required_markers",
    "enum_values",
    "type_hints",
    "hide_optional",
    "no_invent_note",
    "recovery",
)
REFERENCE_CHANGES = ("required_markers", "enum_values", "no_invent_note")

# Which cue type each failure type drives (module docstring, "What drives them").
CUE_TYPE: dict[str, str] = {
    "argument_mismatch": "constraint_info",
    "instance_mismatch": "constraint_info",
    "state_mismatch": "constraint_info",
    "invalid_tool_call": "tool_list",
    "recovery_failure": "recovery",
    "missing_tool_call": "guideline",
    "empty_turn_model_response": "guideline",
    "spurious_tool_call": "guideline",
    "response_mismatch": "guideline",
    UNREACHED_LABEL: "guideline",
}

TRIGGERS: dict[str, tuple[str, ...]] = {
    "required_markers": ("argument_mismatch", "instance_mismatch"),
    "enum_values": ("argument_mismatch", "state_mismatch"),
    "type_hints": ("argument_mismatch", "instance_mismatch"),
    "hide_optional": ("argument_mismatch",),
    "no_invent_note": ("invalid_tool_call",),
    "recovery": ("recovery_failure",),
}

# Left out of every prevalence denominator by default (``excluded_labels``), as A-Patch does: the core's
# :data:`seal_platform.labels.EXCLUDED_LABELS` (imported above), verifier trouble and turns never reached.

# BFCL's guideline lines (the default cue texts; other environments pass their own CueTexts).
GUIDELINES: dict[str, str] = {
    "spurious_tool_call": "When a request needs no tool (it only asks for information you already have, or "
    "cannot be served by the listed tools), answer in text without calling any tool.",
    "empty_turn_model_response": "When the user asks for an action that a listed tool performs, call that "
    "tool; do not just describe what you would do.",
    "instance_mismatch": "Call tools only with the parameters they declare and values of the declared types; "
    "a call that raises an error changes nothing.",
    "state_mismatch": "Do exactly what the user asked, with the exact names and values from the request: "
    "no extra actions, no skipped steps.",
    "response_mismatch": "Make the calls that retrieve the information the user asked for, and base your "
    "answer on their results.",
    "invalid_tool_call": "Call only tools from the current list, using the exact tool-call format; if a "
    "needed tool is missing, say so instead of inventing one.",
    "argument_mismatch": "Fill every required parameter, use values exactly as given by the user or by "
    "earlier results, and pick enum values from the allowed list.",
    "missing_tool_call": "Complete every step of the request: make each needed call before you answer.",
    "recovery_failure": "When a call returns an error, read it, fix the cause (argument, path, login) and "
    "retry instead of giving up or repeating the same call.",
    UNREACHED_LABEL: "Finish each user request in few steps and then answer, so the conversation can go on.",
}


class CueTexts(Section):
    """An environment's cue texts: guideline lines by label (:func:`evolve`) and recovery hints by the kind
    :func:`seal_platform_libs.toolenv.interface.classify_observation` names (``{detail}`` is the error's text)."""

    model_config = ConfigDict(frozen=True)

    guidelines: dict[str, str] = Field(default_factory=dict)
    hints: dict[str, str] = Field(default_factory=dict)


def _bfcl_cues() -> CueTexts:
    from .interface import DEFAULT_HINTS

    return CueTexts(guidelines=dict(GUIDELINES), hints=dict(DEFAULT_HINTS))


class EvolutionSettings(Section):
    """How the training interface evolves (the ``evolution`` key of the environment's recipe section, e.g.
    ``settings.bfcl.evolution``)."""

    mode: Literal["closed_loop", "reference", "off"] = Field(
        default="reference",
        description="reference: static schema affordances always on in training (the paper's active "
        "configuration, the public release); closed_loop: the capability state decides the changes per "
        "failure type (this platform's extension); off: the pristine interface throughout (vanilla GRPO).",
    )
    # Families and the optional schema changes.
    schema_affordances: bool = Field(default=True, description="Allow required markers, enum values, no-invent note.")
    type_hints: bool = Field(default=False, description="Allow 'Type: ...' hints on parameters.")
    hide_optional: bool = Field(default=False, description="Allow hiding optional parameters.")
    recovery_feedback: bool = Field(default=True, description="Allow hints after parse and tool errors.")
    guidelines: bool = Field(default=True, description="Allow the capability-guideline system block.")
    # Where decisions are taken.
    per_category: bool = Field(
        default=True, description="Decide per task category; false: pool all categories into one decision."
    )
    categories: list[str] | None = Field(
        default=None, description="Categories whose interface may evolve; null: all of them."
    )
    table: Literal["round", "window", "totals"] = Field(
        default="round", description="The failure profile read: the current step's labels (round, the "
        "paper's Eq. 14), the current epoch's (window) or the run's (totals)."
    )
    # Thresholds (reference: 8 occurrences, prevalence 0.10, 3 guideline lines).
    min_count: int = Field(default=8, ge=1, le=1_000_000, description="Occurrences before a label can drive a change.")
    min_prevalence: float = Field(default=0.10, ge=0.0, le=1.0, description="Share of labelled turns needed.")
    activate_pressure: float = Field(
        default=0.05, ge=0.0, le=1.0, description="prevalence x (1 - mean reward) that switches a change on."
    )
    release_pressure: float | None = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        description="Switch a change off again when all its trigger labels fall below this pressure; null: never.",
    )
    excluded_labels: list[str] = Field(
        default_factory=lambda: list(EXCLUDED_LABELS),
        description="Labels that neither count towards prevalence nor drive changes.",
    )
    min_evidence: int = Field(
        default=16, ge=1, le=1_000_000, description="Labelled turns a scope needs in the table before it is re-decided."
    )
    max_guidelines: int = Field(default=3, ge=0, le=100, description="Most guideline lines per scope.")
    guideline_texts: dict[str, str] = Field(
        default_factory=dict, description="Extra or replacement guideline lines, by label."
    )

    def allowed(self, change: str) -> bool:
        """Whether the settings let ``change`` be switched on at all."""
        if change in ("required_markers", "enum_values", "no_invent_note"):
            return self.schema_affordances
        if change == "type_hints":
            return self.schema_affordances and self.type_hints
        if change == "hide_optional":
            return self.schema_affordances and self.hide_optional
        if change == "recovery":
            return self.recovery_feedback
        raise ValueError(f"unknown interface change {change!r}; known: {', '.join(CHANGES)}")

    def guideline_text(self, label: str, cues: CueTexts | None = None) -> str | None:
        """The recipe's line for ``label``, else the environment's (``cues``; BFCL's when None)."""
        own = (cues if cues is not None else _bfcl_cues()).guidelines
        return self.guideline_texts.get(label) or own.get(label)


class LabelPressure(BaseModel):
    """A label's standing in one scope."""

    label: str
    count: int
    prevalence: float
    mean_reward: float

    @property
    def pressure(self) -> float:
        return self.prevalence * (1.0 - self.mean_reward)

    def describe(self) -> str:
        return (
            f"{self.label} n={self.count} prevalence={self.prevalence:.2f} "
            f"mean_reward={self.mean_reward:.2f} pressure={self.pressure:.2f}"
        )


def label_pressures(
    tables: CapabilityTables, category: str | None, excluded: tuple[str, ...] | list[str] = EXCLUDED_LABELS
) -> dict[str, LabelPressure]:
    """Pressure of every label seen in ``tables`` for ``category`` (None: all categories pooled)."""
    table = tables.by_label if category is None else tables.by_category_label.get(category, {})
    out: dict[str, LabelPressure] = {}
    for label in sorted(table):
        if label in excluded:
            continue
        out[label] = LabelPressure(
            label=label,
            count=tables.count(label, category),
            prevalence=tables.prevalence(label, category, exclude=excluded),
            mean_reward=tables.mean_reward(label, category),
        )
    return out


def evidence(
    tables: CapabilityTables, category: str | None, excluded: tuple[str, ...] | list[str] = EXCLUDED_LABELS
) -> int:
    """Labelled turns (excluded labels left out) in ``tables`` for ``category``."""
    table = tables.by_label if category is None else tables.by_category_label.get(category, {})
    return sum(t.count for name, t in table.items() if name not in excluded)


def _eligible(p: LabelPressure, settings: EvolutionSettings) -> bool:
    return p.count >= settings.min_count and p.prevalence >= settings.min_prevalence


def decide_scope(
    current: ScopeSpec, pressures: dict[str, LabelPressure], settings: EvolutionSettings,
    cues: CueTexts | None = None,
) -> tuple[ScopeSpec, list[str], set[str]]:
    """The next spec of one scope: (scope spec, change descriptions, driving labels)."""
    cues = cues if cues is not None else _bfcl_cues()
    active = set(current.changes)
    notes: list[str] = []
    driven: set[str] = set()
    for change in CHANGES:
        if not settings.allowed(change):
            if change in active:
                active.discard(change)
                notes.append(f"-{change} (disabled in settings)")
            continue
        triggers = [pressures[z] for z in TRIGGERS[change] if z in pressures]
        firing = [p for p in triggers if _eligible(p, settings) and p.pressure >= settings.activate_pressure]
        if change not in active and firing:
            active.add(change)
            driven.update(p.label for p in firing)
            notes.append(f"+{change} (" + "; ".join(p.describe() for p in firing) + ")")
        elif (
            change in active
            and settings.release_pressure is not None
            and all(p.pressure < settings.release_pressure for p in triggers)
        ):
            active.discard(change)
            driven.update(p.label for p in triggers)
            notes.append(f"-{change} (trigger pressure below {settings.release_pressure:.2f})")

    old_lines = [(g.label, g.text) for g in current.guidelines]
    new_lines: list[tuple[str, str]] = []
    if settings.guidelines and settings.max_guidelines > 0:
        ranked = sorted(
            (
                p
                for p in pressures.values()
                if _eligible(p, settings)
                and CUE_TYPE.get(p.label, "guideline") == "guideline"
                and settings.guideline_text(p.label, cues)
            ),
            key=lambda p: (-p.pressure, p.label),
        )
        ranked = [p for p in ranked if p.pressure > 0.0][: settings.max_guidelines]
        new_lines = [(p.label, settings.guideline_text(p.label, cues) or "") for p in ranked]
        if new_lines != old_lines:
            driven.update(p.label for p in ranked)
            notes.append("guidelines " + (", ".join(p.describe() for p in ranked) or "cleared"))
    elif old_lines:
        notes.append("guidelines cleared (disabled in settings)")

    scope = ScopeSpec(changes=sorted(active), guidelines=[Guideline(label=lab, text=text) for lab, text in new_lines])
    return scope, notes, driven


def evolve(
    interface: Interface,
    state: CapabilityState,
    settings: EvolutionSettings,
    categories: list[str],
    cues: CueTexts | None = None,
) -> Interface | None:
    """The next training-interface revision's content, or None when nothing changes (the core numbers it:
    ``revision``, ``parent`` and ``step``, see ``seal_platform.stages.adopt_interface``).

    :param interface: the current training revision.
    :param state: the capability state, already updated with this step's labels.
    :param settings: the evolution settings.
    :param categories: the environment's task categories (the scopes that may be decided separately);
        empty: the categories present in the state.
    :param cues: the environment's cue texts (guideline lines); None: BFCL's.
    """
    if settings.mode == "off":
        return None
    scopes: dict[str, ScopeSpec] = dict(InterfaceSpec.of(interface).scopes)
    notes: list[str] = []
    driven: set[str] = set()

    if settings.mode == "reference":
        wanted = ScopeSpec(changes=sorted(c for c in REFERENCE_CHANGES if settings.allowed(c)))
        names = sorted(settings.categories) if settings.categories is not None else [ALL_SCOPES]
        target = {name: wanted for name in names} if wanted.changes else {}
        if target != scopes:
            notes.extend(f"{name}: static schema affordances " + ", ".join(wanted.changes) for name in target)
        scopes = target
    else:
        tables = {"round": state.last, "window": state.window, "totals": state.totals}[settings.table]
        if settings.per_category:
            allowed = set(settings.categories) if settings.categories is not None else None
            known = set(categories) or set(tables.by_category_label)
            targets = sorted(c for c in known if allowed is None or c in allowed)
            decide_on: list[tuple[str, str | None]] = [(c, c) for c in targets]
        else:
            decide_on = [(ALL_SCOPES, None)]
        for scope_name, category in decide_on:
            if evidence(tables, category, settings.excluded_labels) < settings.min_evidence:
                continue
            scope, scope_notes, scope_driven = decide_scope(
                scopes.get(scope_name, ScopeSpec()),
                label_pressures(tables, category, settings.excluded_labels),
                settings,
                cues,
            )
            if scope.dump():
                scopes[scope_name] = scope
            else:
                scopes.pop(scope_name, None)
            notes.extend(f"{scope_name}: {n}" for n in scope_notes)
            driven.update(scope_driven)

    typed = InterfaceSpec(scopes=scopes)
    spec = typed.dump()
    if spec == interface.spec:
        return None
    return Interface(
        system_text=describe_system(typed),
        spec=spec,
        changes=notes or ["spec rewritten"],
        driven_by=sorted(driven),
    )
