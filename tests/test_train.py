"""Training: the SFT warm start, one tiny RL run per credit method, resume after SIGKILL, the NaN guard,
and skipping of groups whose rewards are all equal. The embedded model is real; sizes are tiny."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import TEST_DEVICE, make_trajectory

from course_lib import wilson_interval
from course_lib.__main__ import _add_config_options, _config_from
from course_lib.batching import collate, loss_scale, pack_by_length, use_bf16
from course_lib.checkpoint import find_checkpoint, read_metrics, save_checkpoint
from course_lib.envs import load_tasks
from course_lib.envs.bwrap import bwrap_available
from course_lib.losses import sft_loss
from course_lib.models import load_policy
from course_lib.rollout import expert_rollout
from course_lib.sft import sft_step
from course_lib.train.batch import make_batch
from course_lib.train.config import TrainConfig
from course_lib.train.loop import train
from course_lib.train.update import update
from course_lib.trajectory import Trajectory, TrajectoryGroup
from course_lib.value_head import ValueHead, state_positions

REPO = Path(__file__).resolve().parents[1]


def _tiny(tmp_path: Path, rollout: dict | None = None, optim: dict | None = None, **overrides) -> TrainConfig:
    base = dict(env="lookup", run_dir=str(tmp_path / "run"), steps=1, tasks_per_step=2, group_size=2,
                eval_every=0, eval_tasks=0, checkpoint_every=0, progress=False)
    rollout = {"max_turns": 2, "max_new_tokens": 12, **(rollout or {})}
    return TrainConfig(**{**base, **overrides}, rollout=rollout, optim=optim or {})


def _first_wins(trajectory) -> float:
    """A reward with signal in every group: the first rollout of each group wins."""
    return 1.0 if trajectory.traj_id.endswith("#0") else 0.0


def _train_rows(run_dir) -> list[dict]:
    return [r for r in read_metrics(run_dir) if r["kind"] == "train"]


def test_wilson_interval_and_packing():
    low, high = wilson_interval(38, 40)
    assert 0.83 < low < 0.84 and 0.98 < high < 0.99
    assert wilson_interval(0, 10)[0] == 0.0
    batches = pack_by_length([100, 30, 95, 35, 90], token_budget=300)
    assert batches == [[0, 2, 4], [3, 1]]  # longest first, similar lengths together


def test_sft_step_reduces_masked_loss():
    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)  # a fresh copy: the update changes it
    demos = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:2])

    def masked_loss() -> float:
        batch = collate(demos)
        with torch.no_grad():
            batch = {k: v.to(model.device) if torch.is_tensor(v) else v for k, v in batch.items()}
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return sft_loss(logits, batch["input_ids"], batch["loss_mask"],
                        attention_mask=batch["attention_mask"])[0].item()

    before = masked_loss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(2):
        stats = sft_step(model, optimizer, demos, mask="assistant",  # the warm start's dtype on this device
                         autocast_dtype=torch.bfloat16 if use_bf16(None, model.device) else None)
    after = masked_loss()
    assert stats["tokens"] == sum(d.num_model_tokens for d in demos)  # only the model's tokens are trained on
    assert after < before - 0.1, (before, after)


def test_sft_step_micro_batches_give_the_full_batch_gradient():
    """Cutting the batch into micro-batches (to bound memory) must not change the update."""
    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    demos = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:3])
    assert len({len(d.token_ids) for d in demos}) > 1  # rows of different lengths: the weighting matters
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the step leaves the weights alone
    grads, losses = [], []
    for budget in (10**9, 1):  # one micro-batch, then one row per micro-batch
        stats = sft_step(model, optimizer, demos, mask="assistant", token_budget=budget, max_grad_norm=1e9)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        losses.append(stats["loss"])
    assert abs(losses[0] - losses[1]) < 1e-5
    relative = float((grads[0] - grads[1]).norm() / grads[0].norm())
    print(f"relative gradient difference: {relative:.2e}")
    # measured 5.6e-7 on CPU, 2.4e-5 on an H200 (fp32; other kernels per shape)
    assert relative < 1e-4, relative


def test_fp16_autocast_gradients_are_loss_scaled_so_small_ones_survive():
    """The T4 path (fp16 autocast), on the tests' device: with the loss scale, the gradient matches fp32's and
    almost no entry that fp32 finds non-zero is flushed to zero (13.7% were, unscaled)."""
    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    demos = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:2])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    grads = {}
    for dtype in (None, torch.float16):
        sft_step(model, optimizer, demos, mask="assistant", autocast_dtype=dtype, max_grad_norm=1e9)
        grads[dtype] = torch.cat([p.grad.flatten() for p in model.parameters()])
    ref, half = grads[None], grads[torch.float16]
    flushed = float(((half == 0) & (ref != 0)).float().mean())
    relative = float((half - ref).norm() / ref.norm())
    assert flushed < 0.01 and relative < 0.02, (flushed, relative)
    assert loss_scale(torch.bfloat16) == loss_scale(None) == 1


def _update_grads(model, demos, advantages, autocast_dtype=None, **config) -> tuple[torch.Tensor, float]:
    """The gradient that one `update` leaves in the model (SGD at lr 0: the weights stay), and its loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    config = TrainConfig(optim=dict(max_grad_norm=1e9, **config))
    out = update(model, None, optimizer, demos, advantages, config, 0, device=model.device,
                 autocast_dtype=autocast_dtype)
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), out["loss"]


