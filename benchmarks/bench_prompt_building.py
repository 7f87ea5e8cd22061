"""Per-turn CPU time of building an episode's next prompt (seal_platform_libs/policy/tokens.py) as the episode grows.

An engine builds the prompt of every generation with `prompt_ids(tokenizer, messages)`, token in, token out:
the first prompt is rendered once, sampled messages are appended as their token ids, and what follows each
sampled message (tool results, user turns, the generation prompt) is a delta rendered against a fixed base
conversation; history is never rendered again. Without the splice cache a call rebuilds the sequence from
the start (the first prompt and one delta per sampled message so far: work growing with the turns, per
call); with it (the default) a call resumes from the longest prefix already spliced and renders and
tokenizes only the deltas after it. This prints, per turn, the time of one prompt build with the cache and
without it, for a dialogue of assistant calls and ~300-token tool results (BFCL-like).

    .venv/bin/python benchmarks/bench_prompt_building.py --turns 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from seal_platform.types import Message
    from seal_platform_libs.policy.loading import ensure_converted
    from seal_platform_libs.policy.tokens import SPLICE_CACHE, prompt_ids

    tok = AutoTokenizer.from_pretrained(ensure_converted())
    result = json.dumps({"files": [f"report_{i:03d}.txt" for i in range(60)], "cwd": "/home/user/documents"})

    def episode(turns: int, tag: int) -> list[list[Message]]:
        msgs = [Message(role="system", content="You are a tool-using agent. " * 40),
                Message(role="user", content=f"Task {tag}: tidy up the documents folder.")]
        prefixes = []
        for t in range(turns):
            prefixes.append(list(msgs))
            ids = tok(f'<tool_call>{{"name": "ls", "arguments": {{"n": {t}}}}}</tool_call>', add_special_tokens=False)[
                "input_ids"
            ]
            msgs.append(Message(role="assistant", content=tok.decode(ids), token_ids=ids + [tok.eos_token_id],
                                logprobs=[-0.1] * (len(ids) + 1), trainable=True))
            msgs.append(Message(role="tool", content=f"<tool_response>\n{result}\n</tool_response>"))
        return prefixes

    rows = []
    for cached in (True, False):
        SPLICE_CACHE.enabled = cached
        SPLICE_CACHE.clear()
        per_turn: list[list[float]] = [[] for _ in range(args.turns)]
        for rep in range(args.repeats):
            for t, msgs in enumerate(episode(args.turns, rep)):  # in order, as an engine builds them
                start = time.perf_counter()
                prompt_ids(tok, msgs)
                per_turn[t].append(time.perf_counter() - start)
        rows.append({"cache": cached, "ms_per_turn": [round(1000 * statistics.median(v), 2) for v in per_turn]})
    SPLICE_CACHE.enabled = True
    for row in rows:
        ms = row["ms_per_turn"]
        print(json.dumps({**row, "turn2_ms": ms[1], f"turn{args.turns}_ms": ms[-1],
                          f"turn{args.turns}_over_turn2": round(ms[-1] / ms[1], 2)}))


if __name__ == "__main__":
    main()
