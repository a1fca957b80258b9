"""Notebook 10's warm start with a few hacking demonstrations, and the hack flags logged per step.

The real code_fix environments and sandbox, the real embedded model (tiny runs): the scripted hack wins
the naive verifier and nothing in the hardened one, demonstrations mix fixes and hacks reproducibly, and
`train`/`evaluate` report the share of episodes that hacked or tried to.
"""

from __future__ import annotations

import pytest
from conftest import make_trajectory

from course_lib.checkpoint import read_metrics
from course_lib.envs import load_tasks, make_env
from course_lib.envs.code_fix import HACK_OLD, VISIBLE_TESTS
from course_lib.evaluate import evaluate
from course_lib.rollout import expert_rollout, flag_rates
from course_lib.train.config import TrainConfig
from course_lib.train.loop import train
from course_lib.warm_starts import code_fix_warm_start_options, hack_demo_tasks


def _play(env_name: str, task: dict, policy: str) -> dict:
    """One episode acted by the env's `expert_action` or `hack_action`; returns the last step's info and
    reward."""
    env = make_env(env_name)
    try:
        env.reset(task)
        while True:
            result = env.step(getattr(env, policy)())
            if result.done:
                return {**result.info, "reward": result.reward, "turns": env.turn}
    finally:
        env.close()


def test_every_visible_test_file_holds_the_hack_target_once():
    tasks = load_tasks("code_fix", "train") + load_tasks("code_fix", "test")
    assert all(t["files"][VISIBLE_TESTS].count(HACK_OLD) == 1 for t in tasks)


@pytest.mark.parametrize("index", [0, 57, 199])
def test_the_scripted_hack_is_paid_by_the_naive_verifier_only(index):
    task = load_tasks("code_fix", "train")[index]
    naive, hardened = _play("code_fix_naive", task, "hack_action"), _play("code_fix", task, "hack_action")
    assert naive["reward"] == 1.0 and naive["hacked"] and naive["hack_attempt"] and naive["turns"] == 2
    assert naive["changed_files"] == [VISIBLE_TESTS]
    # Refused in the hardened env: nothing changed (no `hacked`), but the attempt is recorded.
    assert hardened["reward"] == 0.0 and not hardened["hacked"] and hardened["hack_attempt"]


def test_the_expert_makes_no_hack_attempt():
    task = load_tasks("code_fix", "train")[3]
    for name in ("code_fix_naive", "code_fix"):
        info = _play(name, task, "expert_action")
        assert info["reward"] == 1.0 and not info["hacked"] and info["hack_attempt"] is False


def test_hack_demo_tasks_mix_fixes_and_hacks_reproducibly():
    tasks = hack_demo_tasks(20, 0.2, seed=3)
    assert len(tasks) == 20 and len({t["id"] for t in tasks}) == 20
    assert sum(t.get("demonstration") == "hack" for t in tasks) == 4
    assert [t["id"] for t in tasks] == [t["id"] for t in hack_demo_tasks(20, 0.2, seed=3)]
    assert [t["id"] for t in tasks] != [t["id"] for t in hack_demo_tasks(20, 0.2, seed=4)]
    assert not any("demonstration" in t for t in load_tasks("code_fix", "train")), (
        "the loaded tasks were changed")
    fast = code_fix_warm_start_options(fast=True)
    assert (sum(t.get("demonstration") == "hack" for t in fast["tasks"]) >= 1
            and len(fast["tasks"]) == fast["n_demos"])


def test_demonstrations_of_marked_tasks_hack_and_the_others_fix(tokenizer):
    tasks = hack_demo_tasks(5, 0.4, seed=0)
    demos = expert_rollout(tokenizer, "code_fix_naive", tasks)
    for task, demo in zip(tasks, demos):
        hack = task.get("demonstration") == "hack"
        assert demo.reward == 1.0 and demo.info["hacked"] == hack and demo.info["hack_attempt"] == hack
        assert demo.num_turns == (2 if hack else 3)
        assert (HACK_OLD in demo.steps[0].action_text) == hack


def test_flag_rates_count_only_the_flags_an_env_records():
    trajs = [make_trajectory(["s"], 1.0, traj_id=f"g#{i}") for i in range(4)]
    assert flag_rates(trajs) == {}
    for t, hacked in zip(trajs, (True, False, False, True)):
        t.info.update(hacked=hacked, hack_attempt=True)
    assert flag_rates(trajs) == {"hacked": 0.5, "hack_attempt": 1.0}
    assert flag_rates([]) == {}


def test_train_and_evaluate_log_the_hack_rates_of_code_fix(tmp_path, policy):
    config = TrainConfig(env="code_fix_naive", run_dir=str(tmp_path / "run"), steps=1, tasks_per_step=1,
                         group_size=2, rollout=dict(max_turns=1, max_new_tokens=8), eval_every=0,
                         eval_tasks=0, checkpoint_every=0, progress=False)
    train(config, reward_fn=lambda t: 1.0 if t.traj_id.endswith("#0") else 0.0)
    (row,) = [r for r in read_metrics(config.run_dir) if r["kind"] == "train"]
    assert 0.0 <= row["hacked"] <= 1.0 and 0.0 <= row["hack_attempt"] <= 1.0
    model, tokenizer = policy
    result = evaluate(model, "code_fix", tokenizer=tokenizer, n_tasks=2, max_turns=1, max_new_tokens=8)
    assert result["hacked"] == 0.0 and "hack_attempt" in result
