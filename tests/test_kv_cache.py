"""The fast generate_turn (course_lib.kv_cache) gives the tokens of the plain one (course_lib.rollout),
greedily.

Real embedded model, short generations: the plain version re-reads the whole context for every token.
"""

import pytest
import torch
from conftest import TEST_DEVICE, logprob_atol

from course_lib import kv_cache, rollout
from course_lib.envs import load_tasks
from course_lib.models import load_policy
from course_lib.train.config import Hooks, TrainConfig
from course_lib.train.loop import Run, rl_step
from course_lib.trajectory import TrajectoryBuilder, render

TASKS = load_tasks("lookup", "test")[:3]


def _prompt(tok, question: str) -> list[int]:
    messages = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": question}]
    return tok(render(tok, messages, add_generation_prompt=True), add_special_tokens=False)["input_ids"]


def _close(a: list[list[float]], b: list[list[float]], atol: float) -> bool:
    return all(torch.allclose(torch.tensor(x), torch.tensor(y), atol=atol) for x, y in zip(a, b))


def test_fast_and_plain_generate_the_same_greedy_tokens_over_two_turns_with_the_cache_carried(policy):
    model, tok = policy
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    # Two identical contexts (a group's first turn: run once) and a third sharing only the system prompt.
    questions = ["Name three colours.", "Name three colours.", "What is two plus two?"]
    builders = [TrajectoryBuilder(tok, [{"role": "system", "content": "You answer briefly."},
                                        {"role": "user", "content": q}], task_id="t", group_id="g",
                                  traj_id=str(i), end_of_turn_id=eot) for i, q in enumerate(questions)]
    caches = [None] * len(builders)
    stats = rollout.RolloutStats()
    for turn in range(2):
        contexts, before = [list(b.token_ids) for b in builders], stats.prefill_tokens
        fast = kv_cache.generate_turn(model, tok, contexts, max_new_tokens=6, temperature=0.0, caches=caches,
                                      stats=stats)
        plain = rollout.generate_turn(model, tok, contexts, max_new_tokens=6, temperature=0.0)
        assert fast[0] == plain[0] and fast[2] == plain[2], turn
        assert _close(fast[1], plain[1], logprob_atol(model, 1e-4)), turn
        assert all(c is not None and c.ids == ctx + ids[:-1]
                   for c, ctx, ids in zip(caches, contexts, fast[0]))
        ran = stats.prefill_tokens - before
        if turn == 0:  # the duplicate context and the shared system prompt were run once
            assert ran < sum(map(len, contexts[1:]))
        else:  # each row ran at most the most tokens any row had new since its cache
            # (last action token + observation)
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
    ctx, other = (tok(render(tok, [{"role": "user", "content": f"Name three {what}."}],
                             add_generation_prompt=True), add_special_tokens=False)["input_ids"]
                  for what in ("colours", "animals"))
    caches = [None, None]
    kv_cache.generate_turn(model, tok, [ctx, other], max_new_tokens=6, temperature=0.0, caches=caches)
    assert [c.ids[: len(x)] for c, x in zip(caches, (ctx, other))] == [ctx, other]
    # Swap them: each row's cache now matches its new context only up to "Name three".
    swapped = [caches[1], caches[0]]
    with_cache = kv_cache.generate_turn(model, tok, [ctx, other], max_new_tokens=8, temperature=0.0,
                                        caches=swapped)[0]
    without = kv_cache.generate_turn(model, tok, [ctx, other], max_new_tokens=8, temperature=0.0)[0]
    assert with_cache == without


def test_the_preallocated_cache_gives_the_same_episodes_as_concatenation(policy, monkeypatch):
    model, tok = policy
    kwargs = dict(group_size=2, max_turns=3, max_new_tokens=24, temperature=0.0, seed=0, progress=False)
    monkeypatch.setattr(kv_cache.RoomyLayer, "room", 5)  # small: the buffers are reallocated within turns too
    episodes = {}
    for preallocate in (False, True):
        monkeypatch.setattr(kv_cache, "PREALLOCATE", preallocate)
        episodes[preallocate] = [t for g in rollout.rollout(model, tok, "lookup", TASKS, **kwargs) for t in g]
    assert max(t.num_turns for t in episodes[True]) >= 2
    assert [t.token_ids for t in episodes[True]] == [t.token_ids for t in episodes[False]]
    for a, b in zip(episodes[True], episodes[False]):
        assert _close([a.logprobs], [b.logprobs], logprob_atol(model, 1e-4))
    cache = kv_cache.new_cache()  # the cache those rollouts used (PREALLOCATE is True here)
    model(input_ids=torch.tensor([_prompt(tok, "Hi")], device=model.device), cache=cache, use_cache=True)
    assert cache.layers and all(isinstance(layer, kv_cache.RoomyLayer) for layer in cache.layers)


