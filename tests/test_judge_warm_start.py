"""The judge warm start (issue 19): its groups are labelled by the verifier and hold a warm-started policy's
failed rollouts; its readings put every trajectory at every position; training moves the forced-position
scores toward the labels and survives a Ctrl+C; a prompt the judge cuts is trained on and counted, one it
rejects is skipped and counted; a groups cache with an unfinished last line is read; the judge_quality
benchmark's tiny size prints intervals, and a bad --judge stops it before any model loads.
The model is the real embedded one, at tiny sizes."""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from course_lib.envs import load_tasks, make_env
from course_lib.judge.backends import LocalJudge
from course_lib.judge.quality import bootstrap_interval, pairwise_agreement
from course_lib.judge.scoring import score_group
from course_lib.judge.warm_start import (
    HIGH_DIGIT,
    LOW_DIGIT,
    JudgeWarmStartSizes,
    as_trajectories,
    judge_readings,
    judge_sft_step,
    labelled_groups,
    task_reference,
    train_judge,
    training_dtype,
)
from course_lib.rollout import expert_rollout
from course_lib.trajectory import Trajectory

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "judge_quality.py"
SHORT_RUBRIC = "A trajectory whose final answer is correct scores high; a wrong final answer scores low."


def replayed_reward(env_name: str, task: dict, messages: list[dict[str, str]]) -> float:
    """The verifier's reward for a trajectory, found again by replaying its actions in a fresh environment."""
    env = make_env(env_name)
    try:
        env.reset(task)
        for m in messages[2:]:
            if m["role"] == "assistant":
                result = env.step(m["content"])
                if result.done:
                    return result.reward
        return float(env.score())
    finally:
        env.close()


def test_readings_put_each_trajectory_at_each_position_and_target_the_verifier():
    prefix = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    group = [Trajectory("t", "g", f"g#{k}",
                        prefix + [{"role": "assistant", "content": f"<answer>{a}</answer>"}], [], reward=r)
             for k, (a, r) in enumerate([("A", 1.0), ("B", 0.0), ("C", 0.0)])]
    readings = judge_readings([group], orders=3, seed=4)
    assert len(readings) == 3
    positions = {i: sorted(r.ids.index(i) for r in readings) for i in readings[0].ids}
    assert all(p == [0, 1, 2] for p in positions.values())  # every id once at every position
    for r in readings:  # each id's target digit is the verifier's label, whatever its position
        text = r.messages[1]["content"]
        answer_of = {i: text.split(f'<trajectory id="{i}">')[1].split("<answer>")[1][0] for i in r.ids}
        assert [HIGH_DIGIT if answer_of[i] == "A" else LOW_DIGIT for i in r.ids] == r.digits


def test_bootstrap_interval_brackets_the_ratio_and_is_a_point_when_groups_agree():
    assert bootstrap_interval([3, 3, 3], [4, 4, 4]) == (0.75, 0.75)
    low, high = bootstrap_interval([4, 0, 4, 2, 3, 1], [4] * 6)
    assert low < 14 / 24 < high and 0 <= low and high <= 1
    assert all(math.isnan(x) for x in bootstrap_interval([], []))


def test_groups_are_verifier_labelled_and_hold_failed_warm_start_rollouts(tmp_path):
    """A one-step search_qa warm start rolls out; every group is the expert (reward 1) and rollouts of that
    policy, at least one failed; every reward is what the verifier gives the replayed actions; a second call
    reads the cache and loads no policy (a name that does not exist would fail to load)."""
    from course_lib.sft import warm_start

    policy = warm_start("search_qa", n_demos=4, steps=1, batch_size=4, lr=1e-4, task_filter={"hops": 1},
                        run_dir=tmp_path / "policy", progress=False)
    cache = tmp_path / "groups.jsonl"
    groups = labelled_groups("search_qa", 2, policy=str(policy), group_size=3, samples=2, max_new_tokens=24,
                             chunk=2, max_tasks=8, cache=cache, progress=False)
    assert len(groups) == 2
    tasks = {t["id"]: t for t in load_tasks("search_qa", "train")}
    for group in groups:
        sources = [t.info["source"] for t in group]
        assert sources[0] == "expert" and group[0].reward == 1.0 and set(sources[1:]) == {"policy"}
        assert any(t.reward == 0.0 for t in group[1:]), "no failed rollout of the policy in the group"
        assert len({t.task_id for t in group}) == 1
        for t in group:
            assert t.reward == replayed_reward("search_qa", tasks[t.task_id], t.messages)
    again = labelled_groups("search_qa", 2, policy=str(tmp_path / "no-such-policy"), group_size=3, samples=2,
                            chunk=2, max_tasks=8, cache=cache, progress=False)
    assert [[t.messages for t in g] for g in again] == [[t.messages for t in g] for g in groups]


