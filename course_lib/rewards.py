"""The rewards of a step (notebooks 05, 07, 09, 10): computed from the rolled-out groups and RETURNED beside
them, never written back into them. A rolled-out `Trajectory` keeps the environment's reward in `reward`
(and `verifier_reward`) for good; what training uses is a rewarded copy.

The vocabulary, used the same way in `TrainConfig`, `train()`, the metrics and the notebooks:

    verifier reward     the environment's reward of an episode, as the rollout recorded it. `success` is
                        always the verifier's verdict: verifier reward > 0.5 (`Trajectory.success`).
    judge score         s(τ) in [0, 1], the judge's score of an episode (`course_lib.judge`), by a judging
                        method of `judge.methods.JUDGING_METHODS` ("group": the group at once;
                        "pointwise": P(yes) alone).
    reward R(τ)         the training reward, the one credit reads. Its reward source
                        (`RewardConfig.source`, `REWARD_SOURCES`) says how it is made from the two:
                            verifier   R = v            (or `reward_fn(τ)` when given: shaping, tests)
                            judge      R = s
                            mix        R = w · s + (1 − w) · v          (w = `RewardConfig.mix_weight`)
                        then the unfinished rule: an episode cut at a limit gets `unfinished_reward`.
    turn reward r_t     one number per turn, read by credit methods that need "turn_rewards" (turn,
                        turn_dense, critic, reinforce), made by a turn-reward rule.
    turn-reward rule    a function trajectory -> [r_t], named in `TURN_REWARD_RULES`: "process" (the
                        process reward, `process_rewards`, or `train(turn_reward_fn=...)` in its
                        place, e.g. one of the search_qa rules below) or "judge" (the judge's score of
                        every turn). `RewardConfig.turn_reward` names the rule.

`assign(spec, groups, judge=...)` returns a `Rewards`: per trajectory the verifier reward, the judge score
(or None), the reward R and the rule that made R, side by side; the groups whose judging failed (a failed
judging is never turned into rewards: the step leaves that group out); the judge's metrics row; and the
rewarded copies of the groups that credit reads (`reward` and the last step's reward are R).

Hand-written turn-reward rules for search_qa, two that agree with the verifier and one that only looks
like it. Each adds a bonus to the process reward (`process_reward`: −0.1 for a malformed action or
a tool error) for turns that look like progress:

    evidence_turn_rewards       +bonus when a search shows, for the first time in the episode, a sentence
                                the answer needs (one of the task's evidence sentences). Aligned: every
                                hop of the question has to find its sentence.
    answer_evidence_turn_rewards  +bonus for the search that first shows the sentence holding the answer,
                                −bonus for every search after it. Aligned, and answering is never the
                                costlier choice once the answer is in view.
    question_echo_turn_rewards  +bonus when a search's query repeats a word of the question ("stay on
                                topic"). Misaligned: the first hop's name is in the question, the second
                                hop's city is not, so it pays for searching the person again and nothing
                                for the search that answers a two-hop question.

Two for gridworld (and gridworld_long), one aligned and one that only looks aligned, each adding to the
process reward ±size for a move that brings the agent closer to the goal or takes it farther
(`distance_reward`), by the distance the environment records in each turn's info
(`envs.gridworld.goal_distance`, the same one the tabular companion's `path_rewards` reads):

    path_distance_turn_rewards  distance = fewest moves around holes and walls. Aligned: a move earns +size
                                iff it starts a shortest path.
    line_distance_turn_rewards  distance = straight-line (Manhattan) distance. Misaligned: it pays walking
                                straight at the goal into a dead end or a hole, and charges the detour.

Two for search_chain, read from what the environment records in each turn's info (`envs.search_chain`),
each adding a bonus to the process reward:

    chain_progress_turn_rewards  +bonus for a turn that takes the chain depth (how many of the chain's
                                sentences, from the start up, have been shown) deeper than ever before.
                                Aligned: each hop earns it once.
    novelty_turn_rewards        +bonus for a search that shows a document no earlier turn showed. Misaligned:
                                a search for anyone at all shows new documents, so it pays exploring, not
                                climbing.

Pass one to training as `train(config, turn_reward_fn=evidence_turn_rewards)` with credit="turn", or with
credit="turn_dense" to let the turn rewards alone train groups whose rollouts all failed (notebook 07).
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from course_lib.envs import load_tasks
from course_lib.envs.search_qa import SearchQAEnv, load_index
from course_lib.protocol import parse_action
from course_lib.trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from course_lib.train.config import RewardConfig


def _judge_module(name: str):  # imported on first use: a run without a judge never needs its dependencies
    """`course_lib.judge.<name>`, e.g. "methods" (the judging methods) or "scoring"."""
    try:
        return importlib.import_module(f"course_lib.judge.{name}")
    except ImportError as exc:
        raise RuntimeError(f"a judge reward or turn reward needs course_lib.judge, which did not import "
                           f"({exc}); use the verifier's reward or install the judge's dependencies") from exc


# ----- the process reward: the default turn-reward rule, used by the trainer and the credit table ---------

PROCESS_PENALTY = -0.1


def process_reward(step) -> float:
    """The default turn reward r_t: −0.1 for a malformed action or a tool error, else 0 (notebook 07).

    It reads only what the environment reported: the action kind (`step.info["action_kind"]`) and an
    observation that starts with "Error:" (how every environment reports a failed tool call), so it
    cannot be gamed by the wording of an action; it rewards well-formed tool use, never the outcome
    (the verifier's reward stays in charge of that).
    """
    bad = step.info.get("action_kind") == "malformed" or step.observation_text.startswith("Error:")
    return PROCESS_PENALTY if bad else 0.0


def process_rewards(trajectory) -> list[float]:  # `process_reward` of every turn, in order
    return [process_reward(step) for step in trajectory.steps]


# ----- the registries: each name of a reward source, judging method or turn-reward rule is dispatched here


# reward source -> the judge's weight w in R = w · s + (1 − w) · v; None: RewardConfig.mix_weight
REWARD_SOURCES: dict[str, float | None] = {"verifier": 0.0, "judge": 1.0, "mix": None}

# turn-reward rule -> whether it asks the judge ("process": process_rewards or turn_reward_fn)
TURN_REWARD_RULES: dict[str, bool] = {"process": False, "judge": True}


def _named(registry: dict, kind: str, name: str):
    if name not in registry:
        raise ValueError(f"{kind} {name!r} is not known; choose one of {', '.join(registry)}")
    return registry[name]


def judge_weight(spec: RewardConfig) -> float:
    """w: the judge score's weight in the reward R (0: the verifier alone, no judge is asked)."""
    weight = _named(REWARD_SOURCES, "reward source", spec.source)
    return spec.mix_weight if weight is None else weight


def uses_judge(spec: RewardConfig) -> list[str]:
    """What of `spec` asks the judge, as the config's words (e.g. ["reward='judge'"]); empty: nothing."""
    out = [f"reward={spec.source!r}"] if judge_weight(spec) > 0 else []
    return out + ([f"turn_reward={spec.turn_reward!r}"] if TURN_REWARD_RULES[spec.turn_reward] else [])


def check(spec: RewardConfig, judge: Any = None) -> None:
    """Unknown names, and a judge reward without a judge backend (else it fails only in the first step)."""
    _named(REWARD_SOURCES, "reward", spec.source)
    _named(TURN_REWARD_RULES, "turn_reward", spec.turn_reward)
    _judge_module("methods").judging_method(spec.judge_method)
    needs = uses_judge(spec)
    if needs and judge is None:
        raise ValueError(f"{needs[0]} needs a judge backend and there is no default one: pass judge= to "
                         "train(), e.g. course_lib.judge.backends.LocalJudge() with judge_method='pointwise' "
                         "(the embedded model) or OpenAIJudge(base_url=...) (a served one)")


# ----- a step's rewards -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrajectoryReward:
    """The rewards of one trajectory, side by side."""

    traj_id: Hashable
    verifier: float  # the verifier reward v (the environment's, as rolled out)
    judge: float | None  # the judge score s (None: not judged, or its group's judging failed)
    reward: float  # R, the training reward
    rule: str  # what made R: "verifier", "reward_fn", "judge", "mix" or "unfinished"
    success: bool  # the verifier's verdict (Trajectory.success of the rolled-out trajectory)


@dataclass
class Rewards:
    """What `assign` returns: the step's rewards beside the (unchanged) rolled-out groups."""

    per_trajectory: list[TrajectoryReward]  # group by group, in rollout order
    groups: list[TrajectoryGroup]  # rewarded copies: `reward` and the last step's reward are R
    judge_failed: list[Hashable] = field(default_factory=list)  # ids of groups whose judging failed
    judge_metrics: dict[str, Any] = field(default_factory=dict)  # the judge's metrics row (empty: no judge)

    def metrics(self) -> dict[str, float]:
        """Mean training reward, mean verifier reward and verifier success (fractions of the trajectories)."""
        n = max(1, len(self.per_trajectory))
        return {"reward": sum(r.reward for r in self.per_trajectory) / n,
                "verifier_reward": sum(r.verifier for r in self.per_trajectory) / n,
                "success": sum(r.success for r in self.per_trajectory) / n}


def rewarded(trajectory: Trajectory, reward: float) -> Trajectory:
    """A copy of `trajectory` whose reward, and its last step's (GiGPO sums step rewards), is `reward`; the
    copy keeps the verifier reward, so its `success` is still the verifier's verdict."""
    steps = list(trajectory.steps)
    if steps:
        steps[-1] = dataclasses.replace(steps[-1], reward=reward)
    verifier = trajectory.verifier_reward if trajectory.verifier_reward is not None else trajectory.reward
    return dataclasses.replace(trajectory, reward=reward, steps=steps, verifier_reward=verifier)


def assign(spec: RewardConfig, groups: list[TrajectoryGroup], *, judge: Any = None,
           reward_fn: Callable[[Trajectory], float] | None = None) -> Rewards:
    """The rewards of rolled-out groups under `spec` (see the module docstring); changes nothing in them."""
    w = judge_weight(spec)
    scores: dict[Hashable, float] = {}
    failed, metrics = [], None
    if w > 0:
        method = _judge_module("methods").judging_method(spec.judge_method)
        score_fn, metrics = method.score_group, _judge_module("scoring").JudgeMetrics()
        for g in groups:
            kwargs = {"judge": judge, "metrics": metrics, **({"rubric": spec.rubric} if spec.rubric else {})}
            if spec.judge_reference and method.takes_reference:
                kwargs["reference"] = g.trajectories[0].info.get("reference")
            judged = score_fn(g.trajectories, **kwargs)
            if any(s.failed for s in judged):
                failed.append(g.group_id)
                continue
            scores.update({t.traj_id: float(s.score) for t, s in zip(g, judged)})
    per_trajectory, copies = [], []
    for g in groups:
        copied = []
        for t in g:
            verifier = float(t.reward)
            base, rule = (verifier, "verifier") if reward_fn is None else (float(reward_fn(t)), "reward_fn")
            score = scores.get(t.traj_id)
            reward = base if score is None else w * score + (1 - w) * base
            rule = rule if score is None else spec.source
            if spec.unfinished_reward is not None and t.unfinished:  # a hard rule outside the judge
                reward, rule = float(spec.unfinished_reward), "unfinished"
            per_trajectory.append(TrajectoryReward(t.traj_id, verifier, score, reward, rule, t.success))
            copied.append(rewarded(t, reward))
        copies.append(TrajectoryGroup(g.task_id, g.group_id, copied))
    return Rewards(per_trajectory, copies, failed, metrics.as_row() if metrics else {})


def turn_rewards(spec: RewardConfig, trajectory: Trajectory, *, judge: Any = None,
                 turn_reward_fn: Callable[[Trajectory], list[float]] | None = None
                 ) -> tuple[list[float], bool]:
    """Per-turn rewards r_t of the rule `spec.turn_reward` (not including the final reward), and whether
    the turn judging failed.

    "judge": the judge's score of every turn (`judge.methods.JUDGING_METHODS`); when it
    fails, every r_t is NaN and the step skips the trajectory's group (a failed judging is never scored 0).
    "process": `turn_reward_fn`, by default the process reward (`process_rewards`).
    """
    if _named(TURN_REWARD_RULES, "turn_reward", spec.turn_reward):
        score_fn = _judge_module("methods").judging_method(spec.judge_method).score_turns
        scores = score_fn(trajectory, judge=judge)
        rewards, failed = list(scores), scores.failed
    else:
        rewards, failed = list((turn_reward_fn or process_rewards)(trajectory)), False
    if len(rewards) != trajectory.num_turns:
        raise ValueError(f"the turn reward gave {len(rewards)} values for {trajectory.num_turns} turns")
    return rewards, failed


# ----- turn-reward rules for search_qa ----------------------------------------------------------------------

BONUS = 0.1


@lru_cache(maxsize=1)
def _tasks_by_id() -> dict[str, dict]:
    return {t["id"]: t for split in ("train", "test") for t in load_tasks("search_qa", split)}


@lru_cache(maxsize=4096)
def _evidence_texts(task_id: str) -> tuple[str, ...]:
    texts = {d["id"]: d["text"] for d in load_index().docs}
    return tuple(texts[doc_id] for doc_id in _tasks_by_id()[task_id]["evidence"])


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _query(step) -> str | None:
    action = parse_action(step.action_text, SearchQAEnv.tools)
    return str(action.arguments.get("query", "")) if action.kind == "tool_call" else None


def evidence_turn_rewards(trajectory: Trajectory, bonus: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + bonus if turn t's search results show an evidence sentence of the task
    that no earlier turn showed, else process_reward(step_t)."""
    evidence, seen, rewards = _evidence_texts(trajectory.task_id), set(), []
    for step in trajectory.steps:
        searched = _query(step) is not None
        found = {e for e in evidence if e in step.observation_text} - seen if searched else set()
        seen |= found
        rewards.append(process_reward(step) + (bonus if found else 0.0))
    return rewards


def answer_evidence_turn_rewards(trajectory: Trajectory, bonus: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + bonus on the first search whose results show the sentence that holds the
    answer (the task's last evidence sentence), − bonus on every search after it, else process_reward(step_t).

    Aligned, and it does not make answering costly: once the answer is in view, only answering helps the
    verifier, so a further search is charged; the first hop (which the warm start already takes) earns
    nothing.
    """
    answer_sentence, in_view, rewards = _evidence_texts(trajectory.task_id)[-1], False, []
    for step in trajectory.steps:
        is_search, extra = _query(step) is not None, 0.0
        if is_search and in_view:
            extra = -bonus
        elif is_search and answer_sentence in step.observation_text:
            in_view, extra = True, bonus
        rewards.append(process_reward(step) + extra)
    return rewards


def question_echo_turn_rewards(trajectory: Trajectory, bonus: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + bonus if turn t is a search whose query shares a word (of 3+ letters)
    with the question, else process_reward(step_t)."""
    question = {w for w in _words(_tasks_by_id()[trajectory.task_id]["question"]) if len(w) >= 3}
    rewards = []
    for step in trajectory.steps:
        query = _query(step)
        echo = query is not None and bool(question & _words(query))
        rewards.append(process_reward(step) + (bonus if echo else 0.0))
    return rewards


# ----- turn-reward rules for gridworld ----------------------------------------------------------------------


def distance_reward(before: float, after: float, size: float = BONUS) -> float:
    """+size if a move lowered the distance to the goal (d_after < d_before), −size if it raised it, 0 if
    neither (a bump into a wall, a malformed move): size · sign(d_before − d_after)."""
    return size * float((after < before) - (after > before))


def _distance_turn_rewards(trajectory: Trajectory, by: str, size: float) -> list[float]:
    rewards = []
    for step in trajectory.steps:
        if "goal_distance" not in step.info:
            raise ValueError(f"turn {step.info.get('turn', '?')} of {trajectory.traj_id!r} has no "
                             "info['goal_distance']: the distance rules read gridworld trajectories only")
        before, after = step.info["goal_distance"][by]
        rewards.append(process_reward(step) + distance_reward(before, after, size))
    return rewards


def path_distance_turn_rewards(trajectory: Trajectory, size: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + size · sign(d(s_t) − d(s_{t+1})), d = fewest moves to the goal around
    holes and walls (a hole: one farther than the farthest reachable cell)."""
    return _distance_turn_rewards(trajectory, "path", size)


def line_distance_turn_rewards(trajectory: Trajectory, size: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + size · sign(d(s_t) − d(s_{t+1})), d = |Δrow| + |Δcol| to the goal,
    blind to holes and walls."""
    return _distance_turn_rewards(trajectory, "line", size)


# ----- turn-reward rules for search_chain -------------------------------------------------------------------


def _chain_info(trajectory: Trajectory, key: str) -> list:
    """info[key] of every turn; an error that says which turn lacks it (the rules read search_chain only)."""
    values = []
    for step in trajectory.steps:
        if key not in step.info:
            raise ValueError(f"turn {step.info.get('turn', '?')} of {trajectory.traj_id!r} has no "
                             f"info[{key!r}]: the search_chain rules read search_chain trajectories only")
        values.append(step.info[key])
    return values


def chain_progress_turn_rewards(trajectory: Trajectory, bonus: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + bonus if d_t > max(d_0, ..., d_{t−1}), else process_reward(step_t),
    where d_t is the chain depth after turn t (`info["chain_depth"]`, d before the first turn = 0): how many
    of the chain's sentences, from the start person up, have been shown.

    Aligned: every hop of the chain earns it once, on the search that first shows the sentence naming the
    next teacher; a search off the chain, or one repeated, earns nothing."""
    deepest, rewards = 0, []
    for step, depth in zip(trajectory.steps, _chain_info(trajectory, "chain_depth")):
        rewards.append(process_reward(step) + (bonus if depth > deepest else 0.0))
        deepest = max(deepest, depth)
    return rewards


def novelty_turn_rewards(trajectory: Trajectory, bonus: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + bonus if turn t's search showed a document that no earlier turn showed
    (`info["docs_shown"]` ⊄ ∪_{s<t} docs_shown_s), else process_reward(step_t).

    Only looks aligned: climbing the chain does show new sentences, but so does a search for anyone at all,
    so it pays exploring anything, not progress along the line of teachers."""
    seen: set[str] = set()
    rewards = []
    for step, shown in zip(trajectory.steps, _chain_info(trajectory, "docs_shown")):
        rewards.append(process_reward(step) + (bonus if set(shown) - seen else 0.0))
        seen |= set(shown)
    return rewards