def _random_advantages(demos) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(len(d.token_ids), generator=g) * torch.tensor(d.loss_mask, dtype=torch.float32)
            for d in demos]


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
def test_update_micro_batches_give_the_full_batch_gradient(loss_type):
    """The RL update cut into micro-batches of unequal sizes ([2 rows], [1 row]) gives the gradient and loss
    of the whole batch: each micro-batch's loss is weighted once by its share, for every normalisation."""
    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    demos = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:3])
    budget = 2 * max(len(d.token_ids) for d in demos)
    assert [len(rows) for rows in pack_by_length([len(d.token_ids) for d in demos], budget)] == [2, 1]
    advantages = _random_advantages(demos)
    whole, loss_whole = _update_grads(model, demos, advantages, loss_type=loss_type, token_budget=10**9)
    parts, loss_parts = _update_grads(model, demos, advantages, loss_type=loss_type, token_budget=budget)
    assert abs(loss_whole - loss_parts) < 1e-6, (loss_whole, loss_parts)
    relative = float((whole - parts).norm() / whole.norm())
    assert relative < 1e-4, relative


def test_fp16_autocast_update_is_loss_scaled_too():
    """The RL update under fp16 autocast: its gradient matches fp32's, few entries flushed to zero."""
    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    demos = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:2])
    advantages = _random_advantages(demos)
    ref, _ = _update_grads(model, demos, advantages)
    half, _ = _update_grads(model, demos, advantages, autocast_dtype=torch.float16)
    flushed = float(((half == 0) & (ref != 0)).float().mean())
    relative = float((half - ref).norm() / ref.norm())
    print(f"fp16 update: {100 * flushed:.2f}% flushed, relative error {relative:.2e}")
    assert flushed < 0.01 and relative < 0.02, (flushed, relative)


def test_critic_value_loss_does_not_depend_on_the_packing():
    """The value loss is the mean over all the batch's turns, however the micro-batches cut it, also when
    trajectories have different numbers of turns (one-hop and two-hop questions)."""
    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    tasks = load_tasks("search_qa", "train")
    tasks = [next(t for t in tasks if t["hops"] == 1), *[t for t in tasks if t["hops"] == 2][:2]]
    demos = expert_rollout(tokenizer, "search_qa", tasks)
    assert len({d.num_turns for d in demos}) > 1
    torch.manual_seed(0)
    head = ValueHead(model.config.hidden_size).to(model.device)
    torch.nn.init.normal_(head.linear.weight, std=0.01)
    old_values = [torch.zeros(d.num_turns) for d in demos]
    returns = [torch.rand(d.num_turns) for d in demos]
    zero = [torch.zeros(len(d.token_ids)) for d in demos]  # no policy gradient: the value loss alone
    budget = 2 * max(len(d.token_ids) for d in demos)
    assert len(pack_by_length([len(d.token_ids) for d in demos], budget)) == 2
    results = []
    for token_budget in (10**9, budget):
        params = list(model.parameters()) + list(head.parameters())
        optimizer = torch.optim.SGD(params, lr=0.0)
        config = TrainConfig(optim=dict(max_grad_norm=1e9, token_budget=token_budget),
                             critic=dict(trains_backbone=True))
        out = update(model, head, optimizer, demos, zero, config,
                     0, device=model.device, autocast_dtype=None, old_values=old_values, returns=returns)
        grads = torch.cat([p.grad.flatten() for p in params if p.grad is not None])
        results.append((grads, out["value_loss"]))
    (whole, loss_whole), (parts, loss_parts) = results
    assert abs(loss_whole - loss_parts) < 1e-6, (loss_whole, loss_parts)
    assert float((whole - parts).norm() / whole.norm()) < 1e-4
    # By default the value loss trains the head only: the policy's own weights get no gradient from it.
    optimizer = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.0)
    update(model, head, optimizer, demos, zero, TrainConfig(optim=dict(max_grad_norm=1e9)), 0,
           device=model.device, autocast_dtype=None, old_values=old_values, returns=returns)
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    assert head.linear.weight.grad is not None and head.linear.weight.grad.abs().sum() > 0


