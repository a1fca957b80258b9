"""Our environments inside TRL 1.16's GRPOTrainer: both adapters train for real, and TRL's loss mask
is ours (rollout_func) or zeroes exactly the tool results (environment_factory).

Tiny sizes: the lookup environment, the embedded SmolLM2-135M, 2 generations, 2 steps.
"""

from __future__ import annotations

import gc
import json

import pytest
import torch

from course_lib.envs import load_tasks, make_env
from course_lib.integrations.trl import (
    _runs,
    build_trainer,
    grpo_config,
    make_rollout_func,
    make_trl_environment_factory,
    task_dataset,
    tool_schemas,
    trajectory_completion,
    verifier_reward,
)
from course_lib.models import end_of_turn_id
from course_lib.rollout import expert_rollout, rollout

ENV = "lookup"


@pytest.fixture(scope="module")
def dataset():
    return task_dataset(ENV, "train", limit=4)


# ----- fast checks, no training ------------------------------------------------------------------------


def test_task_dataset_rows(dataset):
    assert dataset.column_names == ["prompt", "task_id", "task"]
    row = dataset[0]
    task = load_tasks(ENV, "train", 1)[0]
    env = make_env(ENV)
    assert row["prompt"] == [{"role": "system", "content": env.system_prompt()},
                             {"role": "user", "content": task["question"]}]
    assert json.loads(row["task"]) == task and row["task_id"] == task["id"]


def test_rollout_func_refuses_ambiguous_prompts(dataset):
    rows = dataset.to_list()
    twin = dict(rows[1], prompt=rows[0]["prompt"])
    with pytest.raises(ValueError, match="same prompt"):
        make_rollout_func(ENV, [rows[0], twin])


def test_rollout_dataset_prompts_name_one_task():
    full = task_dataset(ENV, "train")
    prompts = [json.dumps(p) for p in full["prompt"]]
    assert len(set(prompts)) == len(prompts)
    assert len(full) < len(load_tasks(ENV, "train"))  # lookup repeats some questions: those are left out
    make_rollout_func(ENV, full)  # accepts it


def test_runs_group_trl_duplicates():
    assert _runs(["a", "a", "b", "b", "b", "a"]) == [("a", 2), ("b", 3), ("a", 1)]


def test_environment_adapter_plays_our_environment(dataset):
    factory = make_trl_environment_factory(ENV)
    names = [s["function"]["name"] for s in tool_schemas(factory)]
    assert names == ["answer", "lookup"]
    env = factory()
    row = dataset[0]
    task = json.loads(row["task"])
    assert env.reset(**row) is None  # the question is already in the prompt
    assert env.lookup(name="Nobody").startswith("Error: no agent named")
    assert env.lookup(name=task["target"]) == f"Agent {task['target']} is stationed in {task['answer']}."
    assert env.get_reward() == 0.0  # no answer yet
    assert env.answer(answer=task["answer"]).endswith("The episode is over.")
    assert env.get_reward() == 1.0
    assert "episode is over" in env.lookup(name=task["target"])
    env.reset(**dataset[1])
    assert env.get_reward() == 0.0


def test_environment_adapter_removes_its_episode_directory():
    # TRL 1.16 pools the adapters and never closes them: closing is ours, `_close` so it is no tool.
    factory = make_trl_environment_factory("terminal")
    assert [s["function"]["name"] for s in tool_schemas(factory)] == ["answer", "run"]
    row = {"task": json.dumps(load_tasks("terminal", "test", 1)[0])}
    env = factory()
    env.reset(**row)
    workdir = env._env.workdir
    env._close()
    assert not workdir.exists()
    env = factory()
    env.reset(**row)
    workdir = env._env.workdir
    assert workdir.is_dir()
    del env
    gc.collect()
    assert not workdir.exists()


def test_completion_span_keeps_every_model_token(dataset):
    from transformers import AutoTokenizer

    from course_lib.models import embedded_checkpoint

    tok = AutoTokenizer.from_pretrained(embedded_checkpoint())
    for t in expert_rollout(tok, ENV, load_tasks(ENV, "train", 3)):
        start, end = trajectory_completion(t, end_of_turn_id(tok))
        assert sum(t.loss_mask[:start]) == 0 and sum(t.loss_mask[end:]) == 0
        assert sum(t.loss_mask[start:end]) == t.num_model_tokens
        assert t.token_ids[end - 1] == end_of_turn_id(tok)


def test_a_cut_last_turn_looks_truncated_to_trl(policy):
    # TRL 1.16 calls a completion truncated when its last id is not an end-of-sequence token.
    model, tok = policy
    eot = end_of_turn_id(tok)
    (group,) = rollout(model, tok, ENV, load_tasks(ENV, "train", 1), group_size=2, max_turns=1,
                       max_new_tokens=3, progress=False)
    for t in group.trajectories:
        assert t.steps[-1].truncated
        start, end = trajectory_completion(t, eot)
        assert sum(t.loss_mask[start:end]) == t.num_model_tokens == 3
        assert t.token_ids[end - 1] != eot and t.loss_mask[end - 1] == 1


def test_verifier_reward_passes_the_env_reward_through():
    assert verifier_reward(["p", "p"], ["c", "c"], env_reward=[1, 0]) == [1.0, 0.0]
    assert verifier_reward(["p"], ["c"]) == [None]


