"""Seeded task generation: dialogues of one or more user turns, one tool call per turn.

Three request styles (categories), from easiest to hardest: ``named`` requests name the tool to use and the
values in its own words ("Use lock_door to lock the back door."); ``direct`` requests name rooms, doors and
values with the tools' own words but not the tool ("Turn on the kitchen light."); ``paraphrase`` requests use
everyday words the agent must map onto the enumerated values ("Switch the lamp off in the study.", "Secure
the back door."), which is where schema affordances (allowed values) help. ``settings.smarthome.categories``
picks the styles (default ``direct`` and ``paraphrase``); tasks cycle through them. Train and eval come from
disjoint seeded streams; the same settings always give the same tasks.
"""

from __future__ import annotations

import random
from typing import Any

from seal_platform.types import Task

from .tools import DOORS, GENRES, ROOMS, initial_state

CATEGORIES = ("direct", "paraphrase")
ROOM_WORDS = {
    "named": {"kitchen": ["kitchen"], "bedroom": ["bedroom"], "living_room": ["living_room"], "office": ["office"]},
    "direct": {"kitchen": ["kitchen"], "bedroom": ["bedroom"], "living_room": ["living_room"], "office": ["office"]},
    "paraphrase": {"kitchen": ["kitchen"], "bedroom": ["bedroom"], "living_room": ["living room", "lounge"],
                   "office": ["study", "home office"]},
}
NUMBER_WORDS = {16: "sixteen", 17: "seventeen", 18: "eighteen", 19: "nineteen", 20: "twenty", 21: "twenty-one",
                22: "twenty-two", 23: "twenty-three", 24: "twenty-four", 25: "twenty-five", 26: "twenty-six"}


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _light(rng: random.Random, style: str) -> tuple[str, dict[str, Any]]:
    room = rng.choice(ROOMS)
    state = rng.choice(["on", "off"])
    word = rng.choice(ROOM_WORDS[style][room])
    if style == "named":
        text = f"Use set_light to turn {state} the {word} light."
    elif style == "direct":
        text = f"Turn {state} the {word} light."
    else:
        text = rng.choice([f"Switch the lamp {state} in the {word}.",
                           f"Could you {'light up' if state == 'on' else 'darken'} the {word}?"])
    return text, _call("set_light", room=room, state=state)


def _thermostat(rng: random.Random, style: str) -> tuple[str, dict[str, Any]]:
    room = rng.choice(ROOMS)
    temp = rng.randint(17, 26)
    word = rng.choice(ROOM_WORDS[style][room])
    if style == "named":
        text = f"Use set_thermostat to set the {word} to {temp} degrees."
    elif style == "direct":
        text = f"Set the {word} thermostat to {temp} degrees."
    else:
        text = rng.choice([f"Make the {word} {NUMBER_WORDS[temp]} degrees.",
                           f"I'd like it at {temp}°C in the {word}."])
    return text, _call("set_thermostat", room=room, temperature=temp)


def _door(rng: random.Random, style: str) -> tuple[str, dict[str, Any]]:
    door = rng.choice(DOORS)
    action = rng.choice(["lock", "unlock"])
    if style == "named":
        text = f"Use lock_door to {action} the {door} door."
    elif style == "direct":
        text = f"{action.capitalize()} the {door} door."
    else:
        verb = {"lock": rng.choice(["Secure", "Bolt"]), "unlock": rng.choice(["Open up", "Release the lock on"])}[
            action
        ]
        text = f"{verb} the {door} door."
    return text, _call("lock_door", door=door, action=action)


def _music(rng: random.Random, style: str) -> tuple[str, dict[str, Any]]:
    room = rng.choice(ROOMS)
    genre = rng.choice(GENRES)
    word = rng.choice(ROOM_WORDS[style][room])
    if style == "named":
        text = f"Use play_music to play {genre} in the {word}."
    elif style == "direct":
        text = f"Play {genre} music in the {word}."
    else:
        text = rng.choice([f"Put on some {genre} in the {word}.", f"I want to hear {genre} tunes in the {word}."])
    return text, _call("play_music", room=room, genre=genre)


MAKERS = (_light, _thermostat, _door, _music)


def make_tasks(split: str, n: int, seed: int, min_turns: int, max_turns: int,
               categories: tuple[str, ...] | list[str] = CATEGORIES) -> list[Task]:
    """``n`` tasks of ``split`` (``categories`` in turn), reproducible from ``seed``."""
    rng = random.Random(f"smarthome:{seed}:{split}")
    tasks = []
    for i in range(n):
        category = categories[i % len(categories)]
        n_turns = rng.randint(min_turns, max_turns)
        makers = rng.sample(MAKERS, n_turns) if n_turns <= len(MAKERS) else [rng.choice(MAKERS) for _ in range(n_turns)]
        turns = []
        for make in makers:
            text, call = make(rng, category)
            turns.append({"user": text, "calls": [call]})
        tasks.append(Task(id=f"{split}-{i}", category=category, split=split,
                          payload={"initial_state": initial_state(rng), "turns": turns}))
    return tasks