def test_value_head_reads_each_turn_before_its_action():
    """V(s_t) is read where the model has seen the context of turn t and none of its action: the position
    just before the turn's first sampled token (read after the action, the head would learn Q(s_t, a_t))."""
    _, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    task = next(t for t in load_tasks("search_qa", "train") if t["hops"] == 2)
    (demo,) = expert_rollout(tokenizer, "search_qa", [task])
    positions = state_positions(demo)
    assert len(positions) == demo.num_turns >= 3
    for turn, p in enumerate(positions):
        assert demo.loss_mask[p] == 0 and demo.loss_mask[p + 1] == 1 and demo.turn_index[p + 1] == turn
        assert turn not in demo.turn_index[: p + 1]  # nothing of this turn's action is visible at p


def _path(j: int, anchors: list[str]) -> Trajectory:
    """A successful trajectory of group g through the given anchor states, two tokens per action."""
    return make_trajectory(anchors, 1.0, traj_id=f"g@0#{j}", group_id="g@0", task_id="g")


def test_equal_reward_group_is_kept_when_gigpo_still_separates_its_members():
    """Both rollouts succeed, one by a shorter path through the shared state B: outcome and turn credit skip
    the group (no outcome signal), GiGPO's discounted step advantages still learn from it (kept)."""
    group = TrajectoryGroup("g", "g@0", [_path(0, ["A", "B"]), _path(1, ["A", "C", "B", "D"])])
    for credit, kept in (("outcome", 0), ("turn", 0), ("gigpo", 1)):
        batch = make_batch([group], [], TrainConfig(credit=credit))
        assert len(batch.trajectories) == len(batch.advantages) == 2 * kept, credit
        assert batch.skipped["no_signal"] == ([] if kept else ["g@0"]), credit


@pytest.mark.parametrize("credit", ["outcome", "gigpo", "turn"])
def test_token_advantages_are_zero_on_every_token_the_model_did_not_sample(credit):
    group = TrajectoryGroup("g", "g@0", [_path(0, ["A", "B"]), _path(1, ["A", "C", "B", "D"])])
    group.trajectories[0].reward = group.trajectories[0].steps[-1].reward = 0.0  # mixed rewards: signal
    for t in group:  # each action followed by two observation tokens of its turn (mask 0, turn index k)
        t.token_ids, t.loss_mask, t.logprobs, t.turn_index = [1, 2], [0, 0], [0.0, 0.0], [-1, -1]
        for k in range(t.num_turns):
            t.token_ids += [5, 6, 7, 8]
            t.loss_mask += [1, 1, 0, 0]
            t.logprobs += [-1.0, -1.0, 0.0, 0.0]
            t.turn_index += [k] * 4
    batch = make_batch([group], [], TrainConfig(credit=credit))
    assert batch.trajectories == list(group)
    for t, a in zip(batch.trajectories, batch.advantages):
        mask = torch.tensor(t.loss_mask, dtype=torch.bool)
        assert not a[~mask].any() and a[mask].abs().sum() > 0


def _ctrl_c_once_at(at_step: int):
    """A loss hook that sends this process SIGINT (what Ctrl+C sends) once, in step `at_step`'s update."""
    sent = []

    def ctrl_c(step, loss):
        if step == at_step and not sent:
            sent.append(step)
            os.kill(os.getpid(), signal.SIGINT)
        return loss

    return ctrl_c


