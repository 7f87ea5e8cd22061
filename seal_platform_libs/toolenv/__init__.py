"""A library for tool-using environments: what several environment plugins need, shared without one plugin
importing another (a third-party environment imports it the same way; see docs/write-an-environment-plugin.md).

Modules (import the one you need; importing this package imports none of them, and none imports a heavy
library or any plugin):

* :mod:`.formats`: tool-call formats, each owning both directions: the tool block of the system prompt and
  the parser of the agent's reply (``hermes``: ``<tool_call>{json}</tool_call>``; ``python``: a list of
  Python-style calls). ``get_format(name)``.
* :mod:`.calls`: the safe parser and renderer of Python call syntax ``f(a=1)`` behind the ``python`` format
  (an AST walk over literals; model text is never evaluated).
* :mod:`.interface`: how a training-interface revision changes what the agent sees of BFCL-style JSON tool
  docs: ``render_tools`` (required markers, allowed values, type hints, hidden optional parameters),
  ``system_addendum`` (the no-invent note, capability guidelines) and ``recovery_hint`` (a hint after a
  failed call); revision 0 renders everything untouched.
* :mod:`.evolution`: which of those changes a revision activates, per task category, from the capability
  state (``EvolutionSettings``, ``evolve``).
* :mod:`.schemadocs` and :mod:`.jsoncalls`: the same jobs for tools described by JSON schemas (MCP's
  ``inputSchema``), rendered as text lines, with argument validation, and a lenient guarded parser of
  ``<tool_call>`` JSON blocks.
* :mod:`.episodes`: what environments' ``collect``/``evaluate`` hooks share: the episodes of a step and their
  group keys, the sampling of a tool-call turn, an evaluation scored without infrastructure failures, and the
  JSON Lines task file.
* :mod:`.lockstep`: the lock-step episode loop (``play_lockstep``: every episode of a chunk advances one agent
  message per round, each round one engine call) and the episode it plays (``LockstepEpisode``).
* :mod:`.hooks`: the standard hooks of a plugin whose environment plays its episodes in lock step
  (``LockstepHooks``: ``register_settings``, ``collect``, ``evaluate`` and the ``check_config`` issues).
* :mod:`.bfcl_data`: the installed ``bfcl-eval`` package's data folder, for the environments built on BFCL's
  data.
"""
