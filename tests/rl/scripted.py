"""A test double for the rollout engine: real episodes, made-up tokens.

It plays each entry through the real Episode and verifier (the gold calls when the episode is
"good", an empty first turn otherwise) and invents the token sequence with a known layout, so the
trainer-side tests can check advantages, masks and gradients exactly without a language model.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

from seal.env.calls import parse_call
from seal.env.episode import Episode
from seal.policy.rollout import EpisodeRollout

# completion layout of every scripted episode: model, model, env, env, env, model, model, env, model
MASK = [1, 1, 0, 0, 0, 1, 1, 0, 1]


class ScriptedEngine:
    format = SimpleNamespace(name="qwen_xml", call_example='<tool_call>{"name": "ls", "arguments": {}}</tool_call>')

    # the end-of-turn marker (SmolLM2's <|im_end|>)
    eot_ids = [2]

    def __init__(self, vocab_size: int, good=lambda position: position % 2 == 0):
        self.vocab_size = vocab_size
        self.good = good
        self.model = None
        self.plays = 0

    def play(self, entries, view=None, *, temperature=1.0, seeds=None, progress=False, leave=True):
        self.plays += 1
        out = []
        for position, entry in enumerate(entries):
            episode = Episode(entry)
            good = self.good(position)
            while (turn := episode.next_turn()) is not None:
                gold = entry.gold[turn.index]
                if good and gold:
                    episode.step([parse_call(c) for c in gold], raw="gold")
                episode.step([], raw="done")
            rng = random.Random(seeds[position] if seeds else position)
            ids = [rng.randrange(10, self.vocab_size) for _ in range(3 + len(MASK))]
            out.append(EpisodeRollout(
                entry=entry, episode=episode, verdict=episode.verdict(), prompt_ids=ids[:3],
                completion_ids=ids[3:], completion_mask=list(MASK), logprobs=[0.0] * len(MASK),
                num_model_tokens=sum(MASK), ended=episode.ended or "completed",
                timings={"generation": 0.0, "execution": 0.0, "verification": 0.0},
            ))
        return out