def test_ctrl_c_during_an_update_saves_the_finished_step(tmp_path):
    """SIGINT (what Ctrl+C sends) in the middle of step 2's update, between its two PPO epochs: the update
    finishes, step 2 is logged and checkpointed, and resuming runs step 3 only."""
    ctrl_c = _ctrl_c_once_at(2)
    config = _tiny(tmp_path, steps=3, tasks_per_step=1, rollout=dict(max_turns=1, max_new_tokens=4),
                   optim=dict(ppo_epochs=2), checkpoint_every=1)
    result = train(config, reward_fn=_first_wins, loss_hook=ctrl_c)
    assert result["interrupted"] and result["step"] == 2
    assert json.loads((Path(config.run_dir) / "checkpoint" / "step.json").read_text())["step"] == 2
    result = train(config, reward_fn=_first_wins, loss_hook=ctrl_c)
    assert result["step"] == 3 and not result["interrupted"]
    assert [r["step"] for r in _train_rows(config.run_dir)] == [1, 2, 3]


def test_ctrl_c_in_the_last_update_still_evaluates_the_last_step_on_resume(tmp_path):
    """A Ctrl+C during the last step's update stops before that step's evaluation; train() again has no step
    left to run, but evaluates the last step (once: a third call adds nothing)."""
    ctrl_c = _ctrl_c_once_at(2)
    config = _tiny(tmp_path, steps=2, tasks_per_step=1, rollout=dict(max_turns=1, max_new_tokens=4),
                   eval_every=0, eval_tasks=1, checkpoint_every=0)
    assert train(config, reward_fn=_first_wins, loss_hook=ctrl_c)["interrupted"]
    evals = lambda: [r["step"] for r in read_metrics(config.run_dir) if r["kind"] == "eval"]  # noqa: E731
    assert evals() == []
    result = train(config, reward_fn=_first_wins, loss_hook=ctrl_c)
    assert result["step"] == 2 and result["eval"]["step"] == 2 and evals() == [2]
    train(config, reward_fn=_first_wins, loss_hook=ctrl_c)
    assert evals() == [2]


def test_a_checkpoint_that_cannot_be_written_says_why_and_keeps_the_previous_one(tmp_path, policy):
    """A write that fails half-way (here the file-size limit, as a full disk would) raises an OSError naming
    the free space, removes the partial folder and leaves the last good checkpoint in place."""
    model, tokenizer = policy
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    config, run_dir = _tiny(tmp_path), tmp_path / "run"
    save_checkpoint(run_dir, model, tokenizer, optimizer, None, 1, config.to_json())
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # a write past the limit fails with EFBIG
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (50 * 2**20, hard))  # the weights alone are 514 MB
    try:
        with pytest.raises(OSError,
                           match=r"could not write the checkpoint of step 2 .* GB are free .* untouched"):
            save_checkpoint(run_dir, model, tokenizer, optimizer, None, 2, config.to_json())
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert not (run_dir / ".checkpoint-tmp").exists()
    assert json.loads((find_checkpoint(run_dir) / "step.json").read_text())["step"] == 1


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap mounts the small disk")
def test_a_run_whose_checkpoint_cannot_fit_fails_before_its_first_step(tmp_path):
    """The run folder sits on a real 300 MB tmpfs (bubblewrap mounts it for the CLI process); a checkpoint of
    the 135M model needs about 1.6 GB, so the run stops before any rollout, with an error that says so."""
    small = tmp_path / "small"
    small.mkdir()
    run_dir = small / "run"
    cmd = ["bwrap", "--dev-bind", "/", "/", "--size", str(300 * 2**20), "--tmpfs", str(small), "--",
           sys.executable, "-m", "course_lib", "train", "--env", "lookup", "--steps", "1",
           "--tasks-per-step", "1", "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "8",
           "--eval-tasks", "0", "--progress", "false", "--run-dir", str(run_dir)]
    result = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, COURSE_THREADS="1"), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert re.search(r"has 0\.\d\d GB free, and a checkpoint of this run needs about 1\.\d\d GB "
                     r".* no step was run",
                     message), result.stderr[-2000:]


def test_cli_values_take_their_field_types():
    parser = argparse.ArgumentParser()
    _add_config_options(parser)
    config = _config_from(parser.parse_args(["--bf16-autocast", "False", "--progress", "false",
                                             "--steps", "4e1", "--lr", "1e-5", "--eps-high", "null",
                                             "--task-filter", '{"hops": 2}']))
    assert (config.optim.bf16_autocast, config.progress, config.steps) == (False, False, 40)
    assert config.optim.eps_high is None
    assert config.optim.lr == 1e-5 and config.task_filter == {"hops": 2}
    for bad in (["--steps", "2.5"], ["--progress", "maybe"]):
        with pytest.raises(SystemExit, match=bad[0]):
            _config_from(parser.parse_args(bad))


