"""The verifier's fast paths give what the plain ones give, and the benchmark's thin official command gives
the official verdicts (benchmarks/official_bfcl_verify.py, the baseline `seal-platform verify` is timed
against)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from official_cases import official_verdict

from seal_platform_plugins.bfcl.backend import Backend, _public_methods, backend_class
from seal_platform_plugins.bfcl.checker import verify_payload
from seal_platform_plugins.bfcl.trace import CHECK_KEYS, TurnChecks

ROOT = Path(__file__).resolve().parents[2]


def _same_model(a: TurnChecks, b: TurnChecks) -> None:
    assert a.__dict__ == b.__dict__ and list(a.__dict__) == list(b.__dict__)
    assert a.model_fields_set == b.model_fields_set
    assert a.__pydantic_extra__ == b.__pydantic_extra__ and a.__pydantic_private__ == b.__pydantic_private__
    assert a.model_dump() == b.model_dump() and a == b


def test_construct_full_equals_model_construct(all_tasks):
    checked = 0
    for task in all_tasks[::40]:
        payload = task.payload
        turns = [[c for c in turn][:-1] or ["ls()"] for turn in payload["ground_truth"]]  # some fail, some pass
        from seal_platform_libs.toolenv.calls import parse_call

        outcome = verify_payload(payload, [[parse_call(c) for c in turn] for turn in turns])
        for verdict in outcome.turns:
            stored = verdict.checks
            assert list(stored) == list(CHECK_KEYS)
            _same_model(TurnChecks.construct_full(dict(stored)), TurnChecks.model_construct(**stored))
            _same_model(TurnChecks.view(stored), TurnChecks.model_construct(**stored))
            checked += 1
    assert checked > 50
    # A partial dict (a trace read back from elsewhere) still gets the defaults.
    partial = {"gt_calls": ["ls()"], "state_ok": False}
    view = TurnChecks.view(partial)
    assert view.model_calls == [] and view.state_ok is False and view.model_fields_set == set(partial)


def test_methods_bind_to_the_instances_and_later_classes_win(all_tasks):
    task = next(t for t in all_tasks if len(t.payload["involved_classes"]) >= 2)
    backend = Backend.for_payload(task.payload)
    classes = task.payload["involved_classes"]
    owner: dict[str, str] = {}
    for name in classes:
        for method, _, _ in _public_methods(backend_class(name)):
            owner[method] = name
    assert backend.method_names == set(owner)
    for method, class_name in owner.items():
        assert backend._methods[method][0] == class_name
    # A call changes the state of this backend's own instance only.
    other = Backend.for_payload(task.payload)
    text = task.payload["ground_truth"][0][0]
    from seal_platform_libs.toolenv.calls import parse_call

    backend.execute(parse_call(text))
    assert all(a is not b for a, b in zip(backend.instances.values(), other.instances.values()))


def test_thin_official_command_gives_the_official_verdicts(all_tasks, tmp_path):
    picked = [all_tasks[0], all_tasks[250], all_tasks[450], all_tasks[650]]
    records = []
    for task in picked:
        gt = [list(turn) for turn in task.payload["ground_truth"]]
        records.append({"task_id": task.id, "turns": gt})
        records.append({"task_id": task.id, "turns": gt[:-1]})  # wrong number of turns
        broken = [list(turn) for turn in gt]
        first = next(i for i, turn in enumerate(broken) if turn)
        broken[first] = []  # an empty turn where the ground truth has calls
        records.append({"task_id": task.id, "turns": broken})
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "official_bfcl_verify.py"), str(path)],
                          capture_output=True, text=True, check=True)
    got = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [g["task_id"] for g in got] == [r["task_id"] for r in records]
    by_id = {task.id: task.payload for task in picked}
    expected = [official_verdict(by_id[r["task_id"]], r["turns"])[0] for r in records]
    assert [g["success"] for g in got] == expected == [True, False, False] * len(picked)


def test_default_state_copies_by_pickle_equal_deepcopies_and_share_nothing():
    import copy
    import importlib

    from seal_platform_plugins.bfcl.backend import BACKEND_MODULES

    patched = []
    for class_name, module_name in BACKEND_MODULES.items():
        backend_class(class_name)
        module = importlib.import_module(module_name)
        default = module.__dict__.get("DEFAULT_STATE")
        if default is None or module.deepcopy is copy.deepcopy:
            continue
        patched.append(class_name)
        before = copy.deepcopy(default)
        fast, slow = module.deepcopy(default), copy.deepcopy(default)
        assert fast == slow and repr(fast) == repr(slow) and fast is not default
        # Every container is new: changing the copy leaves the module's state as it was.
        for key, value in fast.items():
            if isinstance(value, (dict, list, set)):
                assert value is not default[key]
                value.clear()
        assert default == before
        # Anything else is copy.deepcopy's, memo included.
        other, memo = [[1], {"a": [2]}], {}
        assert module.deepcopy(other, memo) == other and memo
    # The stateful classes with plain default states; GorillaFileSystem's holds Directory objects: left alone.
    assert {"TradingBot", "TravelAPI", "MessageAPI", "VehicleControlAPI"} <= set(patched)
    assert "GorillaFileSystem" not in patched


def test_only_a_plain_default_state_is_copied_by_pickle():
    import copy
    import types

    from seal_platform_plugins.bfcl.backend import _copy_default_state_by_pickle

    def module(state):
        made = types.ModuleType("fake_backend")
        made.deepcopy, made.DEFAULT_STATE = copy.deepcopy, state
        _copy_default_state_by_pickle(made)
        return made

    assert module({"a": [1, 2.5, None, ("x", True)], "ids": {1, 2}}).deepcopy is not copy.deepcopy
    assert module({"a": [object()]}).deepcopy is copy.deepcopy
    assert module({"a": {(1, 2): 3}}).deepcopy is copy.deepcopy  # a tuple key
    assert module([1, 2]).deepcopy is copy.deepcopy
    nested: list = []
    for _ in range(60):
        nested = [nested]
    assert module({"deep": nested}).deepcopy is copy.deepcopy
    renamed = types.ModuleType("fake_backend")
    renamed.deepcopy, renamed.DEFAULT_STATE = (lambda value, memo=None: value), {"a": 1}
    _copy_default_state_by_pickle(renamed)
    assert renamed.deepcopy(renamed.DEFAULT_STATE) is renamed.DEFAULT_STATE  # not copy.deepcopy: untouched


class _Plain:
    def __init__(self, **values):
        vars(self).update(values)


class _WithProperty(_Plain):
    @property
    def shown(self):  # a data descriptor: getattr reads it, not the instance's own "shown"
        return vars(self).get("shown_base", 0) * 2


def _official_compare(model_instances, gt_instances):
    """The official state check, as bfcl_eval writes it (getattr on both sides), for the comparison below."""
    for class_name, gt_instance in gt_instances.items():
        model_instance = model_instances[class_name]
        differing = [attr for attr in vars(gt_instance)
                     if not attr.startswith("_") and getattr(model_instance, attr) != getattr(gt_instance, attr)]
        if differing:
            return {class_name: differing}
    return {}


def test_the_state_check_reads_the_instances_dicts_as_getattr_would():
    from seal_platform_plugins.bfcl.checker import _compare, _no_data_descriptors

    assert _no_data_descriptors(_Plain) and not _no_data_descriptors(_WithProperty)
    assert all(_no_data_descriptors(backend_class(name)) for name in ("GorillaFileSystem", "TravelAPI", "TradingBot"))
    nan = float("nan")
    cases = [
        ({"a": 1, "b": [1, 2], "_hidden": 1}, {"a": 1, "b": [1, 2], "_hidden": 2}),  # equal but for a private one
        ({"a": 1, "b": [1, 3]}, {"a": 2, "b": [1, 2]}),  # two differ, in the GT's order
        ({"a": nan}, {"a": nan}),  # not equal to itself: differs, as the official check finds
        ({"b": 1, "a": 1}, {"a": 1, "b": 2}),  # the GT's attribute order
    ]
    for model, gt in cases:
        got = _compare({"C": _Plain(**model)}, {"C": _Plain(**gt)})
        assert got == _official_compare({"C": _Plain(**model)}, {"C": _Plain(**gt)})
    # An attribute the model's instance lacks: getattr's AttributeError, as in the official check.
    for compare in (_compare, _official_compare):
        try:
            compare({"C": _Plain(a=1)}, {"C": _Plain(a=1, b=2)})
        except AttributeError as exc:
            assert "'_Plain' object has no attribute 'b'" in str(exc)
        else:
            raise AssertionError("no AttributeError")
    # A class attribute stands in for a missing instance attribute, on both paths.
    _Plain.shared = 5
    try:
        assert _compare({"C": _Plain(a=1)}, {"C": _Plain(a=1, shared=5)}) == {}
        assert _compare({"C": _Plain(a=1)}, {"C": _Plain(a=1, shared=6)}) == {"C": ["shared"]}
    finally:
        del _Plain.shared
    # With a data descriptor, getattr's reading (the property's, on both sides) decides.
    model, gt = _WithProperty(shown_base=1), _WithProperty(shown_base=1)
    vars(model)["shown"], vars(gt)["shown"] = 1, 2  # the instances' own values differ, the property's do not
    assert _compare({"C": model}, {"C": gt}) == _official_compare({"C": model}, {"C": gt}) == {}


def test_backends_built_from_one_pickled_config_are_fresh_and_equal(all_tasks):
    """Backends of one task built with one ``configs`` dict (the config pickled once) hold the state of backends
    built each from its own copy, and share no object."""
    for task in all_tasks[::50]:
        configs: dict[str, bytes] = {}
        first, second = (Backend.for_payload(task.payload, {}, configs) for _ in range(2))
        alone = Backend.for_payload(task.payload, {})
        assert set(configs) == set(task.payload["involved_classes"]) - {"MathAPI"}
        for name, instance in alone.instances.items():
            for attr, value in vars(instance).items():
                if attr.startswith("_"):
                    continue
                assert getattr(first.instances[name], attr) == value == getattr(second.instances[name], attr)
                if isinstance(value, (dict, list)):
                    assert getattr(first.instances[name], attr) is not getattr(second.instances[name], attr)