def _bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_a_bf16_sampling_copy_equals_the_master_weights_rounded_after_an_update(monkeypatch):
    monkeypatch.setenv("COURSE_BF16", "1")  # the copy is made on any CPU, with bf16 units or without
    # its own copy: this test changes its weights
    model, tok = load_policy("smollm2-135m", device=TEST_DEVICE)
    assert kv_cache.sampling_copy(model, "float32") is model and kv_cache.synced(None, model) is model
    sampler = kv_cache.sampling_copy(model, "bfloat16")
    master, copied = list(model.parameters()), list(sampler.parameters())
    assert {p.dtype for p in master} == {torch.float32} and {p.dtype for p in copied} == {torch.bfloat16}
    # the copy's memory: half the fp32 weights (a tied layer once)
    assert 2 * _bytes(sampler) == _bytes(model)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert (sampler.get_output_embeddings().weight is sampler.get_input_embeddings().weight) == tied
    assert all(b.dtype == a.dtype for a, b in zip(model.buffers(), sampler.buffers()))  # rotary frequencies
    assert all(not p.requires_grad for p in copied) and sampler.course_autocast is None

    ids = tok("The cat sat on the mat because it was warm.",
              return_tensors="pt")["input_ids"].to(model.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()  # an update of the fp32 master weights
    # stale copy
    assert any(not torch.equal(s, m.detach().to(torch.bfloat16)) for s, m in zip(copied, master))
    assert kv_cache.synced(sampler, model) is sampler  # refreshed before it samples
    assert all(torch.equal(s, m.detach().to(torch.bfloat16)) for s, m in zip(copied, master))
    with pytest.raises(ValueError, match="sample_dtype must be one of"):
        kv_cache.sampling_copy(model, "float16")


def test_with_a_bf16_sampler_the_ratio_never_reads_the_samplers_log_probs(tmp_path, monkeypatch):
    """An RL step whose rollouts a bf16 copy samples, two PPO epochs: ℓ_old is the fp32 trainer's own
    first-epoch ℓ (ratio exactly 1 in that epoch), and the metrics report how far the sampler's log-probs
    were from it."""
    monkeypatch.setenv("COURSE_BF16", "1")
    model, tok = load_policy("smollm2-135m", device=TEST_DEVICE)  # its own copy: the step updates it
    config = TrainConfig(env="lookup", run_dir=str(tmp_path), tasks_per_step=1, group_size=2, progress=False,
                         rollout=dict(max_turns=1, max_new_tokens=6, sample_dtype="bfloat16"),
                         optim=dict(ppo_epochs=2, bf16_autocast=False))
    sampler = kv_cache.sampling_copy(model, config.rollout.sample_dtype)
    run = Run(config, model, tok, model.device, None, None, torch.optim.AdamW(model.parameters(), lr=1e-5),
              sampler=sampler)
    hooks = Hooks(reward_fn=lambda t: float(t.traj_id.endswith("#0")))
    batch = rl_step(run, 1, load_tasks("lookup", "train"), hooks=hooks)
    row = batch.metrics
    assert row["epochs_stepped"] == 2 and row["ratio_mean"] == pytest.approx(1.0, abs=1e-9), row
    # bf16 weights move a log-prob by far more than fp32 rounding (about 1e-5 between two fp32 passes)
    assert 1e-3 < row["sampler_logprob_gap"] < 1.0, row
    assert all(torch.equal(s, m.detach().to(torch.bfloat16))  # refreshed before the next rollout
               for s, m in zip(kv_cache.synced(sampler, model).parameters(), model.parameters()))


def test_without_bf16_units_a_bf16_sampler_samples_from_the_fp32_weights(monkeypatch, policy):
    """On a CPU without bf16 matrix units (AVX2 only: bf16 matmuls 100x slower than fp32) "bfloat16" gives
    no copy and says so."""
    model, _ = policy
    monkeypatch.setenv("COURSE_BF16", "0")
    with pytest.warns(UserWarning, match="no bf16 matrix units"):
        assert kv_cache.sampling_copy(model, "bfloat16") is model