@pytest.mark.parametrize("argv, message", [
    (["eval", "--env", "bogus"], "environment 'bogus' does not exist"),
    (["eval", "--split", "dev"], "invalid choice: 'dev'"),
    (["eval", "--task-filter", "[1]"], "task_filter must be a dict"),
    (["eval", "--task-filter", '{"hop": 2}'],
     "no task matches task_filter {'hop': 2}; the tasks' fields are: "),
    (["eval", "--n-tasks", "-5"], "--n-tasks must be at least 1"),
    (["train", "--env", "search_qa", "--task-filter", '{"hops": "2"}'], "no task matches"),
    (["train", "--credit", "bogus"], "credit 'bogus' is not known"),
    (["sft", "--env", "nope"], "environment 'nope' does not exist"),
])
def test_cli_rejects_bad_input_before_loading_anything(argv, message, capsys, monkeypatch):
    import course_lib.__main__ as cli

    monkeypatch.setattr(cli, "load_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_sft_step_skips_a_non_finite_gradient_and_keeps_the_weights():
    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    demos = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:1])
    norm = model.get_decoder().norm.weight
    with torch.no_grad():
        # the final norm's output, hence the loss and every gradient, become non-finite
        norm[0] = float("inf")
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = sft_step(model, optimizer, demos, mask="assistant")
    assert stats["skipped"] and not math.isfinite(stats["grad_norm"])
    assert all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))


@pytest.mark.parametrize("credit", ["outcome", "gigpo", "turn", "critic"])
def test_one_rl_step_per_credit(tmp_path, credit):
    config = _tiny(tmp_path, credit=credit, optim=dict(ppo_epochs=2 if credit == "critic" else 1))
    result = train(config, reward_fn=_first_wins)
    assert result["step"] == 1 and not result["interrupted"]
    (row,) = _train_rows(config.run_dir)
    assert row["skipped_groups"] == 0 and row["nonfinite"] is False
    assert math.isfinite(row["loss"]) and row["train_tokens"] > 0 and 0 <= row["padding_fraction"] < 1
    for key in ("reward", "success", "entropy", "clip_fraction_region", "advantage_mean", "advantage_std",
                "tokens_per_s", "seconds_rollout", "seconds_update"):
        assert key in row, key
    if credit == "gigpo":
        assert sum(row["step_group_sizes"].values()) >= 1
    if credit == "critic":
        assert "value_loss" in row
    assert 0 < row["nonzero_advantage_tokens"] <= 1  # every group has a winner and a loser here


def test_all_equal_reward_groups_are_skipped(tmp_path):
    config = _tiny(tmp_path, rollout=dict(max_turns=1, max_new_tokens=8))
    train(config, reward_fn=lambda t: 0.5)
    (row,) = _train_rows(config.run_dir)
    assert row["equal_reward_groups"] == 2 and row["skipped_groups"] == 2 and row["skipped_update"]
    assert row["nonzero_advantage_tokens"] == 0.0  # nothing for the update to move


def test_nan_update_is_skipped_then_three_in_a_row_stop(tmp_path):
    def poison(step, loss):  # NaN at step 1 (skipped, the run goes on), then at 3, 4, 5 (three in a row)
        return loss * float("nan") if step in (1, 3, 4, 5) else loss

    config = _tiny(tmp_path, steps=8, tasks_per_step=1, rollout=dict(max_turns=1, max_new_tokens=4))
    with pytest.raises(RuntimeError, match="3 updates in a row had a NaN/inf"):
        train(config, reward_fn=_first_wins, loss_hook=poison)
    rows = _train_rows(config.run_dir)
    assert [r["nonfinite"] for r in rows] == [True, False, True, True, True]


