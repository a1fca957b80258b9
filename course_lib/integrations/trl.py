"""Our environments and rewards inside TRL's GRPOTrainer (TRL 1.16): the way to scale out.

Two adapters, two ways of letting TRL run a multi-turn episode:

* ``rollout_func`` (:func:`make_rollout_func`): TRL hands us the prompts of a generation batch and
  our own batched rollout engine (`course_lib.rollout.rollout`) plays the episodes with TRL's model.
  We return the prompt ids, the completion ids (everything after the prompt: actions *and*
  observations, token-in/token-out), the sampling log-probs, and ``env_mask`` = our ``loss_mask`` on
  the completion. TRL multiplies its completion mask by ``env_mask`` in the loss, so environment
  tokens stay in the context and get no gradient, exactly as in our own trainer. The reward travels
  as an extra field (``env_reward``) that :func:`verifier_reward` hands back to TRL.

* ``environment_factory`` (:func:`make_trl_environment_factory`, defined in `trl_env` beside the
  dataset rows and the tool schemas): TRL plays the episode itself with its tool-calling loop. Our
  environment is wrapped in a class whose public methods are the tools (one per ``env.tools`` plus
  ``answer``), ``reset(**row)`` starts the task of a dataset row and ``get_reward()`` is our verifier.
  TRL builds the tool schema from the methods' signatures and docstrings and masks the tool results
  out of the loss with its own ``tool_mask``. The chat template must know tool calls: SmolLM2's does
  not, so :func:`tool_calling_tokenizer` gives the tokenizer TRL's Qwen2.5 ChatML template (same
  ``<|im_start|>`` tokens, ``<tool_call>`` JSON like our protocol).

TRL's batching, in short: the sampler repeats every dataset row ``num_generations`` times in a row,
so the prompts a rollout function receives already contain each prompt ``num_generations`` times
(on several GPUs a group may be split across processes); the function returns one completion per
prompt it received, and TRL normalises rewards over each block of ``num_generations``.

Run it (one CPU, tiny)::

    python -m course_lib.integrations.trl --env search_qa --steps 2

Same command on N GPUs of one machine, one process per GPU (edit ``num_processes`` in the file)::

    accelerate launch --config_file configs/accelerate_multi_gpu.yaml \\
        -m course_lib.integrations.trl --env search_qa --steps 200 --num-generations 8 --batch-size 8

``--adapter environment_factory`` switches to TRL's own tool loop; ``--help`` lists the sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

# The data and the environment_factory adapter, imported here too: this module is where a learner finds them.
from course_lib.integrations.trl_env import (  # noqa: F401
    make_trl_environment_factory,
    prompt_key,
    task_dataset,
    tool_calling_tokenizer,
    tool_schemas,
)
from course_lib.rollout import RolloutStats, rollout
from course_lib.trajectory import Trajectory

# TRL 1.16 reads `model.is_gradient_checkpointing`, which transformers 5 deprecates: a FutureWarning on every
# `trainer.train()` that the learner can do nothing about.
warnings.filterwarnings("ignore",
                        message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)

ADAPTERS = ("rollout_func", "environment_factory")


# ----- adapter 2: rollout_func -----------------------------------------------------------------------
# (the data, task_dataset, and adapter 1, environment_factory, live in `course_lib.integrations.trl_env`)


def trajectory_completion(trajectory: Trajectory, end_of_turn_id: int | None = None) -> tuple[int, int]:
    """(start, end) of the completion TRL trains on, as positions in ``trajectory.token_ids``.

    start = the end of the prompt. end = just after the last model token, plus the end-of-turn token
    if the template closes the turn with one: the closing tokens after it are context for nothing.
    A last turn cut by max_new_tokens keeps no closing token: TRL calls a completion truncated when it
    does not end in an end-of-sequence token (its `mask_truncated_completions` and clipped ratio).
    """
    start = len(trajectory.prompt_ids)
    model_positions = [i for i, m in enumerate(trajectory.loss_mask) if m]
    end = (model_positions[-1] + 1) if model_positions else start
    cut = bool(trajectory.steps) and trajectory.steps[-1].truncated
    if not cut and end < len(trajectory.token_ids) and trajectory.token_ids[end] == end_of_turn_id:
        end += 1
    return start, end


def trl_fields(trajectories: list[Trajectory], end_of_turn_id: int | None = None) -> dict[str, list]:
    """What a TRL rollout function returns for our trajectories, one entry per trajectory.

    ``env_mask`` is our ``loss_mask`` on the completion: TRL multiplies it into its loss mask.
    """
    out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                            "env_reward": [], "trajectory_messages": []}
    for t in trajectories:
        start, end = trajectory_completion(t, end_of_turn_id)
        out["prompt_ids"].append(list(t.prompt_ids))
        out["completion_ids"].append(t.token_ids[start:end])
        out["logprobs"].append(t.logprobs[start:end])
        out["env_mask"].append(t.loss_mask[start:end])
        out["env_reward"].append(float(t.reward))
        out["trajectory_messages"].append(t.messages)
    return out


def _runs(keys: list[str]) -> list[tuple[str, int]]:
    """Consecutive runs of equal keys: [(key, length), ...]."""
    out: list[tuple[str, int]] = []
    for key in keys:
        if out and out[-1][0] == key:
            out[-1] = (key, out[-1][1] + 1)
        else:
            out.append((key, 1))
    return out


class RolloutFunc:
    """``GRPOTrainer(rollout_func=...)`` backed by our batched rollout engine.

    Call signature (TRL's): ``(prompts, trainer) -> dict`` with one entry per prompt received:
    ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (our loss mask on the completion),
    ``env_reward`` (our verifier's reward) and ``trajectory_messages`` (for a judge). The last batch
    of trajectories stays in ``last_trajectories`` (tests and notebooks compare masks with it).
    """

    def __init__(self, env_name: str, dataset, *, max_turns: int = 4, max_new_tokens: int = 48,
                 temperature: float | None = None, max_context: int = 2048, seed: int = 0):
        self.env_name = env_name
        self.max_turns, self.max_new_tokens = max_turns, max_new_tokens
        self.temperature = temperature  # None: the trainer's (the loss divides logits by the same one)
        self.max_context, self.seed = max_context, seed
        self.tasks_by_prompt: dict[str, dict[str, Any]] = {}
        for row in dataset:
            key, task = prompt_key(row["prompt"]), json.loads(row["task"])
            known = self.tasks_by_prompt.setdefault(key, task)
            if known["id"] != task["id"]:
                raise ValueError(f"tasks {known['id']!r} and {task['id']!r} have the same "
                                 "prompt; the rollout function finds a task by its prompt, so drop one of "
                                 "them from the dataset")
        self.last_trajectories: list[Trajectory] = []
        self.stats = RolloutStats()
        self.calls = 0

    def _task(self, key: str) -> dict[str, Any]:
        if key not in self.tasks_by_prompt:
            raise KeyError("a prompt from TRL is not in the rollout function's dataset; build both from the "
                           "same task_dataset(...)")
        return self.tasks_by_prompt[key]

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        from trl.models import unwrap_model_for_generation

        from course_lib.models import end_of_turn_id

        tokenizer = trainer.processing_class
        runs = _runs([prompt_key(p) for p in prompts])
        # TRL repeats each prompt num_generations times in a row; a group split across processes
        # leaves runs of unequal length, then every prompt becomes its own group of one.
        sizes = {n for _, n in runs}
        if len(sizes) == 1:
            tasks, group_size = [self._task(k) for k, _ in runs], sizes.pop()
        else:
            tasks, group_size = [self._task(k) for k, n in runs for _ in range(n)], 1
        temperature = self.temperature if self.temperature is not None else trainer.temperature
        # Fresh sampling seeds each step and on each process, reproducible from (seed, step, rank).
        seed = (self.seed * 1_000_003 + trainer.state.global_step) * 64 + trainer.accelerator.process_index
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
            was_training = model.training
            model.eval()
            try:
                groups = rollout(model, tokenizer, self.env_name, tasks, group_size=group_size,
                                 max_turns=self.max_turns, max_new_tokens=self.max_new_tokens,
                                 temperature=temperature, seed=seed, max_context=self.max_context,
                                 progress=False, stats=self.stats)
            finally:
                model.train(was_training)
        trajectories = [t for g in groups for t in g]
        self.last_trajectories = trajectories
        self.calls += 1
        return trl_fields(trajectories, end_of_turn_id(tokenizer))


def make_rollout_func(env_name: str, dataset, *, max_turns: int = 4, max_new_tokens: int = 48,
                      temperature: float | None = None, max_context: int = 2048,
                      seed: int = 0) -> RolloutFunc:
    """A rollout function for ``GRPOTrainer(rollout_func=...)`` on `env_name`.

    dataset: the rows TRL trains on (from :func:`task_dataset`); a prompt is mapped back to its task
    through it, because TRL passes only the prompts. Group size is TRL's ``num_generations``.
    """
    return RolloutFunc(env_name, dataset, max_turns=max_turns, max_new_tokens=max_new_tokens,
                       temperature=temperature, max_context=max_context, seed=seed)


# ----- rewards ---------------------------------------------------------------------------------------


def verifier_reward(prompts: list, completions: list, env_reward: list[float] | None = None,
                    **kwargs: Any) -> list[float | None]:
    """TRL reward function: the verifier's reward our rollout function computed (field ``env_reward``).

    Returns None (TRL: not applicable) for rows without one.
    """
    if env_reward is None:
        return [None] * len(prompts)
    return [float(r) for r in env_reward]


def make_judge_reward(judge, rubric: str | None = None, *, seed: int = 0) -> Callable[..., list[float]]:
    """TRL reward function from our group judge (`course_lib.judge.scoring.score_group`).

    Consecutive rows with the same prompt are one group (TRL's layout) and are judged together, each
    trajectory whole (``trajectory_messages`` from our rollout function, else prompt + completion).
    A failed group gives NaN scores, which TRL leaves out of its group statistics.
    Each process judges the rows it holds: with several processes, keep per_device_train_batch_size a
    multiple of num_generations, or a group split over two processes is judged as two smaller groups
    (relative scores from two calls), unlike the verifier's reward, which is per trajectory.
    """
    from course_lib.judge.prompts import DEFAULT_RUBRIC
    from course_lib.judge.scoring import score_group

    def judge_reward(prompts: list, completions: list, trajectory_messages: list | None = None,
                     **kwargs: Any) -> list[float]:
        conversations = trajectory_messages or [
            list(p) + (c if isinstance(c, list) else [{"role": "assistant", "content": c}])
            for p, c in zip(prompts, completions)]
        scores: list[float] = []
        for _, n in _runs([prompt_key(p) for p in prompts]):
            group = conversations[len(scores):len(scores) + n]
            scores += [s.score for s in score_group(group, rubric or DEFAULT_RUBRIC, judge=judge, seed=seed)]
        return scores

    return judge_reward


# ----- configuration and the trainer -----------------------------------------------------------------


def grpo_config(output_dir: str = "runs/trl", *, steps: int = 2,
                num_generations: int = 2, batch_size: int = 2, micro_batch_size: int | None = None,
                max_completion_length: int = 64, learning_rate: float = 2e-5, temperature: float = 1.0,
                seed: int = 0, max_turns: int = 4, **overrides: Any):
    """A `GRPOConfig` sized for this course, with the defaults that matter on a laptop spelled out.

    batch_size: completions per device per optimizer step (so batch_size / num_generations prompts).
    micro_batch_size: completions per forward and backward pass (default: batch_size). A smaller one
    accumulates gradients over batch_size / micro_batch_size passes (TRL's gradient_accumulation_steps;
    it still generates the whole batch at once), so the full-vocabulary logits of only that many
    completions are held at a time: the memory peak of a step falls. TRL's DAPO loss divides every pass
    by the whole batch's token count, so the accumulated gradient is one pass's (up to rounding).
    """
    from trl import GRPOConfig

    micro = batch_size if micro_batch_size is None else micro_batch_size
    if micro < 1 or batch_size % micro:
        raise ValueError(f"micro_batch_size must divide batch_size ({batch_size}), got {micro_batch_size}")

    cuda = torch.cuda.is_available()
    bf16 = cuda and torch.cuda.is_bf16_supported(including_emulation=False)  # a T4 emulates bf16: fp16 there
    options: dict[str, Any] = dict(
        output_dir=output_dir, max_steps=steps, num_generations=num_generations,
        per_device_train_batch_size=micro, gradient_accumulation_steps=batch_size // micro,
        max_completion_length=max_completion_length,
        learning_rate=learning_rate, temperature=temperature, seed=seed,
        use_cpu=not cuda, bf16=bf16, fp16=cuda and not bf16,  # GRPOConfig defaults bf16=True: not on CPU
        # GRPOConfig turns (gradient) checkpointing on; a 135M model does not need it
        activation_checkpointing=False,
        max_tool_calling_iterations=max(0, max_turns - 1),  # environment_factory: turns after the first
        logging_steps=1, save_strategy="no", report_to="none", beta=0.0, loss_type="dapo",
        lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0, disable_tqdm=True,
    )
    options.update(overrides)
    return GRPOConfig(**options)


def build_trainer(env_name: str = "search_qa", adapter: str = "rollout_func", *, model: str = "smollm2-135m",
                  split: str = "train", limit: int | None = None, args=None, max_turns: int = 4,
                  max_new_tokens: int = 48, judge=None, dataset=None):
    """A ready `GRPOTrainer` on our environment, and the adapter object (RolloutFunc or the env class).

    model: a course model name (`course_lib.models.resolve_model_path`) or a checkpoint folder.
    args: a `GRPOConfig` (default: :func:`grpo_config`).
    judge: a `course_lib.judge.backends` backend; adds the judge as a second reward (rollout_func adapter).
    """
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from course_lib.models import resolve_model_path

    if adapter not in ADAPTERS:
        raise ValueError(f"adapter {adapter!r} does not exist; adapters are: {', '.join(ADAPTERS)}")
    # both adapters use TRL's experimental APIs knowingly
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = args if args is not None else grpo_config(max_turns=max_turns)
    path = resolve_model_path(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"  # TRL requires left padding
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tool_calling = adapter == "environment_factory"
    if dataset is None:
        dataset = task_dataset(env_name, split, limit, for_tool_calling=tool_calling)
    if tool_calling:
        factory = make_trl_environment_factory(env_name, max_turns=max_turns)
        trainer = GRPOTrainer(model=path, args=args, train_dataset=dataset,
                              processing_class=tool_calling_tokenizer(tokenizer), environment_factory=factory)
        return trainer, factory
    rollout_func = make_rollout_func(env_name, dataset, max_turns=max_turns, max_new_tokens=max_new_tokens,
                                     seed=args.seed)
    rewards: list[Callable[..., list]] = [verifier_reward]
    if judge is not None:
        rewards.append(make_judge_reward(judge))
    trainer = GRPOTrainer(model=path, args=args, train_dataset=dataset, processing_class=tokenizer,
                          reward_funcs=rewards, rollout_func=rollout_func)
    return trainer, rollout_func


# ----- the CLI ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m course_lib.integrations.trl",
                                     description="GRPO with TRL's GRPOTrainer on a course environment.")
    parser.add_argument("--env", default="search_qa", help="environment name (course_lib.envs.ENVIRONMENTS)")
    parser.add_argument("--adapter", default="rollout_func", choices=ADAPTERS)
    parser.add_argument("--model", default="smollm2-135m", help="course model name or checkpoint folder")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps (GRPOConfig.max_steps)")
    parser.add_argument("--num-generations", type=int, default=2, help="group size (rollouts per task)")
    parser.add_argument("--batch-size", type=int, default=2, help="completions per device per step")
    parser.add_argument("--max-turns", type=int, default=4, help="turn limit of an episode")
    parser.add_argument("--max-new-tokens", type=int, default=48,
                        help="token limit of one turn (rollout_func)")
    parser.add_argument("--max-completion-length", type=int, default=192,
                        help="token limit of a whole completion (environment_factory; dr_grpo's constant)")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N training tasks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="runs/trl")
    a = parser.parse_args(argv)
    args = grpo_config(a.output_dir, steps=a.steps,
                       num_generations=a.num_generations, batch_size=a.batch_size,
                       max_completion_length=a.max_completion_length, learning_rate=a.lr, seed=a.seed,
                       max_turns=a.max_turns)
    trainer, _ = build_trainer(a.env, a.adapter, model=a.model, limit=a.limit, args=args,
                               max_turns=a.max_turns, max_new_tokens=a.max_new_tokens)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    logs = [row for row in trainer.state.log_history if "reward" in row]
    summary = {"env": a.env, "adapter": a.adapter, "steps": trainer.state.global_step,
               "seconds_per_step": seconds / max(1, trainer.state.global_step),
               "reward_last_step": logs[-1]["reward"] if logs else None,
               "processes": trainer.accelerator.num_processes}
    if trainer.accelerator.is_main_process:
        print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
