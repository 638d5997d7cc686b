"""The checkpoint store's prompt-cache lookup (:meth:`CheckpointStore.best_prefix`, a bisection of sorted token
lists) against a scan of every state in least-recently-used order, the rule it replaces, through random adds,
replacements, evictions and restores under two LoRA sets."""

from __future__ import annotations

import random

from skippy.engine.scheduling.checkpoint import Checkpoint, CheckpointStore
from skippy.engine.scheduling.prefix import common_prefix_len

LORAS = ((), (("adapter.gguf", 1.0),))


def _scan(store: CheckpointStore, prompt: list[int], limit: int, min_reuse: int,
          lora: object) -> tuple[Checkpoint, int] | None:
    best: tuple[Checkpoint, int] | None = None
    for c in store:  # least recently used first; a tie keeps the first
        if c.lora != lora:
            continue
        n = min(common_prefix_len(c.tokens, prompt), limit)
        if n >= min_reuse and (best is None or n > best[1]):
            best = (c, n)
    return best


def _tokens(rng: random.Random, system: list[int]) -> list[int]:
    return system[:rng.randrange(len(system) + 1)] + [rng.randrange(4) for _ in range(rng.randrange(8))]


def test_best_prefix_is_the_longest_shared_prefix_least_recently_used_first() -> None:
    rng = random.Random(11)
    for _ in range(40):
        store = CheckpointStore(per_slot=rng.choice((1, 3, 8)), budget=rng.choice((None, 400, 2000)),
                                max_entries=rng.choice((None, 12)))
        system = [rng.randrange(4) for _ in range(rng.randrange(1, 30))]
        for _ in range(150):
            op = rng.random()
            lora = rng.choice(LORAS)
            if op < 0.5:
                tokens = _tokens(rng, system)
                store.add(rng.randrange(4), tokens, bytes(rng.randrange(1, 120)), lora)  # type: ignore[arg-type]
            elif op < 0.6 and len(store):
                store.touch(rng.choice(list(store)))
            elif op < 0.62:
                store.clear()
            prompt = _tokens(rng, system)
            limit = rng.randrange(-1, len(prompt) + 2)
            min_reuse = rng.randrange(0, 4)
            want = _scan(store, prompt, limit, min_reuse, lora)
            got = store.best_prefix(prompt, limit, min_reuse, lora)  # type: ignore[arg-type]
            assert (got is None) == (want is None), (prompt, limit, min_reuse)
            if got is not None and want is not None:
                assert got[1] == want[1] and got[0] is want[0]
        assert sum(len(v) for v in store._sorted.values()) == len(store)
