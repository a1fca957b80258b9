"""`course_lib.sft`: the supervised step trains on the model's own tokens only, and the warm start is trained
once per set of options and then read from its cache. The real embedded model; tiny sizes."""

from __future__ import annotations

import json
import math

import pytest
import torch

from course_lib.batching import collate
from course_lib.envs import load_tasks
from course_lib.losses import sft_loss, token_logprobs
from course_lib.models import load_policy
from course_lib.rollout import expert_rollout
from course_lib.sft import ensure_warm_start, sft_step
from course_lib.trajectory import Trajectory


@pytest.fixture(scope="module")
def demo(tokenizer) -> Trajectory:
    (trajectory,) = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:1])
    return trajectory


def _with_tail(trajectory: Trajectory, tail: list[int]) -> Trajectory:
    """The demonstration followed by `tail`: tokens the model did not write (loss mask 0), after its last."""
    return Trajectory(task_id=trajectory.task_id, group_id=trajectory.group_id, traj_id=trajectory.traj_id,
                      messages=trajectory.messages, prompt_ids=trajectory.prompt_ids,
                      token_ids=trajectory.token_ids + tail, loss_mask=trajectory.loss_mask + [0] * len(tail),
                      logprobs=trajectory.logprobs + [0.0] * len(tail),
                      turn_index=trajectory.turn_index + [trajectory.num_turns - 1] * len(tail),
                      steps=trajectory.steps, reward=trajectory.reward)


def _step_and_gradient(model, trajectories, mask: str):
    """sft_step with a learning rate of 0 (the shared model's weights stay as they are): its stats and the
    gradient of the first and last layers it left behind."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    try:
        stats = sft_step(model, optimizer, trajectories, mask=mask, max_grad_norm=1e9)
        grads = [model.get_input_embeddings().weight.grad.clone(),
                 model.model.layers[-1].mlp.down_proj.weight.grad.clone()]
    finally:
        optimizer.zero_grad(set_to_none=True)
    return stats, grads


def test_the_assistant_loss_is_the_mean_cross_entropy_of_the_models_tokens(policy, demo):
    model, _ = policy
    stats, _ = _step_and_gradient(model, [demo], "assistant")
    ids = torch.tensor([demo.token_ids], device=model.device)
    with torch.no_grad():
        logprobs = token_logprobs(model(input_ids=ids).logits, ids)[0]
    trained = torch.tensor(demo.loss_mask, dtype=torch.bool, device=model.device)
    trained[0] = False
    assert stats["tokens"] == sum(demo.loss_mask[1:]) == int(trained.sum()) > 10
    assert stats["loss"] == pytest.approx(float(-logprobs[trained].mean()), abs=1e-4)
    assert 0.0 <= stats["accuracy"] <= 1.0 and math.isfinite(stats["grad_norm"]) and not stats["skipped"]


def test_the_assistant_step_has_the_gradient_of_the_loss_over_every_positions_logits(policy, demo):
    """sft_step runs the output layer only where a model token is predicted; the gradient is the one of
    `losses.sft_loss` over the logits of every position, masked."""
    model, _ = policy
    _, fast = _step_and_gradient(model, [demo], "assistant")
    batch = collate([demo])
    ids, attention = batch["input_ids"].to(model.device), batch["attention_mask"].to(model.device)
    model.train()
    try:
        loss, _ = sft_loss(model(input_ids=ids, attention_mask=attention).logits, ids,
                           batch["loss_mask"].to(model.device), attention_mask=attention)
        loss.backward()
        full = [model.get_input_embeddings().weight.grad.clone(),
                model.model.layers[-1].mlp.down_proj.weight.grad.clone()]
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
    for a, b in zip(fast, full):
        assert b.abs().max() > 0 and (a - b).abs().max() <= 1e-4 * b.abs().max()


def test_tokens_outside_the_assistant_mask_change_neither_the_loss_nor_the_gradient(policy, demo, tokenizer):
    """Tool output after the model's last token is context the model never writes: with mask="assistant"
    another tool output gives the same loss and gradient; with mask="none" it is trained on: they change."""
    model, _ = policy

    def tokens(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    one = _with_tail(demo, tokens("Observation: the file holds 42."))
    other = _with_tail(demo, tokens("Error: no such key 'zebra' here."))
    assert len(one.token_ids) != len(other.token_ids) or one.token_ids != other.token_ids
    stats_one, grads_one = _step_and_gradient(model, [one], "assistant")
    stats_other, grads_other = _step_and_gradient(model, [other], "assistant")
    assert stats_one["tokens"] == stats_other["tokens"] == sum(demo.loss_mask[1:])
    assert stats_one["loss"] == pytest.approx(stats_other["loss"], abs=1e-6)
    for a, b in zip(grads_one, grads_other):  # equal up to fp32 rounding (the two rows differ in length)
        assert a.abs().max() > 0 and (a - b).abs().max() <= 1e-4 * a.abs().max()
    all_one, grads_all_one = _step_and_gradient(model, [one], "none")
    all_other, grads_all_other = _step_and_gradient(model, [other], "none")
    assert all_one["tokens"] == len(one.token_ids) - 1
    assert abs(all_one["loss"] - all_other["loss"]) > 1e-3
    assert (grads_all_one[1] - grads_all_other[1]).abs().max() > 1e-2 * grads_all_one[1].abs().max()


def test_sft_step_rejects_an_unknown_mask_and_a_batch_with_nothing_to_train(policy, demo):
    model, _ = policy
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.raises(ValueError, match="mask must be 'assistant' or 'none'"):
        sft_step(model, optimizer, [demo], mask="tools")
    silent = _with_tail(demo, [])
    silent.loss_mask = [0] * len(silent.token_ids)
    with pytest.raises(ValueError, match="no trained tokens"):
        sft_step(model, optimizer, [silent])
    assert collate([silent])["loss_mask"].sum() == 0


def test_ensure_warm_start_trains_once_then_reads_its_cache(tmp_path, monkeypatch, policy):
    """Tiny: 2 demonstrations, 1 step. The first call trains and saves under runs/warm_start/<env>-<hash>; the
    second (with another progress flag and run_dir, which are not options of the result) reuses it."""
    monkeypatch.setenv("COURSE_RUNS", str(tmp_path))
    options = dict(model="smollm2-135m", n_demos=2, steps=1, batch_size=2, lr=1e-4, max_turns=4, device="cpu")
    path = ensure_warm_start("lookup", progress=False, **options)
    assert path.parent == tmp_path / "warm_start" and path.name.startswith("lookup-")
    rows = [json.loads(line) for line in (path / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert rows[0]["tokens"] > 10 and math.isfinite(rows[0]["loss"]) and not rows[0]["skipped"]
    written = (path / "sft_metrics.jsonl").stat().st_mtime_ns

    again = ensure_warm_start("lookup", progress=True, run_dir="ignored", **options)
    assert again == path and (path / "sft_metrics.jsonl").stat().st_mtime_ns == written
    assert sorted(p.name for p in (tmp_path / "warm_start").iterdir()) == [path.name]
    assert not (tmp_path / "ignored").exists()

    trained, _ = load_policy(str(path), device="cpu")
    base, _ = policy
    name = "model.layers.0.self_attn.q_proj.weight"
    moved = (trained.state_dict()[name] - base.state_dict()[name].cpu()).abs().max()
    assert 0 < moved < 1e-3  # one AdamW step of lr 1e-4 moves each weight by about 1e-4
