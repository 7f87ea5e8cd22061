"""The one helper for values in messages (seal_platform.errors.listed / short_repr), which the stage checks,
the conformance findings and the store's refusals all use."""

from __future__ import annotations

from seal_platform.errors import finite_reward, listed, short_repr


class Broken:
    def __repr__(self) -> str:
        raise RuntimeError("a plugin's object, as broken as the rest of it")


def test_a_short_list_is_bracketed_clipped_and_cut_after_its_limit():
    assert listed([]) == "[]"
    assert listed(["a", 1]) == "['a', 1]"
    assert listed(range(7)) == "[0, 1, 2, 3, 4, ...]"
    assert listed(range(7), 7) == "[0, 1, 2, 3, 4, 5, 6]"
    assert listed((x for x in "abc"), 2) == "['a', 'b', ...]"  # any iterable, read once
    long = "x" * 200
    [item] = listed([long])[1:-1].split(", ")
    assert len(item) == 80 and item.endswith("...") and item.startswith("'xxx")
    assert listed(["'t' (run r, step 0, train)"], quote=False) == "['t' (run r, step 0, train)]"


def test_a_value_s_repr_is_clipped_and_a_broken_one_is_named_by_its_type():
    assert short_repr("abc") == "'abc'"
    assert short_repr("x" * 100, 20) == "'" + "x" * 16 + "..."
    assert short_repr(Broken()) == "<Broken object>"
    assert listed([Broken()]) == "[<Broken object>]"


def test_a_reward_is_finite_real_and_not_a_bool():
    assert finite_reward(0) and finite_reward(0.5) and finite_reward(-3.0)
    for bad in (float("nan"), float("inf"), -float("inf"), True, False, "1", None):
        assert not finite_reward(bad), bad
