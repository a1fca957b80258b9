"""What the judge is shown: the rubrics, trajectories rendered as text, content ids, and the prompts.

`course_lib.judge.scoring` asks these prompts and reads the answers. Three prompts:

* `group_prompt`: the rubric and the JSON answer format (system), the context every trajectory shares
  once, then each trajectory's remainder under its id, then the list of ids to score;
  `forced_group_prompt` is the same group with a one-digit-per-line answer format, whose answer the
  judge does not write: `course_lib.judge.scoring` forces its start (`SCORES_HEADER`, then `score_line(id)`)
  and reads the digit's probabilities;
* `pointwise_prompt`: one trajectory alone, the rubric as the system message, a yes/no question;
* `turn_prompt` (and `turn_pointwise_prompt`): the turns of one trajectory, numbered.
"""

from __future__ import annotations

import hashlib

from course_lib.trajectory import Trajectory

DEFAULT_RUBRIC = """\
Judge how well each agent trajectory accomplished the task, compared with the others in the group.
- An agent that reached the goal (a correct final answer, the target reached) must score clearly
  higher than any agent that did not.
- Among agents that reached the goal, the one that got there with fewer wasted steps (no repeated,
  malformed or useless tool calls) scores higher.
- Among agents that did not reach the goal, give partial credit for real progress: useful tool
  calls, relevant information found, getting closer to the target.
- Make the gaps between scores reflect the gaps in quality: near-equal work gets near-equal
  scores, very different work gets very different scores.
Scores are numbers from 0 (useless) to 1 (perfect)."""

TURN_RUBRIC = """\
Judge each turn of one agent trajectory on its own: given only what the agent knew at that moment
(the task and the earlier observations), was this action a useful next step?
- 1: a well-formed action that clearly moves toward the goal (the right search, the right move, a
  correct final answer).
- about 0.5: a reasonable action that helps little (a redundant search, a detour).
- 0: a malformed action, a repeated useless call, or a wrong or unsupported final answer.
Scores are numbers from 0 to 1."""

# The pointwise questions, asked after the rendered trajectory (or the turns up to the one judged).
TASK_QUESTION = "Question: did the agent complete the task correctly? Answer yes or no."
TURN_QUESTION = ("Was the last action a useful, well-formed next step toward the goal, given what the agent "
                 "knew? Answer yes or no.")
# A reference-guided group prompt shows the task's known answer (search_qa's, lookup's) before the
# trajectories.
REFERENCE_TEXT = "The reference answer to this task (a correct final answer): {reference}"
# Characters of one message shown to the judge; long tool outputs are cut in the middle.
MAX_MESSAGE_CHARS = 1500


# ----- rendering trajectories ----------------------------------------------------------------------


def clip_text(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - limit} characters cut ...] {text[-half:]}"


def render_messages(messages: list[dict[str, str]]) -> str:
    """Chat messages as plain text, one block per message: ``[role]`` then the content."""
    return "\n".join(f"[{m['role']}]\n{clip_text(str(m.get('content', '')))}" for m in messages)


def shared_prefix(conversations: list[list[dict[str, str]]]) -> int:
    """How many leading messages all conversations have in common."""
    n = min(len(c) for c in conversations)
    for i in range(n):
        if any(c[i] != conversations[0][i] for c in conversations[1:]):
            return i
    return n


def short_ids(contents: list[str]) -> list[str]:
    """A short random-looking id per distinct content ("t3f"), derived from the content, not the position.

    Deriving the id from the content (not from the seed) means a second order shows the judge the
    same ids: only the positions change, which is what the position-bias meter needs. When two
    contents share a hash prefix the later one gets a longer id, so pass the contents sorted: then
    the ids depend only on the set of contents, as the cache key does.
    """
    ids: list[str] = []
    for content in contents:
        digest = hashlib.sha256(content.encode()).hexdigest()
        for width in range(2, 12):
            candidate = "t" + digest[:width]
            if candidate not in ids:
                ids.append(candidate)
                break
    return ids


def as_conversation(item: Trajectory | list[dict[str, str]]) -> list[dict[str, str]]:
    return item.messages if isinstance(item, Trajectory) else item


# ----- prompts -------------------------------------------------------------------------------------


def _group_text(prefix: list[dict[str, str]], remainders: dict[str, list[dict[str, str]]],
                reference: str | None = None) -> str:
    """The user message of a group prompt: the shared context once, the task's reference answer when there
    is one (`REFERENCE_TEXT`), each trajectory under its id, the ids."""
    parts = ["All trajectories start from this shared context:", "<context>", render_messages(prefix),
             "</context>", ""]
    if reference is not None:
        parts += [REFERENCE_TEXT.format(reference=reference), ""]
    for i in remainders:
        parts += [f'<trajectory id="{i}">', render_messages(remainders[i]) or "(no further messages)",
                  "</trajectory>", ""]
    parts.append(f"Score every trajectory id: {', '.join(remainders)}.")
    return "\n".join(parts)


def group_prompt(prefix: list[dict[str, str]], remainders: dict[str, list[dict[str, str]]],
                 rubric: str, reference: str | None = None) -> list[dict[str, str]]:
    """The judge's messages: rubric and answer format (system), shared context once, then each trajectory
    by id."""
    example = ", ".join(f'{{"id": "{i}", "explanation": "...", "score": 0.0}}' for i in list(remainders)[:2])
    system = (f"You are a strict, fair judge of AI agent trajectories.\n\n{rubric}\n\n"
              f"Answer with a JSON list only, one entry per trajectory id, like [{example}, ...]. "
              f"Write the explanation (one short sentence) before the score.")
    return [{"role": "system", "content": system},
            {"role": "user", "content": _group_text(prefix, remainders, reference)}]


