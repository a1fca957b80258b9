"""The rollout engine of 2026-12-01 against today's, on notebook 05's recipe: the time of an RL step and
held-out success, side by side over seeds (issue 36's "an RL step takes at most 0.4x today's time, and
held-out success is not lower over 3 seeds").

    python benchmarks/engine_then_now.py                  # 3 seeds x {then, now}, on 2 idle cores
    python benchmarks/engine_then_now.py --report         # only the table, from the finished runs
    python benchmarks/engine_then_now.py --seeds 0 --steps 2 --eval-tasks 4   # smoke size

then: the engine as it was measured on 2026-12-01 (28 s a step of this recipe on another machine): the cache
grown by concatenation (`kv_cache.PREALLOCATE = False`), transformers' SDPA for decode steps (no
`decode_attention`), rollouts sampled from the fp32 weights, every row of the update run whole. now: today's
defaults (preallocated cache, grouped decode attention, the update's shared start run once) and the bf16
sampling copy (fp32 on a CPU without bf16 units, `models.bf16_is_fast`). Both train the same fp32 weights with
the same optimizer (full fine-tuning, lr 2e-5), from the course's search_qa warm start, on the same tasks and
sampling seeds, so only the engine and the sampler's precision differ. The "now" run, when faster, trains on
to the "then" run's wall time and is evaluated there too. Held-out success is greedy from fp32 weights on 40
two-hop questions. The machinery (runs under runs/engine_then_now/, resumable, arms alternating by seed, the
table) is lora_vs_full.py's.
"""

from __future__ import annotations

from lora_vs_full import main

ARMS = {"then": {"optim": dict(lr=2e-5), "rollout": dict(sample_dtype="float32"),
                 "engine": dict(preallocate=False, decode_attention_on=False, share_prefix=False)},
        "now": {"optim": dict(lr=2e-5), "rollout": dict(sample_dtype="bfloat16")}}

if __name__ == "__main__":
    main(arms=ARMS, name="engine_then_now", doc=__doc__)
