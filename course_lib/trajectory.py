"""Trajectories, assembled token-in/token-out, with an exact loss mask.

A trajectory is one token sequence:

    [system + user prompt] [action 1] [obs 1 + next header] [action 2] ... [action K] [closing]
     loss_mask = 0           1 1 1 1    0 0 0 0 0 0 0 0 0       1 1 1        1 1 1      0

* The tokens of each action are kept exactly as the model sampled them: we never decode and
  re-encode what the model wrote (re-tokenisation drift would train on tokens it never chose).
* Everything the environment contributed (the observation, plus the chat-template tokens around it)
  is appended as a token *delta*: the text that the chat template adds after the action, tokenised
  on its own. `loss_mask` is 0 there: the model is credited for what it chose, not for what a tool
  printed. A control-token string inside an observation ("<|im_end|>" in a file) stays plain text: only
  the template's own control tokens mark turns.
* The prefix property (the rendered conversation up to turn k is a prefix of the one up to turn k+1)
  is checked at every turn; a template that rewrites history raises `TemplatePrefixError`.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

OBSERVATION_ROLE = "tool"
_PLACEHOLDER = "\x00observation\x00"  # stands in for an observation to find where the template puts it


class TemplatePrefixError(RuntimeError):
    """The chat template rendered an earlier turn differently once a later turn was added."""


@dataclass
class Step:
    """One environment step: the action the model took, and what the environment answered."""

    action_ids: list[int]  # exactly the sampled tokens (with the end-of-turn token if it was sampled)
    action_text: str  # the action as text, without a closing end-of-turn token
    logprobs: list[float]  # sampling-time log-prob of each action token
    anchor: Hashable = None  # env.state_key() when the action was taken (GiGPO's anchor state)
    observation_text: str = ""
    observation_ids: list[int] = field(default_factory=list)  # template delta appended after the action
    reward: float = 0.0
    done: bool = False
    truncated: bool = False  # the turn hit max_new_tokens: no closing tag, no end-of-turn token
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    """A whole episode as one token sequence, plus its steps and reward.

    `token_ids`, `loss_mask`, `logprobs` and `turn_index` are aligned: one entry per token.
    `loss_mask` is 1 exactly on tokens the model sampled. `logprobs` holds the sampling-time
    log-prob on those tokens and 0.0 elsewhere. `turn_index` is the step number (0, 1, ...) of the
    action or observation a token belongs to, and -1 on the prompt.
    """

    task_id: str
    group_id: str
    traj_id: str
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_index: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    verifier_reward: float | None = None  # the environment's reward, kept when a copy is rewarded otherwise

    @property
    def num_turns(self) -> int:
        return len(self.steps)

    @property
    def num_model_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def success(self) -> bool:  # the verifier's verdict, whatever reward a copy trains on
        return (self.reward if self.verifier_reward is None else self.verifier_reward) > 0.5

    @property
    def unfinished(self) -> bool:
        """The episode was cut at the turn or context limit: it never reached an end of its own (an
        answer)."""
        return bool(self.info.get("turn_limit") or self.info.get("context_limit"))


@dataclass
class TrajectoryGroup:
    """The rollouts of one task: the unit that group-relative advantages compare."""

    task_id: str
    group_id: str
    trajectories: list[Trajectory]

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]

    def __len__(self) -> int:
        return len(self.trajectories)

    def __iter__(self):
        return iter(self.trajectories)


def render(tokenizer, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _control_pattern(tokenizer) -> re.Pattern | None:
    """The strings the tokenizer turns into added (control) tokens, such as <|im_end|>, longest first."""
    contents = sorted({t.content for t in tokenizer.added_tokens_decoder.values()}, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, contents))) if contents else None


def _encode_outside_text(tokenizer, control: re.Pattern | None, text: str, start: int, end: int) -> list[int]:
    """Tokens of `text`, where text[start:end] came from outside (a tool's output): a control-token string
    there (a file that contains "<|im_end|>") stays plain text instead of becoming a fake turn boundary.

    The tokenizer cuts text at control tokens and encodes the pieces between them on their own, so the
    piece around [start, end) is encoded alone, with special-token parsing off: for outside text without
    control strings the tokens are exactly those of encoding the whole text.
    """
    if control is None:
        return _encode(tokenizer, text)
    piece_start = max((m.end() for m in control.finditer(text, 0, start)), default=0)
    after = control.search(text, end)
    piece_end = after.start() if after else len(text)
    outside = tokenizer(text[piece_start:piece_end], add_special_tokens=False,
                        split_special_tokens=True)["input_ids"]
    return _encode(tokenizer, text[:piece_start]) + outside + _encode(tokenizer, text[piece_end:])


class TrajectoryBuilder:
    """Builds a `Trajectory` turn by turn from sampled action tokens and observation texts."""

    def __init__(self, tokenizer, messages: list[dict[str, str]], *, task_id: str, group_id: str,
                 traj_id: str, end_of_turn_id: int, observation_role: str = OBSERVATION_ROLE):
        self.tokenizer = tokenizer
        self.end_of_turn_id = end_of_turn_id
        self.observation_role = observation_role
        self.control = _control_pattern(tokenizer)
        self.text = render(tokenizer, messages, add_generation_prompt=True)  # what token_ids decode to
        prompt_ids = _encode(tokenizer, self.text)
        self.traj = Trajectory(task_id=task_id, group_id=group_id, traj_id=traj_id,
                               messages=[dict(m) for m in messages], prompt_ids=list(prompt_ids))
        self._checked = None  # the last `observation_ids` result, reused by `add_observation`
        self._append(prompt_ids, mask=0, turn=-1)
        self.closed = False

    @property
    def token_ids(self) -> list[int]:
        return self.traj.token_ids

    def _append(self, ids: list[int], *, mask: int, turn: int, logprobs: list[float] | None = None) -> None:
        t = self.traj
        self._checked = None
        t.token_ids.extend(ids)
        t.loss_mask.extend([mask] * len(ids))
        t.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        t.turn_index.extend([turn] * len(ids))

    def add_action(self, action_ids: list[int], logprobs: list[float], *, anchor: Hashable = None,
                   truncated: bool = False) -> Step:
        """Append the tokens the model sampled for one turn (mask 1)."""
        if self.closed:
            raise RuntimeError("the trajectory is closed")
        if len(action_ids) != len(logprobs):
            raise ValueError(f"{len(action_ids)} action tokens but {len(logprobs)} log-probs")
        body = action_ids[:-1] if action_ids and action_ids[-1] == self.end_of_turn_id else action_ids
        action_text = self.tokenizer.decode(body, skip_special_tokens=False)
        step = Step(action_ids=list(action_ids), action_text=action_text, logprobs=list(logprobs),
                    anchor=anchor, truncated=truncated)
        self._append(list(action_ids), mask=1, turn=len(self.traj.steps), logprobs=list(logprobs))
        self.traj.steps.append(step)
        self.traj.messages.append({"role": "assistant", "content": action_text})
        self.text += action_text
        return step

    def _delta(self, messages: list[dict[str, str]], add_generation_prompt: bool,
               observation: bool = False) -> tuple[str, list[int]]:
        """The rendering of `messages` and the tokens it adds after the last action, minus an end-of-turn
        token already sampled. Appends nothing. observation: the last message is one, and its content is
        encoded as plain text (see `_encode_outside_text`)."""
        full = render(self.tokenizer, messages, add_generation_prompt=add_generation_prompt)
        if not full.startswith(self.text):
            raise TemplatePrefixError(
                "the chat template does not keep earlier turns unchanged (prefix property broken); "
                f"expected the rendering to start with ...{self.text[-80:]!r}, "
                f"got ...{full[len(self.text) - 80:len(self.text)]!r}"
            )
        span = self._observation_span(messages, full) if observation else None
        if span is None:
            ids = _encode(self.tokenizer, full[len(self.text):])
        else:
            start, end = span[0] - len(self.text), span[1] - len(self.text)
            ids = _encode_outside_text(self.tokenizer, self.control, full[len(self.text):], start, end)
        step = self.traj.steps[-1]
        if step.action_ids and step.action_ids[-1] == self.end_of_turn_id:
            if not ids or ids[0] != self.end_of_turn_id:
                raise TemplatePrefixError("the template does not close the assistant turn "
                                          "with the end-of-turn token")
            ids = ids[1:]
        return full, ids

    def _observation_span(self, messages: list[dict[str, str]], full: str) -> tuple[int, int] | None:
        """Where the last message's content (an observation) lies in `full`; None if that cannot be told.

        Rendered again with a placeholder in its place, the text around the content must not change; the
        template may still rewrite the content itself (strip it, say)."""
        placeholder = messages[:-1] + [dict(messages[-1], content=_PLACEHOLDER)]
        rendered = render(self.tokenizer, placeholder, add_generation_prompt=True)
        before, found, after = rendered.partition(_PLACEHOLDER)
        if (not found or not full.startswith(before) or not full.endswith(after)
                or len(before) + len(after) > len(full) or len(before) < len(self.text)):
            return None
        return len(before), len(full) - len(after)

    def _with_observation(self, text: str) -> list[dict[str, str]]:
        return self.traj.messages + [{"role": self.observation_role, "content": text}]

    def observation_ids(self, text: str) -> list[int]:
        """The tokens `add_observation(text)` would append (the template's delta), without appending them:
        to check that the context stays within a length budget before committing to the observation."""
        if self.closed:
            raise RuntimeError("the trajectory is closed")
        rendered = self._delta(self._with_observation(text), add_generation_prompt=True, observation=True)
        self._checked = ((text, len(self.token_ids)), rendered)
        return rendered[1]

    def add_observation(self, text: str, *, reward: float = 0.0, done: bool = False,
                        info: dict[str, Any] | None = None) -> None:
        """Append the environment's answer to the last action (mask 0), ready for the next action."""
        if self.closed:
            raise RuntimeError("the trajectory is closed")
        messages = self._with_observation(text)
        checked, self._checked = self._checked, None
        if checked is not None and checked[0] == (text, len(self.token_ids)):  # rendered by `observation_ids`
            self.text, ids = checked[1]
        else:
            self.text, ids = self._delta(messages, add_generation_prompt=True, observation=True)
        step = self.traj.steps[-1]
        step.observation_text, step.reward, step.done = text, reward, done
        step.info = dict(info or {})
        step.observation_ids = ids
        self.traj.messages = messages
        self._append(ids, mask=0, turn=len(self.traj.steps) - 1)

    def finish(self, reward: float, *, last_observation: str = "",
               done_info: dict[str, Any] | None = None) -> Trajectory:
        """Close the last turn the way the template renders it (mask 0) and set the reward.

        The episode's last observation is `last_observation`, not an `add_observation` call: once one was
        appended, the context already opens the next assistant turn.
        """
        if self.closed:
            raise RuntimeError("the trajectory is closed")
        if self.traj.steps and self.traj.messages[-1]["role"] == self.observation_role:
            raise RuntimeError(
                "finish() closes the last action, but an observation was already appended after it: pass the "
                "last observation as finish(reward, last_observation=...) instead of calling add_observation")
        if self.traj.steps:
            step = self.traj.steps[-1]
            step.observation_text, step.done = last_observation, True
            step.reward = reward
            step.info.update(done_info or {})
            self.text, closing = self._delta(self.traj.messages, add_generation_prompt=False)
            self._append(closing, mask=0, turn=len(self.traj.steps) - 1)
        self.traj.reward = float(reward)
        self.traj.info.update(done_info or {})
        self.closed = True
        return self.traj