def _record(task_id: str, answers: list[tuple[str, float, str]]) -> dict:
    """A cached group record (as labelled_groups writes it) of one-turn trajectories."""
    prefix = [{"role": "system", "content": "s"}, {"role": "user", "content": "Where does Ada live?"}]
    return {"env": "lookup", "task_id": task_id,
            "trajectories": [{"messages": prefix + [{"role": "assistant",
                                                     "content": f"<answer>{a}</answer>"}],
                              "reward": r, "source": source, "truncated": False}
                             for a, r, source in answers]}


def test_a_record_of_a_real_task_carries_its_reference_and_its_readings_show_it():
    """A cached group of a real lookup task gets the task's answer as its reference (`task_reference`);
    each reading shows it once, before the trajectories, and its score lines recall each trajectory's last
    action."""
    task = load_tasks("lookup", "test")[0]
    group = as_trajectories(_record(task["id"], [(task["answer"], 1.0, "expert"), ("Rome", 0.0, "policy")]))
    assert [t.info["reference"] for t in group] == [str(task["answer"])] * 2
    # no answer: no reference
    assert task_reference("gridworld", load_tasks("gridworld", "test")[0]["id"]) is None
    for r in judge_readings([group], orders=2):
        text = r.messages[1]["content"]
        assert text.count(f"(a correct final answer): {task['answer']}") == 1
        assert text.index("correct final") < text.index("<trajectory")
        recalled = {i: line.split("last: <answer>")[1].split("</answer>")[0]
                    for i, line in zip(r.ids, r.lines)}
        assert sorted(recalled.values()) == sorted([str(task["answer"]), "Rome"])
        assert [HIGH_DIGIT if recalled[i] == str(task["answer"]) else LOW_DIGIT for i in r.ids] == r.digits


def test_an_unfinished_last_line_of_the_groups_cache_is_dropped_not_fatal(tmp_path):
    """A run killed while writing a chunk leaves half a JSON line: the next call reads the chunks before it
    (no policy loads: the name does not exist) and removes the half line, so the next append starts clean."""
    cache = tmp_path / "groups.jsonl"
    chunk = {"start": 0, "groups": [_record("t1", [("Oslo", 1.0, "expert"), ("Rome", 0.0, "policy")])]}
    cache.write_text(json.dumps(chunk) + "\n" + json.dumps({"start": 2, "groups": []})[:9])
    groups = labelled_groups("lookup", 1, policy=str(tmp_path / "no-such-policy"), chunk=2, cache=cache,
                             progress=False)
    assert [[t.reward for t in g] for g in groups] == [[1.0, 0.0]]
    assert [t.info for t in groups[0]] == [{"source": "expert", "truncated": False},
                                           {"source": "policy", "truncated": False}]
    assert cache.read_text() == json.dumps(chunk) + "\n"


