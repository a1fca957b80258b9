"""The fast generate_turn (course_lib.kv_cache) gives the tokens of the plain one (course_lib.rollout), greedily.

Real embedded model, short generations: the plain version re-reads the whole context for every token.
"""

import torch
from conftest import logprob_atol

from course_lib import kv_cache, rollout
from course_lib.envs import load_tasks
from course_lib.trajectory import TrajectoryBuilder, render

TASKS = load_tasks("lookup", "test")[:3]


def _prompt(tok, question: str) -> list[int]:
    return tok(render(tok, [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": question}],
                      add_generation_prompt=True), add_special_tokens=False)["input_ids"]


def _close(a: list[list[float]], b: list[list[float]], atol: float) -> bool:
    return all(torch.allclose(torch.tensor(x), torch.tensor(y), atol=atol) for x, y in zip(a, b))


def test_fast_and_plain_generate_the_same_greedy_tokens_over_two_turns_with_the_cache_carried(policy):
    model, tok = policy
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    # Two identical contexts (a group's first turn: run once) and a third sharing only the system prompt.
    questions = ["Name three colours.", "Name three colours.", "What is two plus two?"]
    builders = [TrajectoryBuilder(tok, [{"role": "system", "content": "You answer briefly."},
                                        {"role": "user", "content": q}], task_id="t", group_id="g", traj_id=str(i),
                                  end_of_turn_id=eot) for i, q in enumerate(questions)]
    caches = [None] * len(builders)
    stats = rollout.RolloutStats()
    for turn in range(2):
        contexts, before = [list(b.token_ids) for b in builders], stats.prefill_tokens
        fast = kv_cache.generate_turn(model, tok, contexts, max_new_tokens=6, temperature=0.0, caches=caches,
                                      stats=stats)
        plain = rollout.generate_turn(model, tok, contexts, max_new_tokens=6, temperature=0.0)
        assert fast[0] == plain[0] and fast[2] == plain[2], turn
        assert _close(fast[1], plain[1], logprob_atol(model, 1e-4)), turn
        assert all(c is not None and c.ids == ctx + ids[:-1] for c, ctx, ids in zip(caches, contexts, fast[0]))
        ran = stats.prefill_tokens - before
        if turn == 0:  # the duplicate context and the shared system prompt were run once
            assert ran < sum(map(len, contexts[1:]))
        else:  # each row ran at most the most tokens any row had new since its cache (last action token + observation)
            assert ran <= len(contexts) * max(len(b.traj.steps[-1].observation_ids) + 1 for b in builders)
        for b, ids, lps in zip(builders, fast[0], fast[1]):
            b.add_action(ids, lps)
            b.add_observation("Result: none found.")


def test_reused_kv_cache_gives_the_same_episodes_as_recomputing_the_context(policy):
    model, tok = policy
    kwargs = dict(group_size=2, max_turns=3, max_new_tokens=32, temperature=0.0, seed=0, progress=False)
    fresh = [t for g in rollout.rollout(model, tok, "lookup", TASKS, reuse_cache=False, **kwargs) for t in g]
    reused = [t for g in rollout.rollout(model, tok, "lookup", TASKS, reuse_cache=True, **kwargs) for t in g]
    assert max(t.num_turns for t in reused) >= 2  # later turns did start from a cache
    assert [t.token_ids for t in reused] == [t.token_ids for t in fresh]
    for a, b in zip(reused, fresh):
        diff = (torch.tensor(a.logprobs) - torch.tensor(b.logprobs)).abs().max()
        assert diff <= logprob_atol(model, 1e-4), diff


def test_a_cache_is_used_only_up_to_where_its_tokens_match_the_context(policy):
    model, tok = policy
    ctx, other = (tok(render(tok, [{"role": "user", "content": f"Name three {what}."}], add_generation_prompt=True),
                      add_special_tokens=False)["input_ids"] for what in ("colours", "animals"))
    caches = [None, None]
    kv_cache.generate_turn(model, tok, [ctx, other], max_new_tokens=6, temperature=0.0, caches=caches)
    assert [c.ids[: len(x)] for c, x in zip(caches, (ctx, other))] == [ctx, other]
    # Swap them: each row's cache now matches its new context only up to "Name three".
    swapped = [caches[1], caches[0]]
    with_cache = kv_cache.generate_turn(model, tok, [ctx, other], max_new_tokens=8, temperature=0.0, caches=swapped)[0]
    without = kv_cache.generate_turn(model, tok, [ctx, other], max_new_tokens=8, temperature=0.0)[0]
    assert with_cache == without
