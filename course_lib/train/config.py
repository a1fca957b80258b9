"""`TrainConfig`: everything one RL run needs, as data (saved as config.json), in small parts that match
the ideas of the step: how episodes are sampled (`RolloutConfig`), how they are rewarded (`RewardConfig`),
how the policy is optimised (`OptimConfig`), and the learned critic (`CriticConfig`). The credit method is
a name of `course_lib.credit.CREDIT_METHODS` plus that method's own options (`credit_options`), checked
against the options the method takes.

The Python objects of a run (a judge backend, a reward function, a test hook) are not data: they travel
beside the config as `Hooks`, the arguments of `train()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from course_lib import credit, rewards
from course_lib.trajectory import Trajectory


@dataclass
class RolloutConfig:
    """How the episodes of a step are sampled."""

    max_turns: int = 4  # turn limit of an episode
    max_new_tokens: int = 48  # token limit of one model turn
    temperature: float = 1.0  # sampling temperature of rollouts (the loss uses the same one)
    max_context: int = 1024  # an episode stops when its context would exceed this
    sample_dtype: str = "float32"  # rollouts sample from the trained weights, or from a "bfloat16" copy
    max_batch: int | None = 32  # episodes played at once, whole groups (None: all; see `rollout.rollout`)


@dataclass
class RewardConfig:
    """How the episodes are rewarded (`course_lib.rewards`, whose docstring holds the vocabulary)."""

    source: str = "verifier"  # the training reward R: "verifier" (env reward), "judge", or a "mix" of the two
    mix_weight: float = 0.5  # source="mix": weight of the judge score, 1 − weight on the verifier
    # judge.methods.JUDGING_METHODS: "group" (the group at once), "pointwise" (P(yes))
    judge_method: str = "group"
    rubric: str | None = None  # judge rubric (None: the judge's default)
    judge_reference: bool = False  # show the judge the task's reference answer, where the method can
    unfinished_reward: float | None = None  # an episode cut at a limit gets this (None: no rule)
    turn_reward: str = "process"  # the turn-reward rule (rewards.TURN_REWARD_RULES): "process" or "judge"


@dataclass
class OptimConfig:
    """How the policy is optimised (`course_lib.train.update`)."""

    lr: float = 2e-5  # AdamW learning rate of the policy
    weight_decay: float = 0.0  # AdamW weight decay
    adam_eps: float = 1e-8  # AdamW ε; far above the gradients, a step follows their size, not their sign
    max_grad_norm: float = 1.0  # gradient clipping
    loss_type: str = "dapo"  # policy_loss normalisation: "dapo", "bnpo", "grpo", "dr_grpo"
    eps_low: float = 0.2  # clip range below 1
    eps_high: float | None = None  # clip range above 1 (None: eps_low)
    beta: float = 0.0  # KL penalty to the starting model (>0 loads a frozen reference copy)
    ppo_epochs: int = 1  # updates per rollout batch (>1 uses the sampling log-probs as ℓ_old, see `update`)
    token_budget: int = 2048  # padded tokens per micro-batch (gradient accumulation over micro-batches)
    bf16_autocast: bool | None = None  # bf16 autocast of forward passes (None: CPU on, GPU model's)
    lora_rank: int = 0  # >0: train LoRA adapters of this rank on every projection (course_lib.lora), not W
    lora_alpha: float = 32.0  # LoRA's α: an adapted layer adds (α / r) B A x


@dataclass
class CriticConfig:
    """The learned critic (credit methods that need "values"; `course_lib.train.critic`)."""

    lr: float = 1e-3  # learning rate of the value head
    coef: float = 0.5  # weight of the value loss
    clip: float = 0.2  # PPO value clipping range
    trains_backbone: bool = False  # value loss's gradient into the policy's layers too


PARTS = {"rollout": RolloutConfig, "reward": RewardConfig, "optim": OptimConfig, "critic": CriticConfig}


@dataclass
class TrainConfig:
    """Everything one RL run needs, as data. Defaults: a small outcome-credit run on search_qa on a CPU.
    A part may be given as a dict (`rollout=dict(max_turns=2)`); an unknown key raises TypeError."""

    env: str = "search_qa"  # environment name (course_lib.envs.ENVIRONMENTS)
    model: str = "smollm2-135m"  # model name or a checkpoint folder (e.g. a warm start)
    run_dir: str = "runs/train"  # metrics.jsonl, checkpoint/ and config.json go here; resumed if present
    steps: int = 20  # RL steps (one rollout batch and its update each)
    tasks_per_step: int = 4  # tasks sampled per step
    group_size: int = 4  # rollouts per task (the group that advantages compare)
    task_filter: dict[str, Any] | None = None  # keep the tasks whose fields equal these, e.g. {"hops": 2}
    seed: int = 0  # seeds task sampling, rollouts and torch
    device: str | None = None  # "cpu", "cuda" or None (auto)
    progress: bool = True  # tqdm progress bars
    eval_every: int = 5  # held-out greedy evaluation every this many steps (0: only at the end)
    eval_tasks: int = 32  # held-out test tasks per evaluation (0: no evaluation)
    checkpoint_every: int = 5  # checkpoint every this many steps (and at the end)
    max_bad_updates: int = 3  # stop after this many NaN/inf updates in a row
    credit: str = "outcome"  # credit.CREDIT_METHODS: "outcome" (GRPO), "gigpo", "turn", "critic"...
    credit_options: dict[str, Any] = field(default_factory=dict)  # that method's options, e.g. {"gamma": 0.9}
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)

    def __post_init__(self) -> None:
        for name, part in PARTS.items():
            value = getattr(self, name)
            if isinstance(value, dict):
                known = [f.name for f in dataclasses.fields(part)]
                unknown = sorted(set(value) - set(known))
                if unknown:
                    raise TypeError(f"{name}: {unknown} are not fields of {part.__name__}; its fields are: "
                                    f"{', '.join(known)}")
                setattr(self, name, part(**value))
        self.credit_options = dict(self.credit_options or {})
        method = credit.credit_method_named(self.credit)  # an unknown name: a ValueError listing the methods
        unknown = sorted(set(self.credit_options) - set(method.options))
        if unknown:
            takes = ", ".join(method.options) or "none"
            raise ValueError(f"credit {self.credit!r} does not take the option(s) {unknown}; "
                             f"its options are: {takes}")

    def to_json(self) -> dict[str, Any]:  # the config as JSON-ready data
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainConfig:
        """The config of `to_json()` data; also reads the flat config.json of runs made before the parts
        existed (`max_turns`, `value_lr`, `reward="judge"`, `gamma`...): each flat field goes to its part,
        and a credit option goes to `credit_options` when the run's method takes it."""
        data = dict(data)
        parts: dict[str, dict[str, Any]] = {name: dict(data.pop(name, None) or {}) for name in PARTS
                                            if not isinstance(data.get(name), str)}
        if isinstance(data.get("reward"), str):  # the old flat reward source
            parts["reward"] = {"source": data.pop("reward")}
        method = credit.credit_method_named(data.get("credit", "outcome"))
        options = dict(data.pop("credit_options", None) or {})
        top = {f.name for f in dataclasses.fields(cls)}
        for key in [k for k in data if k not in top]:
            value = data.pop(key)
            if key in _FLAT:
                part, name = _FLAT[key]
                parts.setdefault(part, {}).setdefault(name, value)
            elif key in method.options:
                options.setdefault(key, value)
            elif key not in credit.credit_options():
                raise TypeError(f"{key!r} is not a TrainConfig field (nor one of an older config)")
        return cls(**data, credit_options=options, **parts)