def test_training_cuts_prompts_as_the_judge_scores_and_skips_a_rejected_one():
    """The training prompt limit is LocalJudge's own default. One step on three readings with a 400-token
    limit: a short one, one whose trajectories are cut (trained on, counted) and one whose rubric alone is
    over the limit (rejected: skipped, counted); the update is still taken, on the two readings left."""
    default = inspect.signature(LocalJudge).parameters["max_prompt_tokens"].default
    assert inspect.signature(train_judge).parameters["max_prompt_tokens"].default == default
    judge = LocalJudge(dtype=training_dtype(on_cpu=True), max_prompt_tokens=400)
    short, long = ([Trajectory("t", "g", f"g#{k}",
                               [{"role": "system", "content": "s"},
                                {"role": "user", "content": "Where does Ada live?"},
                                {"role": "assistant", "content": f"<answer>{a}</answer>"}],
                               [], reward=r) for k, (a, r) in enumerate([(city, 1.0), ("Rome", 0.0)])]
                   for city in ("Oslo", "Oslo " + "and then some more words " * 80))
    readings = (judge_readings([short], orders=1, rubric=SHORT_RUBRIC)
                + judge_readings([long], orders=1, rubric=SHORT_RUBRIC)
                + judge_readings([short], orders=1, rubric=SHORT_RUBRIC + " Be careful." * 150))
    assert [len(judge._prompt_ids(r.messages)) > 400 for r in readings] == [False, True, True]
    weight = next(judge.model.parameters()).detach().clone()
    optimizer = torch.optim.AdamW(judge.model.parameters(), lr=1e-5)
    row = judge_sft_step(judge, optimizer, readings)
    assert (row["cut_readings"], row["skipped_readings"], row["skipped"]) == (1, 1, False)
    assert math.isfinite(row["loss"]) and not torch.equal(weight, next(judge.model.parameters()))


def _answer_groups(tokenizer) -> list[list[Trajectory]]:
    """Two lookup groups: the expert, the expert's episode ending in another agent's city, and a guess of that
    city without a lookup; rewards from the verifier (1, 0, 0)."""
    tasks = load_tasks("lookup", "train")[:2]
    groups = []
    for task, expert in zip(tasks, expert_rollout(tokenizer, "lookup", tasks)):
        wrong = next(c for c in task["directory"].values() if c != task["answer"])
        swapped, guess = copy.deepcopy(expert), copy.deepcopy(expert)
        swapped.messages[-1]["content"] = f"<answer>{wrong}</answer>"
        guess.messages = guess.messages[:2] + [{"role": "assistant", "content": f"<answer>{wrong}</answer>"}]
        for t in (expert, swapped, guess):
            t.reward = replayed_reward("lookup", task, t.messages)
        assert [t.reward for t in (expert, swapped, guess)] == [1.0, 0.0, 0.0]
        groups.append([expert, swapped, guess])
    return groups


def _margin(judge: LocalJudge, groups: list[list[Trajectory]]) -> tuple[float, float]:
    """(mean score of successes − mean score of failures, pairwise accuracy), through score_group itself."""
    gaps, agree, pairs = [], 0.0, 0
    for group in groups:
        judged = score_group(group, SHORT_RUBRIC, judge=judge, use_cache=False, answer="forced")
        scores = [s.score for s in judged]
        rewards = [t.reward for t in group]
        gaps.append(scores[0] - sum(scores[1:]) / 2)
        a, p = pairwise_agreement(scores, rewards)
        agree, pairs = agree + a, pairs + p
    return sum(gaps) / len(gaps), agree / pairs


def test_training_moves_forced_scores_toward_the_labels_and_resumes_after_ctrl_c(tmp_path, monkeypatch):
    """Two steps on two groups (read in two orders each): a Ctrl+C in the second step keeps the first as a
    checkpoint, a second call resumes and finishes, and the judge loaded by path scores the successes
    further above the failures than the base judge did, ranking every pair right."""
    import course_lib.judge.warm_start as jws

    base = LocalJudge(dtype=training_dtype(on_cpu=True))
    groups = _answer_groups(base.tokenizer)
    before, _ = _margin(base, groups)
    del base
    sizes = JudgeWarmStartSizes(groups_per_env=2, group_size=3, samples=0, epochs=1, orders=2, batch_size=2,
                                lr=5e-5)
    real_step, calls = jws.judge_sft_step, []

    def interrupted_second_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what a Ctrl+C between two updates does
        return real_step(*args, **kwargs)

    monkeypatch.setattr(jws, "judge_sft_step", interrupted_second_step)
    with pytest.raises(KeyboardInterrupt):
        train_judge(tmp_path, groups, sizes, rubric=SHORT_RUBRIC, save_every=100, progress=False)
    assert (tmp_path / "checkpoint" / "step.json").read_text() == '{"step": 1}'
    monkeypatch.setattr(jws, "judge_sft_step", real_step)
    path = train_judge(tmp_path, groups, sizes, rubric=SHORT_RUBRIC, save_every=100, progress=False)
    rows = [line for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line]
    assert [json.loads(r)["step"] for r in rows] == [1, 2] and not (tmp_path / "checkpoint").exists()
    after, accuracy = _margin(LocalJudge(str(path)), groups)
    assert after > before + 0.1, (before, after)
    assert accuracy == 1.0