# The forced answer: the judge's answer starts with this header, then one `score_line(id)` per id, each
# followed by one digit 0..9 (score = digit / 9) that is read from the next-token distribution.
SCORES_HEADER = "Scores:\n"


# Characters of a trajectory's last action recalled on its score line.
RECAP_CHARS = 80


def score_line(trajectory_id: str, remainder: list[dict[str, str]] | None = None) -> str:
    """The forced start of one id's answer line; the score digit comes next.

    Without `remainder`: "id t3f2: ". With it (the trajectory's messages after the shared context), the line
    recalls how many actions it took and its last action:
    'id t3f2 (2 actions, last: <answer>Nadale</answer>): '.
    A small judge reads poorly across a long prompt: at the score it would have to find the trajectory by
    its id and then its ending; the recap puts the ending (and, with `REFERENCE_TEXT`, what to compare it
    with) next to the digit. The whole trajectory is still in the prompt above.
    """
    if remainder is None:
        return f"id {trajectory_id}: "
    actions = [m for m in remainder if m["role"] == "assistant"]
    last = " ".join(str(actions[-1].get("content", "")).split()) if actions else "none"
    last = last if len(last) <= RECAP_CHARS else last[:RECAP_CHARS - 3] + "..."
    return f"id {trajectory_id} ({len(actions)} action{'s' * (len(actions) != 1)}, last: {last}): "


def forced_group_prompt(prefix: list[dict[str, str]], remainders: dict[str, list[dict[str, str]]],
                        rubric: str, reference: str | None = None) -> list[dict[str, str]]:
    """The group as in `group_prompt`, with an answer format of one line per id, ``id <id>: <digit>``.

    The digit d stands for the score d / 9 (0 useless, 9 perfect): a rubric's "scores from 0 to 1" is
    read on that scale. The judge never writes the answer: `course_lib.judge.scoring.score_group` forces
    `SCORES_HEADER` and each `score_line` and reads the digit's probabilities.
    """
    # made-up ids and recaps (see `score_line`): no score is suggested for a real trajectory
    example = "id t5c (3 actions, last: ...): 8\nid t9e (1 action, last: ...): 3"
    system = (f"You are a strict, fair judge of AI agent trajectories.\n\n{rubric}\n\n"
              f"Write each score as one digit from 0 (useless) to 9 (perfect): the digit d means the score "
              f"d/9. Answer with '{SCORES_HEADER.strip()}' and then one line per trajectory id, like:\n"
              f"{SCORES_HEADER}{example}")
    return [{"role": "system", "content": system},
            {"role": "user", "content": _group_text(prefix, remainders, reference)}]


def pointwise_prompt(prefix: list[dict[str, str]], remainder: list[dict[str, str]],
                     rubric: str) -> list[dict[str, str]]:
    """One trajectory alone, the rubric as the system message, ending in the yes/no question."""
    text = f"{render_messages(prefix)}\n{render_messages(remainder)}\n\n{TASK_QUESTION}"
    return [{"role": "system", "content": rubric}, {"role": "user", "content": text}]


def trajectory_turns(trajectory: Trajectory | list[dict[str, str]]
                     ) -> tuple[list[dict[str, str]], list[tuple[str, str]]]:
    """(the messages before the first action, [(action, observation) per turn])."""
    messages = as_conversation(trajectory)
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    if isinstance(trajectory, Trajectory) and trajectory.steps:
        return messages[:first], [(s.action_text, s.observation_text) for s in trajectory.steps]
    turns: list[tuple[str, str]] = []
    for m in messages[first:]:
        if m["role"] == "assistant":
            turns.append((m["content"], ""))
        elif turns:
            turns[-1] = (turns[-1][0], (turns[-1][1] + "\n" + m["content"]).strip())
    return messages[:first], turns


def turn_prompt(context: list[dict[str, str]], turns: list[tuple[str, str]],
                rubric: str) -> list[dict[str, str]]:
    """The turn judge's messages: rubric and answer format (system), the context, then each turn by number."""
    system = (f"You are a strict, fair judge of the steps of an AI agent.\n\n{rubric}\n\n"
              'Answer with a JSON list only, one entry per turn, like [{"turn": 1, "explanation": "...", '
              '"score": 0.0}, ...]. Write the explanation (one short sentence) before the score.')
    parts = ["<context>", render_messages(context), "</context>", ""]
    for k, (action, observation) in enumerate(turns, 1):
        parts += [f'<turn number="{k}">', f"[action]\n{clip_text(action)}",
                  f"[observation]\n{clip_text(observation) or '(the episode ended)'}", "</turn>", ""]
    parts.append(f"Score every turn: {', '.join(str(k) for k in range(1, len(turns) + 1))}.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(parts)}]


def turn_pointwise_prompt(context: list[dict[str, str]], turns: list[tuple[str, str]],
                          rubric: str) -> list[dict[str, str]]:
    """The turns so far, the rubric as the system message (without the JSON answer format, which does not
    apply), ending in the yes/no question about the last turn."""
    user = turn_prompt(context, turns, rubric)[1]["content"]
    return [{"role": "system", "content": rubric}, {"role": "user", "content": f"{user}\n{TURN_QUESTION}"}]