def test_the_nan_count_survives_a_resume_and_a_late_epoch_is_reported(tmp_path):
    """NaN at steps 2 and 3, a stop and a resume, NaN at 4: three in a row across the resume stop the run.
    At step 5 of another run, only the second of two PPO epochs is poisoned: one optimizer step was taken."""
    calls = []

    def poison(step, loss):
        return loss * float("nan") if step in (2, 3, 4) else loss

    config = _tiny(tmp_path, steps=3, tasks_per_step=1, rollout=dict(max_turns=1, max_new_tokens=4),
                   checkpoint_every=1)
    # two in a row: the run goes on
    assert train(config, reward_fn=_first_wins, loss_hook=poison)["step"] == 3
    with pytest.raises(RuntimeError, match="3 updates in a row had a NaN/inf"):
        train(dataclasses.replace(config, steps=5), reward_fn=_first_wins, loss_hook=poison)
    assert [r["nonfinite"] for r in _train_rows(config.run_dir)] == [False, True, True, True]

    def late(step, loss):  # one micro-batch per epoch here: the second call is the second epoch
        calls.append(step)
        return loss * float("nan") if len(calls) == 2 else loss

    config = _tiny(tmp_path / "epochs", steps=1, tasks_per_step=1, optim=dict(ppo_epochs=2),
                   rollout=dict(max_turns=1, max_new_tokens=4))
    train(config, reward_fn=_first_wins, loss_hook=late)
    (row,) = _train_rows(config.run_dir)
    assert len(calls) == 2 and row["nonfinite"] and row["epochs_stepped"] == 1


def test_resuming_from_a_step_0_checkpoint_does_not_evaluate_step_0_again(tmp_path):
    """Ctrl+C during step 1 saves a checkpoint at step 0; the metrics keep step 0's evaluation. Resuming must
    not run and log it a second time."""
    config = _tiny(tmp_path, steps=0, eval_every=1, eval_tasks=2)
    train(config)  # evaluates step 0, trains nothing
    model, tokenizer = load_policy(config.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr)
    save_checkpoint(Path(config.run_dir), model, tokenizer, optimizer, None, 0, config.to_json())
    assert train(config)["eval"]["step"] == 0
    evals = [r for r in read_metrics(config.run_dir) if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0]


def test_resume_after_sigkill_loses_and_repeats_no_step(tmp_path):
    run_dir = tmp_path / "run"
    steps = 4
    cmd = [sys.executable, "-m", "course_lib", "train", "--env", "lookup", "--steps", str(steps),
           "--checkpoint-every", "1", "--tasks-per-step", "1", "--group-size", "2", "--max-turns", "1",
           "--max-new-tokens", "8", "--eval-tasks", "0", "--progress", "false", "--run-dir", str(run_dir)]
    env = dict(os.environ, COURSE_THREADS="1")
    step_file = run_dir / "checkpoint" / "step.json"
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        try:  # a save renames the folder away for a moment
            if json.loads(step_file.read_text())["step"] >= 1:
                break
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The kill may land between a save's two renames: find_checkpoint recovers the previous one, as
    # resuming does.
    killed_at = json.loads((find_checkpoint(run_dir) / "step.json").read_text())["step"]
    assert 1 <= killed_at < steps

    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"Resuming {run_dir} from step {killed_at}" in done.stdout
    assert json.loads(step_file.read_text())["step"] == steps
    assert [r["step"] for r in _train_rows(run_dir)] == list(range(1, steps + 1))  # no gap, no duplicate


# ------------------------------------------------------------------------------------------------------
# the layering of the training modules (issue 20): asserted on the import graph, lazy imports included
# ------------------------------------------------------------------------------------------------------


def test_the_command_line_takes_its_defaults_from_the_functions():
    import inspect

    import course_lib.__main__ as cli
    from course_lib.evaluate import evaluate
    from course_lib.sft import warm_start

    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    cli._add_signature_options(commands.add_parser("eval"), "eval")
    cli._add_signature_options(commands.add_parser("sft"), "sft")
    for command, fn in (("eval", evaluate), ("sft", warm_start)):
        args = parser.parse_args([command])
        for name, param in inspect.signature(fn).parameters.items():
            if param.default is not inspect.Parameter.empty and hasattr(args, name):
                assert getattr(args, name) == param.default, (command, name)
    values = cli._signature_values(parser.parse_args(["sft", "--steps", "4e1", "--lr", "1e-4"]), "sft")
    assert values["steps"] == 40
    formats = parser.parse_args(["sft", "--formats", '["ours", "tool_calling"]'])
    assert cli._signature_values(formats, "sft")["formats"] == ("ours", "tool_calling")