# flat field of configs saved before the parts -> (part, field)
_FLAT = {**{f.name: ("rollout", f.name) for f in dataclasses.fields(RolloutConfig)},
         **{f.name: ("optim", f.name) for f in dataclasses.fields(OptimConfig) if f.name != "lr"},
         **{f.name: ("reward", f.name) for f in dataclasses.fields(RewardConfig) if f.name != "source"},
         "lr": ("optim", "lr"), "value_lr": ("critic", "lr"), "value_coef": ("critic", "coef"),
         "value_clip": ("critic", "clip"), "value_trains_backbone": ("critic", "trains_backbone")}


@dataclass(frozen=True)
class Hooks:
    """The Python objects of a run, given to `train()` beside its config (see `train`)."""

    reward_fn: Callable[[Trajectory], float] | None = None  # replaces the verifier's reward (shaping, tests)
    turn_reward_fn: Callable[[Trajectory], list[float]] | None = None  # the "process" rule's function
    judge: Any = None  # the judge backend (reward source "judge"/"mix", turn_reward "judge")
    loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None  # testing: (step, loss) -> loss


def check(config: TrainConfig, judge: Any = None) -> None:
    """Wrong names and settings, before anything loads: a ValueError that says what to do."""
    rewards.check(config.reward, judge)
    if config.optim.lora_rank < 0:
        raise ValueError(f"optim.lora_rank must be 0 (full fine-tuning) or a LoRA rank >= 1, "
                         f"got {config.optim.lora_rank}")
    if not config.rollout.temperature > 0:
        raise ValueError(f"temperature must be > 0 for training (the loss divides the logits by it), "
                         f"got {config.rollout.temperature}")