def test_benchmark_tiny_size_prints_each_measure_with_its_interval(tmp_path, monkeypatch, capsys):
    """The benchmark end to end at its tiny size, on an environment never trained on, with the base model
    standing in for both the rolling-out policy and the warm-started judge (so no warm start is trained)."""
    monkeypatch.setenv("COURSE_FAST", "1")
    monkeypatch.setenv("COURSE_RUNS", str(tmp_path / "runs"))
    module = _benchmark_module(monkeypatch)
    rows = module.main(["--envs", "", "--held-out", "lookup", "--policy", "smollm2-135m",
                        "--judge", "smollm2-135m", "--group-size", "2", "--max-new-tokens", "24",
                        "--out", str(tmp_path / "out.json")])
    printed = capsys.readouterr().out
    assert "pairwise accuracy" in printed and "Kendall tau-b" in printed and "failure rate" in printed
    assert "policy-only acc." in printed and "have a turn cut at 24 tokens" in printed
    assert [(r["env"], r["tasks"], r["judge_label"]) for r in rows] == [("lookup", "all", "base"),
                                                                         ("lookup", "all", "warm-started")]
    for r in rows:
        # the expert and a failed rollout
        assert r["groups"] == 2 and r["pairs"] == 2 and r["mixed_groups"] == 2
        # one policy rollout per group
        assert r["policy_pairs"] == 0 and math.isnan(r["policy_pairwise_accuracy"])
        low, high = r["pairwise_accuracy_ci"]
        assert low <= r["pairwise_accuracy"] <= high
        assert r["failure_rate_ci"][0] <= r["failure_rate"] <= r["failure_rate_ci"][1]
        assert f"{r['pairwise_accuracy']:.2f} [{low:.2f}, {high:.2f}]" in printed
    assert json.loads((tmp_path / "out.json").read_text())[1]["judge_label"] == "warm-started"


def _benchmark_module(monkeypatch):
    spec = importlib.util.spec_from_file_location("judge_quality_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "judge_quality_benchmark", module)
    spec.loader.exec_module(module)
    return module


def test_benchmark_stops_before_any_model_loads_on_a_bad_judge_or_a_trained_held_out_env(tmp_path,
                                                                                         monkeypatch):
    """A --judge folder without config.json, and a judge whose judge_warm_start.json lists the --held-out env,
    each stop the benchmark with a message before a group is built or a model is loaded."""
    import course_lib.models

    module = _benchmark_module(monkeypatch)

    def no_load(*args, **kwargs):
        raise AssertionError("loaded a model or built groups before checking --judge")

    monkeypatch.setattr(course_lib.models, "load_policy", no_load)
    monkeypatch.setattr(module, "labelled_groups", no_load)
    with pytest.raises(SystemExit, match="config.json does not exist"):
        module.main(["--judge", str(tmp_path / "missing"), "--held-out", "lookup"])
    (tmp_path / "judge").mkdir()
    (tmp_path / "judge" / "config.json").write_text("{}")
    (tmp_path / "judge" / "judge_warm_start.json").write_text(json.dumps({"envs": ["search_qa", "lookup"]}))
    with pytest.raises(SystemExit, match="the judge trained on it"):
        module.main(["--judge", str(tmp_path / "judge"), "--envs", "search_qa", "--held-out", "lookup"])
