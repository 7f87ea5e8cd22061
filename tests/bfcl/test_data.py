"""Task data: categories, the split, selection by ids / first N, tool docs and held-out docs."""

from __future__ import annotations

import json

import pytest

from seal_platform_plugins.bfcl import data
from seal_platform_plugins.bfcl.data import CATEGORIES, DataError, held_out_docs, load_tasks, tool_docs


def test_categories_have_200_tasks_each_with_ground_truth(all_tasks):
    assert len(all_tasks) == 800
    for category in CATEGORIES:
        tasks = [t for t in all_tasks if t.category == category]
        assert len(tasks) == 200
        for task in tasks:
            assert task.id.startswith(category + "_")
            assert len(task.payload["ground_truth"]) == len(task.payload["question"])
            assert {"initial_config", "involved_classes", "question"} <= set(task.payload)


def test_split_is_the_shared_one_and_partitions():
    ours = json.loads(data.SPLIT_FILE.read_text())
    train, evals = load_tasks(split="train"), load_tasks(split="eval")
    assert len(train) == 400 and len(evals) == 400
    assert {t.id for t in train}.isdisjoint({t.id for t in evals})
    assert {t.id for t in train} == set(ours["train"]) and {t.id for t in evals} == set(ours["eval"])
    val, test = load_tasks(split="eval_val"), load_tasks(split="eval_test")
    assert len(val) == 100 and len(test) == 300
    assert {t.id for t in val} | {t.id for t in test} == {t.id for t in evals}
    for category in CATEGORIES:
        assert sum(t.category == category for t in train) == 100
        assert sum(t.category == category for t in val) == 25
    assert all(t.split == "train" for t in train)


def test_split_file_matches_the_shared_data_folder():
    shared = data.SPLIT_FILE.parents[2] / ".." / "shared" / "data" / "bfcl_multi_turn_split.json"
    if not shared.exists():
        pytest.skip("shared data folder not present on this machine")
    assert json.loads(shared.read_text()) == json.loads(data.SPLIT_FILE.read_text())


def test_selection_by_category_ids_and_first_n():
    tasks = load_tasks(["multi_turn_miss_func"], split="train", limit_per_category=5)
    assert len(tasks) == 5 and all(t.category == "multi_turn_miss_func" for t in tasks)
    first_two = load_tasks(split="eval", limit_per_category=2)
    assert len(first_two) == 8
    ids = [tasks[3].id, tasks[0].id]
    picked = load_tasks(split="train", ids=ids)
    assert [t.id for t in picked] == [tasks[0].id, tasks[3].id]  # data-file order
    assert load_tasks(split="train", limit_per_category=0) == []


def test_bad_selections_say_what_is_wrong():
    with pytest.raises(DataError, match="unknown BFCL categories"):
        load_tasks(["multi_turn_nope"])
    with pytest.raises(DataError, match="unknown split"):
        load_tasks(split="validation")
    eval_id = load_tasks(split="eval", limit_per_category=1)[0].id
    with pytest.raises(DataError, match="not in split 'train'"):
        load_tasks(split="train", ids=[eval_id])
    with pytest.raises(DataError, match="non-negative"):
        load_tasks(limit_per_category=-1)


def test_payload_is_a_private_copy():
    task = load_tasks(split="all", ids=["multi_turn_base_0"])[0]
    task.payload["ground_truth"][0].append("rm(file_name='x')")
    again = load_tasks(split="all", ids=["multi_turn_base_0"])[0]
    assert "rm(file_name='x')" not in again.payload["ground_truth"][0]


def test_get_task_is_load_tasks_one_task_and_a_private_copy_too():
    got = data.get_task("multi_turn_long_context_7")
    same = load_tasks(split="all", ids=["multi_turn_long_context_7"])[0]
    assert (got.id, got.category, got.split, got.payload) == (same.id, same.category, same.split, same.payload)
    got.payload["initial_config"].clear()
    assert data.get_task("multi_turn_long_context_7").payload == same.payload
    with pytest.raises(DataError, match="multi_turn_base_999"):
        data.get_task("multi_turn_base_999")
    with pytest.raises(DataError, match="not in a BFCL multi-turn category"):
        data.get_task("nothing_like_this_1")


def test_a_shared_task_reads_the_cached_entry_and_verifying_it_changes_nothing():
    """The verifier's lookups (``get_task(..., shared=True)``) share the cached entry's values instead of a deep
    copy per task; replaying transcripts in this process (both sides, every category, one a long-context
    task) leaves those values as they were."""
    import copy

    from seal_platform_plugins.bfcl.verifier import verify_record

    ids = [
        f"{category}_{n}" for category in CATEGORIES for n in (0, 50, 95)
    ]  # 50, 95: replays that write into their configs
    entries = {i: data._entries_by_id()[i][1] for i in ids}
    before = copy.deepcopy(entries)
    for i in ids:
        shared, private = data.get_task(i, shared=True), data.get_task(i)
        assert shared.payload == private.payload == entries[i]
        assert shared.payload["initial_config"] is entries[i]["initial_config"]
        assert private.payload["initial_config"] is not entries[i]["initial_config"]
        truth = entries[i]["ground_truth"]
        assert verify_record({"task_id": i, "turns": truth})["success"]
        verify_record({"task_id": i, "turns": [turn[::-1] for turn in truth]})  # the calls reversed
    assert entries == before


def test_tool_docs_drop_excluded_and_held_out(task_by_id):
    task = task_by_id["multi_turn_miss_func_0"]
    names = [d["name"] for d in tool_docs(task)]
    assert "cp" in task.payload["excluded_function"] and "cp" not in names
    assert "sort" not in names  # held out until turn 3
    assert "mv" in names and "post_tweet" in names
    held = held_out_docs(task)
    assert list(held) == [3] and [d["name"] for d in held[3]] == ["sort"]
    assert set(held[3][0]) >= {"name", "description", "parameters"}
    # A task without held-out functions has none, and its docs cover every involved class.
    base = task_by_id["multi_turn_base_0"]
    assert held_out_docs(base) == {}
    assert len(tool_docs(base)) > 10


def test_func_doc_table_matches_bfcl_eval():
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    for name, file in data.FUNC_DOC_FILES.items():
        assert MULTI_TURN_FUNC_DOC_FILE_MAPPING[name] == file


def test_tool_docs_match_official_prompt_population(all_tasks):
    # bfcl_eval builds the prompt's function list the same way (minus excluded_function, which it keeps).
    from bfcl_eval.utils import populate_test_cases_with_predefined_functions

    for task in all_tasks[::37]:
        entry = json.loads(json.dumps({k: v for k, v in task.payload.items() if k != "ground_truth"}))
        populate_test_cases_with_predefined_functions([entry])
        excluded = set(task.payload.get("excluded_function") or [])
        official = [d for d in entry["function"] if d["name"] not in excluded]
        assert tool_docs(task) == official, task.id
        revealed = {int(k): v for k, v in (entry.get("missed_function") or {}).items()}
        assert held_out_docs(task) == revealed