# ----- real TRL training -------------------------------------------------------------------------------


def _capture(trainer) -> tuple[list[dict], list[dict]]:
    """Record what TRL builds for each generation batch, and what each loss call receives."""
    generated, loss_inputs = [], []
    original_generate = trainer._generate_and_score_completions
    original_loss = trainer._compute_loss

    def generate_and_score(inputs):
        out = original_generate(inputs)
        generated.append({k: v for k, v in out.items() if isinstance(v, torch.Tensor)})
        return out

    def compute_loss(model, inputs):
        loss_inputs.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return original_loss(model, inputs)

    trainer._generate_and_score_completions = generate_and_score
    trainer._compute_loss = compute_loss
    return generated, loss_inputs


def test_rollout_func_trains_on_our_loss_mask(dataset, tmp_path):
    args = grpo_config(str(tmp_path), steps=2, num_generations=2, batch_size=2, max_completion_length=64,
                       max_turns=2)
    trainer, rollout_func = build_trainer(ENV, "rollout_func", args=args, max_turns=2, max_new_tokens=16,
                                          dataset=dataset)
    generated, loss_inputs = _capture(trainer)
    batches = []

    def recording(prompts, trainer):  # TRL calls trainer.rollout_func(prompts, trainer)
        out = rollout_func(prompts, trainer)
        batches.append(list(rollout_func.last_trajectories))
        return out

    trainer.rollout_func = recording
    trainer.train()
    assert trainer.state.global_step == 2
    assert len(generated) == len(batches) == 2 and len(loss_inputs) == 2
    eot = end_of_turn_id(trainer.processing_class)
    env_tokens = 0
    for out, trajectories in zip(generated, batches):
        trl_mask = (out["completion_mask"] * out["tool_mask"]).tolist()
        for row, t in enumerate(trajectories):
            start, end = trajectory_completion(t, eot)
            n = end - start
            assert out["completion_ids"][row, :n].tolist() == t.token_ids[start:end]
            assert trl_mask[row][:n] == t.loss_mask[start:end]  # TRL trains exactly on our model tokens
            assert not any(trl_mask[row][n:])
            assert sum(t.loss_mask) == sum(trl_mask[row])
            env_tokens += n - sum(t.loss_mask[start:end])
    assert env_tokens > 0, "no observation inside a completion: the mask check did not test anything"
    for inputs in loss_inputs:  # the loss sees the same mask (rows shuffled)
        mask = inputs["completion_mask"] * inputs["tool_mask"]
        assert mask.sum() > 0
    rewards = [r["reward"] for r in trainer.state.log_history if "reward" in r]
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)


def test_environment_factory_masks_exactly_the_tool_results(dataset, tmp_path):
    args = grpo_config(str(tmp_path), steps=2, num_generations=2, batch_size=2, max_completion_length=80,
                       max_turns=2)
    ds = task_dataset(ENV, "train", limit=4, for_tool_calling=True)
    trainer, factory = build_trainer(ENV, "environment_factory", args=args, max_turns=2, dataset=ds)
    assert sorted(t.__name__ for t in trainer._env_tools[None]) == ["answer", "lookup"]
    tok = trainer.processing_class
    # The base model never calls a tool on its own: script its first turn (the expert's lookup call,
    # in the chat template's tool-call format); every later turn is sampled from the model.
    original_turn = trainer._generate_single_turn
    scripted = []

    def first_turn_scripted(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if num_generations == 1:  # the tool loop's follow-up turns
            return original_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        ids = []
        for env in trainer.environments:
            arguments = json.dumps({"name": "lookup", "arguments": {"name": env._env.task["target"]}})
            call = f"<tool_call>\n{arguments}\n</tool_call>"
            ids.append(tok(call, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
        scripted.append([(list(i), e._env.task) for i, e in zip(ids, trainer.environments)])
        return ids, None

    trainer._generate_single_turn = first_turn_scripted
    generated, _ = _capture(trainer)
    trainer.train()
    assert trainer.state.global_step == 2 and len(generated) == 2
    for out, rows in zip(generated, scripted):
        for row, (call_ids, task) in enumerate(rows):
            ids = out["completion_ids"][row].tolist()
            mask = (out["completion_mask"][row] * out["tool_mask"][row]).tolist()
            k = len(call_ids)
            assert ids[:k] == call_ids and all(mask[:k])  # the model's tool call: trained on
            zeros = k
            while zeros < len(mask) and mask[zeros] == 0 and out["completion_mask"][row, zeros]:
                zeros += 1
            tool_text = tok.decode(ids[k:zeros])
            observation = f"Agent {task['target']} is stationed in {task['answer']}."
            # exactly the template's tool-result block: our observation and the framing around it
            assert tool_text == (f"\n<|im_start|>user\n<tool_response>\n{observation}\n</tool_response>"
                                 "<|im_end|>\n<|im_start|>assistant\n")
            length = int(out["completion_mask"][row].sum())
            assert zeros < length and all(mask[zeros:length])  # the model's next turn: trained on again
    rewards = [r["reward"] for r in trainer.state.log_history if "reward" in r]
    assert len(rewards) == 2
