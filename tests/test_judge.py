"""The judge: protocol robustness with a scripted backend, real HTTP endpoints, the local model."""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from course_lib.judge.answers import extract_json, parse_scores
from course_lib.judge.backends import Completion, LocalJudge, OpenAIJudge, YesNo
from course_lib.judge.errors import JudgeAnswerError, JudgeUnavailable
from course_lib.judge.prompts import DEFAULT_RUBRIC, group_prompt, render_messages
from course_lib.judge.quality import judge_agreement
from course_lib.judge.scoring import JudgeMetrics, score_group, score_pointwise
from course_lib.judge.turns import score_turns, score_turns_pointwise
from course_lib.trajectory import Trajectory


class ScriptedJudge:
    """A real backend whose answers are written by the test: a function of the messages it receives.
    It reports its usage like a served judge: a quarter of the prompt's characters as prompt tokens."""

    name = "scripted"

    def __init__(self, answer):
        self.answer = answer  # callable(messages, call_number) -> str
        self.calls: list[list[dict[str, str]]] = []
        self.tokens_reported = 0  # what it reported over all calls, for the tests to compare with

    def complete(self, messages, *, max_tokens=512, temperature=0.0):
        return self.complete_with_usage(messages, max_tokens=max_tokens, temperature=temperature).text

    def complete_with_usage(self, messages, *, max_tokens=512, temperature=0.0):
        self.calls.append(messages)
        prompt_tokens = sum(len(m["content"]) for m in messages) // 4
        self.tokens_reported += prompt_tokens
        return Completion(self.answer(messages, len(self.calls)), prompt_tokens, 0)


PREFIX = [{"role": "system", "content": "Answer questions."},
          {"role": "user", "content": "Capital of France?"}]


def conv(answer: str) -> list[dict[str, str]]:
    return PREFIX + [{"role": "assistant", "content": f"<answer>{answer}</answer>"}]


def ids_in_order(messages) -> list[str]:
    """The trajectory ids in the order the judge reads them, and what each one answered."""
    return re.findall(r'<trajectory id="(t[0-9a-f]+)">', messages[1]["content"])


def answers_by_id(messages) -> dict[str, str]:
    blocks = re.findall(r'<trajectory id="(t[0-9a-f]+)">(.*?)</trajectory>', messages[1]["content"],
                        re.DOTALL)
    return {i: re.search(r"<answer>(.*?)</answer>", body).group(1) for i, body in blocks}


def rate_paris(messages, _call):
    """A correct judge: 1 for Paris, 0.2 otherwise, written in the order it reads, inside chatter."""
    items = [{"id": i, "explanation": "ok", "score": 1.0 if a == "Paris" else 0.2}
             for i, a in answers_by_id(messages).items()]
    return f"Here are my scores:\n```json\n{json.dumps(items)}\n```\nHope this helps."


def test_scores_follow_ids_not_positions(tmp_path):
    group = [conv("Lyon"), conv("Paris"), conv("Nice"), conv("Paris!")]
    orders = set()
    for seed in range(4):
        judge = ScriptedJudge(rate_paris)
        scores = score_group(group, judge=judge, seed=seed, use_cache=False)
        assert [s.score for s in scores] == [0.2, 1.0, 0.2, 0.2]
        orders.add(tuple(answers_by_id(judge.calls[0]).values()))
        # the shared prefix is sent once, the ids are not positions
        assert judge.calls[0][-1]["content"].count("Capital of France?") == 1
        assert all(not i.isdigit() for i in ids_in_order(judge.calls[0]))
    assert len(orders) > 1, "the seed should shuffle the order"


def test_two_orders_average_and_reverse():
    group = [conv("Lyon"), conv("Paris"), conv("Nice")]

    def biased(messages, _call):  # the first trajectory read gets +0.3
        ids = ids_in_order(messages)
        return json.dumps([{"id": i, "explanation": "", "score": 0.3 * (k == 0) + 0.5}
                           for k, i in enumerate(ids)])

    judge = ScriptedJudge(biased)
    scores = score_group(group, judge=judge, two_orders=True, use_cache=False)
    assert len(judge.calls) == 2
    assert ids_in_order(judge.calls[1]) == ids_in_order(judge.calls[0])[::-1]
    # first and last each read first once
    assert sorted(round(s.score, 6) for s in scores) == [0.5, 0.65, 0.65]


def test_malformed_then_valid_on_retry():
    answers = iter(["I think they are all fine!", "[{'id': broken"])

    def answer(messages, call):
        return next(answers) if call <= 2 else rate_paris(messages, call)

    judge, metrics = ScriptedJudge(answer), JudgeMetrics()
    scores = score_group([conv("Paris"), conv("Rome")], judge=judge, use_cache=False, metrics=metrics)
    assert [s.score for s in scores] == [1.0, 0.2] and not any(s.failed for s in scores)
    assert metrics.calls == 3 and metrics.retries == 2 and metrics.failed_groups == 0
    assert "could not be used" in judge.calls[1][-1]["content"]  # the error goes back to the judge


@pytest.mark.parametrize("mutate, error", [
    (lambda items: items[:1], "no score for id"),  # a missing id
    (lambda items: items + [{"id": "t999", "explanation": "", "score": 0.5}], "unknown id"),  # an extra id
    (lambda items: [dict(it, score=7) for it in items], "outside [0, 1]"),  # out of range
])
def test_bad_answer_is_reasked_with_the_error(mutate, error):
    def answer(messages, call):
        items = json.loads(rate_paris(messages, call).split("```json\n")[1].split("\n```")[0])
        return json.dumps(mutate(items)) if call == 1 else json.dumps(items)

    judge = ScriptedJudge(answer)
    scores = score_group([conv("Paris"), conv("Rome")], judge=judge, use_cache=False)
    assert [s.score for s in scores] == [1.0, 0.2]
    assert error in judge.calls[1][-1]["content"]


def test_tiny_overshoot_is_clipped():
    def answer(messages, _call):
        return json.dumps([{"id": i, "score": 1.0000001} for i in ids_in_order(messages)])

    scores = score_group([conv("Paris"), conv("Rome")], judge=ScriptedJudge(answer), use_cache=False)
    assert [s.score for s in scores] == [1.0, 1.0]


def test_all_retries_failing_fails_the_group_and_counts_it():
    judge, metrics = ScriptedJudge(lambda m, c: "Score: great"), JudgeMetrics()
    scores = score_group([conv("Paris"), conv("Rome")], judge=judge, max_retries=2, use_cache=False,
                         metrics=metrics)
    assert len(judge.calls) == 3
    assert all(s.failed and math.isnan(s.score) for s in scores)
    assert metrics.failed_groups == 1 and metrics.groups == 1 and metrics.as_dict()["failure_rate"] == 1.0


def test_cache_hit_makes_no_call(tmp_path):
    group = [conv("Paris"), conv("Rome")]
    first = ScriptedJudge(rate_paris)
    a = score_group(group, judge=first, cache_dir=tmp_path)
    second = ScriptedJudge(lambda m, c: pytest.fail("the cache should have answered"))
    metrics = JudgeMetrics()
    b = score_group(group[::-1], judge=second, cache_dir=tmp_path, metrics=metrics)
    assert len(first.calls) == 1 and not second.calls and metrics.cache_hits == 1
    assert [s.score for s in a] == [s.score for s in b][::-1]
    # failures are not cached: a later run may succeed
    score_group([conv("Oslo"), conv("Bern")], judge=ScriptedJudge(lambda m, c: "no"), cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_cache_hit_in_another_order_when_two_ids_share_a_prefix(tmp_path):
    """Two contents whose hashes start alike get ids of different lengths; the cache (keyed on the
    sorted contents) must hand back each score to its own content whatever the input order."""
    first_of: dict[str, str] = {}
    for k in range(1000):  # two answers whose rendered remainders share the first 2 hex digits
        digest = hashlib.sha256(render_messages(conv(f"answer {k}")[len(PREFIX):]).encode()).hexdigest()[:2]
        if digest in first_of:
            good, bad = conv(first_of[digest]), conv(f"answer {k}")
            break
        first_of[digest] = f"answer {k}"

    def rate_good(messages, _call):
        return json.dumps([{"id": i, "explanation": "", "score": 1.0 if a == first_of[digest] else 0.0}
                           for i, a in answers_by_id(messages).items()])

    scores = score_group([good, bad], judge=ScriptedJudge(rate_good), cache_dir=tmp_path)
    assert [s.score for s in scores] == [1.0, 0.0]
    no_call = ScriptedJudge(lambda m, c: pytest.fail("the cache should have answered"))
    assert [s.score for s in score_group([bad, good], judge=no_call, cache_dir=tmp_path)] == [0.0, 1.0]

    seen = [ScriptedJudge(rate_good) for _ in range(2)]
    for judge, group in zip(seen, ([good, bad], [bad, good])):
        score_group(group, judge=judge, use_cache=False)
    assert set(ids_in_order(seen[0].calls[0])) == set(ids_in_order(seen[1].calls[0])), \
        "the ids must not depend on the input order"


def test_identical_trajectories_are_scored_once():
    judge = ScriptedJudge(rate_paris)
    scores = score_group([conv("Paris"), conv("Rome"), conv("Paris")], judge=judge, use_cache=False)
    assert scores[0] == scores[2] and len(ids_in_order(judge.calls[0])) == 2
    no_call = ScriptedJudge(lambda m, c: pytest.fail("no call expected"))
    same = score_group([conv("Paris")] * 3, judge=no_call, use_cache=False)
    assert not no_call.calls and len({s.score for s in same}) == 1 and not same[0].failed


def test_extract_json_from_chatty_answers():
    assert extract_json('Sure! [{"id": "t1", "score": 0.5}] done') == [{"id": "t1", "score": 0.5}]
    assert extract_json('```json\n{"scores": [1]}\n```') == {"scores": [1]}


@pytest.mark.parametrize("before", [
    "Scores are in [0, 1].\n",  # a JSON-looking range in the prose
    "Ranking: [2, 1]\n",
    'Weights: {"accuracy": 0.7, "efficiency": 0.3}\n',
    'Answer like {"id": "t3f", "explanation": "...", "score": 0.0}.\n',  # the format, quoted
    "Trajectory [1] is best.\n```json\n",  # prose before a fenced answer
])
def test_prose_json_before_the_answer_is_skipped(before):
    after = "\n```" if "```" in before else ""
    items = [{"id": "ta", "explanation": "solved", "score": 1.0},
             {"id": "tb", "explanation": "no", "score": 0.2}]
    expected = {"ta": (1.0, "solved"), "tb": (0.2, "no")}
    assert parse_scores(before + json.dumps(items) + after, ["ta", "tb"]) == expected
    assert parse_scores(before + json.dumps({"scores": items}) + after, ["ta", "tb"]) == expected
    turns = before + json.dumps([{"turn": 1, "score": 0.5}]) + after
    assert parse_scores(turns, ["1"], key="turn") == {"1": (0.5, "")}


def test_unusable_answers_still_get_a_precise_error():
    with pytest.raises(JudgeAnswerError, match="not a number"):  # a boolean is not a score
        parse_scores('[{"id": "ta", "score": true}, {"id": "tb", "score": false}]', ["ta", "tb"])
    with pytest.raises(JudgeAnswerError, match="outside"):  # the score list is found, then checked
        parse_scores('Scores are in [0, 1]: [{"id": "ta", "score": 7}, {"id": "tb", "score": 0}]',
                     ["ta", "tb"])
    with pytest.raises(JudgeAnswerError, match='needs "id" and "score"'):  # nothing shaped like scores
        parse_scores('Ranking: [2, 1]', ["ta", "tb"])
    assert parse_scores('{"turn": 1, "score": 0.5}', ["1"], key="turn") == {"1": (0.5, "")}  # a lone entry


def test_score_turns_one_score_per_turn_and_failure_flag():
    trajectory = PREFIX + [
        {"role": "assistant",
         "content": '<tool_call>{"name": "search", "arguments": {"query": "France"}}</tool_call>'},
        {"role": "tool", "content": "1. Paris is the capital of France."},
        {"role": "assistant", "content": "<answer>Paris</answer>"},
    ]

    def answer(messages, _call):
        turns = re.findall(r'<turn number="(\d+)">', messages[1]["content"])
        return json.dumps([{"turn": int(k), "explanation": "", "score": 0.5 + 0.25 * int(k)} for k in turns])

    scores = score_turns(trajectory, judge=ScriptedJudge(answer))
    assert list(scores) == [0.75, 1.0] and not scores.failed
    metrics = JudgeMetrics()
    failed = score_turns(trajectory, judge=ScriptedJudge(lambda m, c: "[]"), max_retries=1, metrics=metrics)
    assert failed.failed and len(failed) == 2 and metrics.failed_turn_calls == 1


class ScriptedYesNoJudge:
    """A real backend for both ways of judging: P(yes) = 0.7 for pointwise questions, a correct JSON answer
    (rate_paris) for group prompts. Keeps every pointwise prompt it is shown."""

    name = "scripted-yes-no"

    def __init__(self):
        self.prompts: list[list[dict[str, str]]] = []
        self.chats = 0

    def yes_probability(self, messages):
        self.prompts.append(messages)
        return YesNo(0.7, 10)

    def complete(self, messages, *, max_tokens=512, temperature=0.0):
        self.chats += 1
        return rate_paris(messages, self.chats)


def test_pointwise_judge_is_shown_the_rubric():
    """The rubric is part of the cache key, so the judge must read it: the system message of every
    question."""
    rubric = "Only an answer written in French counts as a success."
    judge = ScriptedYesNoJudge()
    scores = score_pointwise([conv("Paris"), conv("Rome")], rubric, judge=judge, use_cache=False)
    turns = score_turns_pointwise(conv("Paris"), rubric, judge=judge)
    assert [s.score for s in scores] == [0.7, 0.7] and list(turns) == [0.7] and len(judge.prompts) == 3
    for prompt in judge.prompts:
        assert prompt[0] == {"role": "system", "content": rubric}
        assert prompt[-1]["content"].endswith("Answer yes or no.")


def test_the_caller_chooses_group_or_pointwise_and_the_result_says_which():
    """A backend that can do both is judged the way the caller asked, never swapped behind its back; the
    result and its metrics say which way it was."""
    judge, total = ScriptedYesNoJudge(), JudgeMetrics()
    group = score_group([conv("Paris"), conv("Rome")], judge=judge, use_cache=False, metrics=total)
    assert group.method == "group_json" and [s.score for s in group] == [1.0, 0.2]
    assert judge.chats == 1 and not judge.prompts and group.metrics.pointwise == 0
    pointwise = score_pointwise([conv("Paris"), conv("Rome")], judge=judge, use_cache=False, metrics=total)
    assert pointwise.method == "pointwise" and [s.score for s in pointwise] == [0.7, 0.7]
    assert judge.chats == 1 and len(judge.prompts) == 2
    assert (pointwise.metrics.pointwise == 1 and pointwise.metrics.calls == 2
            and pointwise.metrics.tokens == 20)
    assert (total.groups, total.pointwise, total.calls) == (2, 1, 3)
    turns = score_turns(conv("Paris"), judge=ScriptedJudge(lambda m, c: '[{"turn": 1, "score": 0.4}]'))
    assert turns.method == "group" and list(turns) == [0.4]
    assert score_turns_pointwise(conv("Paris"), judge=judge).method == "pointwise"
    with pytest.raises(TypeError, match="cannot read P\\(yes\\).*score_group"):  # a text-only backend
        score_pointwise([conv("Paris"), conv("Rome")], judge=ScriptedJudge(rate_paris), use_cache=False)


def test_each_judging_returns_its_own_metrics_and_a_total_is_the_callers():
    """No module-wide counter: a judging's metrics come back on its result; `metrics=` adds them to the
    caller's total. A backend with `complete` alone (no usage) counts calls but no tokens."""
    total = JudgeMetrics()
    first = score_group([conv("Paris"), conv("Rome")], judge=ScriptedJudge(rate_paris), use_cache=False,
                        metrics=total)
    assert first.metrics.calls == 1 and first.metrics.tokens > 0 and first.metrics.groups == 1

    class NoUsage:
        name = "no-usage"

        def complete(self, messages, *, max_tokens=512, temperature=0.0):
            return "no JSON"

    second = score_group([conv("Paris"), conv("Rome")], judge=NoUsage(), max_retries=1, use_cache=False,
                         metrics=total)
    assert (second.failed and second.metrics.calls == 2 and second.metrics.retries == 1
            and second.metrics.tokens == 0)
    assert first.metrics.failed_groups == 0 and second.metrics.failed_groups == 1
    assert (total.groups, total.calls, total.failed_groups, total.tokens) == (2, 3, 1, first.metrics.tokens)
    row = total.as_row()
    assert row["judge_calls"] == 3 and row["judge_pointwise"] == 0 and "judge_failed_groups" not in row


def verified(answers: list[str], rewards: list[float]) -> list[Trajectory]:
    """One group with verifier rewards, as `judge_agreement` takes it."""
    return [Trajectory(task_id="paris", group_id="paris", traj_id=str(k), messages=conv(a), prompt_ids=[],
                       reward=r)
            for k, (a, r) in enumerate(zip(answers, rewards))]


def by_position(messages, _call):
    """A purely positional judge: 1 for the trajectory it reads first, 0 for the last, whatever they say."""
    ids = ids_in_order(messages)
    return json.dumps([{"id": i, "explanation": "", "score": 1 - k / (len(ids) - 1)}
                       for k, i in enumerate(ids)])


def test_judge_agreement_second_judging_reads_the_reversed_order():
    """Two distinct trajectories have two orders only: two seeds often draw the same one, the reversed
    order never does. A group of identical trajectories has a single order and is not compared."""
    groups = ([verified(["Paris", "Rome"], [1.0, 0.0]) for _ in range(8)]
              + [verified(["Paris"] * 2, [1.0, 1.0])])
    judge = ScriptedJudge(by_position)
    r = judge_agreement("search_qa", judge, len(groups), group_size=2, groups=groups, max_retries=0)
    assert len(judge.calls) == 16  # the identical group makes no call
    for first, second in zip(judge.calls[::2], judge.calls[1::2]):
        assert ids_in_order(second) == ids_in_order(first)[::-1]
    assert r["position_bias_rate"] == 1.0  # every score moves; the identical group is not in the denominator


def test_judge_agreement_pointwise_judges_once_and_has_no_order():
    """Pointwise judging has no order to reverse: one judging per group, no position bias to measure."""
    groups = [verified(["Paris", "Rome"], [1.0, 0.0]) for _ in range(3)]
    judge = ScriptedYesNoJudge()
    r = judge_agreement("search_qa", judge, len(groups), group_size=2, groups=groups, method="pointwise")
    assert len(judge.prompts) == 6 and judge.chats == 0 and r["method"] == "pointwise"
    assert r["judgings_per_group"] == 1 and math.isnan(r["position_bias_rate"])
    assert r["pairwise_accuracy"] == 0.5 and r["pairs"] == 3  # 0.7 for both: every pair a tie
    with pytest.raises(ValueError, match="judge_method must be .group. or .pointwise."):
        judge_agreement("search_qa", judge, 1, groups=groups, method="logprob")


def test_layering_errors_below_backends_below_scoring_below_its_quality_harness():
    """judge.errors imports no judge module; answers, prompts and the backends import none but the errors;
    scoring never imports its quality harness, the server, the warm start, the policy's evaluation or the
    trainer; the package's __init__ imports nothing (read from the sources' imports)."""
    import ast
    from pathlib import Path

    import course_lib

    root = Path(course_lib.__file__).parent / "judge"

    def imports(module: str) -> set[str]:
        tree = ast.parse((root / f"{module}.py").read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | \
               {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    judge_modules = {"course_lib.judge"} | {f"course_lib.judge.{m}" for m in (
        "errors", "answers", "prompts", "backends", "scoring", "quality", "server", "warm_start")}
    assert not imports("__init__")
    assert not imports("errors") & judge_modules
    for module in ("answers", "prompts", "backends"):
        assert not imports(module) & (judge_modules - {"course_lib.judge.errors"}), module
    assert not imports("scoring") & {"course_lib.judge", "course_lib.judge.quality",
                                     "course_lib.judge.server", "course_lib.judge.warm_start",
                                     "course_lib.evaluate", "course_lib.train"}


def test_reversed_order_has_its_own_cache_entry(tmp_path):
    group = [conv("Paris"), conv("Rome")]
    forward, backward = ScriptedJudge(by_position), ScriptedJudge(by_position)
    a = score_group(group, judge=forward, cache_dir=tmp_path)
    b = score_group(group, judge=backward, cache_dir=tmp_path, reverse=True)
    assert len(backward.calls) == 1 and [s.score for s in b] == [s.score for s in a][::-1]
    assert len(list(tmp_path.glob("*.json"))) == 2


@pytest.mark.parametrize("failing", [1, 0], ids=["first judging fails", "second judging fails"])
def test_judge_agreement_counts_failures_and_cost_per_group_and_per_judging(failing):
    """A group with one failed judging of its two is a failed group, though half of the judgings succeeded;
    the cost per group is that of both judgings."""
    def one_judging_fails(messages, call):
        return "no JSON here" if call % 2 == failing else rate_paris(messages, call)

    groups = [verified(["Paris", "Rome"], [1.0, 0.0]) for _ in range(3)]
    judge = ScriptedJudge(one_judging_fails)
    r = judge_agreement("search_qa", judge, len(groups), group_size=2, groups=groups, max_retries=0)
    assert len(judge.calls) == 6
    assert r["failure_rate"] == 1.0 and r["failed_judgings_rate"] == 0.5
    assert r["tokens_per_group"] == judge.tokens_reported / 3 == pytest.approx(2 * r["tokens_per_judging"])
    assert (r["seconds_per_group"] == pytest.approx(2 * r["seconds_per_judging"])
            and r["seconds_per_group"] > 0)


# ----- real HTTP endpoints ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_judge_against_the_local_judge_server(policy):
    from course_lib.judge.server import serve_in_thread

    model, tokenizer = policy
    server, base_url = serve_in_thread(port=0, model=model, tokenizer=tokenizer)
    try:
        judge = OpenAIJudge(base_url=base_url, timeout=120, max_retries=0)
        messages = [{"role": "user", "content": "Say yes."}]
        answer = judge.complete_with_usage(messages, max_tokens=4)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert isinstance(answer.text, str) and answer.prompt_tokens == len(prompt)  # the server's usage
        assert 1 <= answer.completion_tokens <= 4
        assert judge.name.endswith(":smollm2-135m")  # the model name comes from /v1/models
        metrics = JudgeMetrics()
        scores = score_group([conv("Paris"), conv("Rome")], "Score 0 to 1.", judge=judge, answer="json",
                             max_tokens=8, max_retries=0, use_cache=False, metrics=metrics)
        assert len(scores) == 2 and metrics.calls == 1  # 8 tokens of a 135M model: valid or counted failure
        assert all(s.failed for s in scores) == (metrics.failed_groups == 1)
    finally:
        server.shutdown()
        server.server_close()


def test_score_group_over_http_reads_the_scores_a_served_judge_wrote():
    """The success path end to end: score_group -> OpenAIJudge -> HTTP -> the judge server's handler -> a
    backend that answers like a correct judge (rate_paris); the scores must come back by id."""
    from course_lib.judge.server import make_handler

    class ServedScript:
        def __init__(self):
            self.prompts = []

        def complete_with_usage(self, messages, *, max_tokens=512, temperature=0.0):
            self.prompts.append(messages)
            return rate_paris(messages, len(self.prompts)), 50, 20

    backend = ServedScript()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(backend, "served-script"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        judge = OpenAIJudge(base_url=f"http://127.0.0.1:{server.server_port}/v1", timeout=10, max_retries=0)
        metrics = JudgeMetrics()
        scores = score_group([conv("Rome"), conv("Paris"), conv("Lyon")], "Score 0 to 1.", judge=judge,
                             max_retries=0, use_cache=False, metrics=metrics)
        finish = []
        for max_tokens in (20, 21):  # the backend always writes 20 tokens: cut at 20, complete under 21
            body = json.dumps({"messages": conv("Paris"), "max_tokens": max_tokens}).encode()
            url = f"http://127.0.0.1:{server.server_port}/v1/chat/completions"
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                finish.append(json.loads(answer.read())["choices"][0]["finish_reason"])
        assert finish == ["length", "stop"]
    finally:
        server.shutdown()
        server.server_close()
    assert [s.score for s in scores] == [0.2, 1.0, 0.2] and not any(s.failed for s in scores)
    assert metrics.calls == 1 and metrics.failed_groups == 0 and metrics.tokens == 70
    assert "Score 0 to 1." in backend.prompts[0][0]["content"] + backend.prompts[0][1]["content"]


def test_judge_server_answers_500_when_its_model_fails():
    from course_lib.judge.server import make_handler

    class Broken:
        def complete_with_usage(self, messages, *, max_tokens=512, temperature=0.0):
            raise RuntimeError("out of memory")

    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(Broken(), "broken"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{server.server_port}/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as failure:
            urllib.request.urlopen(request, timeout=10)
        assert failure.value.code == 500 and "out of memory" in failure.value.read().decode()
    finally:
        server.shutdown()
        server.server_close()


def test_judge_server_reports_each_requests_own_usage():
    """Concurrent requests (ThreadingHTTPServer) wait on the judge's lock; each answer must report
    the tokens of its own generation, not whatever the judge counted meanwhile."""
    from course_lib.judge.server import make_handler

    class SlowJudge:
        """LocalJudge's interface with a fixed answer instead of a model: 100 prompt + 5 completion tokens."""

        def __init__(self):
            self._lock = threading.Lock()

        def complete_with_usage(self, messages, *, max_tokens=512, temperature=0.0):
            with self._lock:
                time.sleep(0.2)
            return Completion("a b c d e", 100, 5)

    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(SlowJudge(), "slow"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    usages = []

    def ask():
        judge = OpenAIJudge(base_url=f"http://127.0.0.1:{server.server_port}/v1", timeout=10, max_retries=0)
        answer = judge.complete_with_usage([{"role": "user", "content": "hi"}], max_tokens=8)
        usages.append(answer.prompt_tokens + answer.completion_tokens)

    try:
        threads = [threading.Thread(target=ask) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.shutdown()
        server.server_close()
    assert usages == [105, 105, 105]


def test_endpoint_that_sleeps_times_out_with_a_clear_error():
    class Sleepy(BaseHTTPRequestHandler):
        def do_POST(self):
            time.sleep(3)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sleepy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/v1"
    try:
        judge = OpenAIJudge(base_url=url, model="m", timeout=0.3, max_retries=1, backoff=0.05)
        t0 = time.time()
        with pytest.raises(JudgeUnavailable, match=re.escape(url)) as info:
            judge.complete([{"role": "user", "content": "hi"}], max_tokens=4)
        assert "2 tries" in str(info.value) and time.time() - t0 < 5
    finally:
        server.shutdown()
        server.server_close()


def test_refused_endpoint_raises_judge_unavailable():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    judge = OpenAIJudge(base_url=url, model="m", timeout=1, max_retries=2, backoff=0.01)
    with pytest.raises(JudgeUnavailable, match=f"{re.escape(url)}.*3 tries"):
        score_group([conv("Paris"), conv("Rome")], judge=judge, use_cache=False)


def serve_status(status: int, message: str) -> tuple[ThreadingHTTPServer, list[str]]:
    """A real endpoint that answers every chat completion with `status` and an OpenAI-style error body."""
    posts: list[str] = []

    class Refusing(BaseHTTPRequestHandler):
        def do_POST(self):
            posts.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
            body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, posts


@pytest.mark.parametrize("status", [400, 413, 422])
def test_rejected_request_fails_the_group_not_the_run(status):
    """A client error (e.g. 400 "prompt too long") fails this group, with the server's text as the reason,
    and is not re-asked: the re-ask would be longer still."""
    server, posts = serve_status(status, "prompt is too long: 9000 tokens > 8192")
    try:
        judge = OpenAIJudge(base_url=f"http://127.0.0.1:{server.server_port}/v1", model="m", timeout=5)
        metrics = JudgeMetrics()
        scores = score_group([conv("Paris"), conv("Rome")], judge=judge, max_retries=2, use_cache=False,
                             metrics=metrics)
        turns = score_turns(conv("Paris"), judge=judge, metrics=metrics)
    finally:
        server.shutdown()
        server.server_close()
    assert all(s.failed and math.isnan(s.score) for s in scores) and turns.failed
    assert "prompt is too long" in scores[0].explanation and str(status) in scores[0].explanation
    assert metrics.failed_groups == 1 and metrics.failed_turn_calls == 1 and metrics.calls == 2
    assert len(posts) == 3 and '"logprobs"' in posts[0]  # first, the one question whether it gives logprobs


@pytest.mark.parametrize("status, hint", [(401, "API key"), (403, "API key"), (404, "base_url")])
def test_configuration_errors_still_raise_with_a_hint(status, hint):
    server, _ = serve_status(status, "nope")
    url = f"http://127.0.0.1:{server.server_port}/v1"
    try:
        judge = OpenAIJudge(base_url=url, model="m", timeout=5)
        with pytest.raises(JudgeUnavailable, match=f"{re.escape(url)}.*{status}.*{hint}"):
            score_group([conv("Paris"), conv("Rome")], judge=judge, use_cache=False)
    finally:
        server.shutdown()
        server.server_close()


def test_openai_judge_reads_env_vars(monkeypatch):
    monkeypatch.setenv("COURSE_JUDGE_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("COURSE_JUDGE_MODEL", "judge-model")
    judge = OpenAIJudge()
    assert judge.base_url == "http://127.0.0.1:1/v1" and judge.name == "openai:http://127.0.0.1:1/v1:judge-model"


# ----- the local model ----------------------------------------------------------------------------------


def test_local_pointwise_judge_returns_valid_scores(policy):
    model, tokenizer = policy
    judge = LocalJudge(model=model, tokenizer=tokenizer)
    scores = score_pointwise([conv("Paris"), conv("Banana")], judge=judge, use_cache=False)
    assert all(0.0 <= s.score <= 1.0 and not s.failed for s in scores)
    assert scores.metrics.calls == 2 and scores.metrics.tokens > 0  # the prompt tokens of both questions
    turns = score_turns_pointwise(conv("Paris"), judge=judge)
    assert len(turns) == 1 and 0.0 <= turns[0] <= 1.0


def long_group(n_tokens_each: int = 1500) -> dict[str, list[dict[str, str]]]:
    """Two trajectories of about `n_tokens_each` tokens each, in several tool messages."""
    words = " ".join(f"fact{k}" for k in range(n_tokens_each // 4))
    return {i: [{"role": "assistant", "content": f"<answer>{i}</answer>"}] +
               [{"role": "tool", "content": f"{i} result {m}: {words}"[:1400]}
                for m in range(n_tokens_each // 350)]
            for i in ("ta", "tb")}


def test_local_judge_cuts_the_trajectories_not_the_rubric(policy):
    """A prompt over max_prompt_tokens keeps its rubric, its answer format and the ids to score; the
    trajectories lose their middle."""
    model, tokenizer = policy
    judge = LocalJudge(model=model, tokenizer=tokenizer, max_prompt_tokens=700)
    messages = group_prompt(PREFIX, long_group(), DEFAULT_RUBRIC)
    full = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                     add_special_tokens=False)["input_ids"]
    ids = judge._encode(messages)[0].tolist()
    seen = tokenizer.decode(ids)
    assert len(full) > 1500 and len(ids) <= 700
    for kept in (DEFAULT_RUBRIC, "Answer with a JSON list only", "Capital of France?",
                 "Score every trajectory id: ta, tb."):
        assert kept in seen, f"{kept[:40]!r} was cut"
    assert "tokens cut" in seen
    _, prompt_tokens, _ = judge.complete_with_usage(messages, max_tokens=1)
    assert prompt_tokens <= 700


def test_local_judge_too_small_for_its_rubric_fails_the_group(policy):
    """When the instructions alone exceed max_prompt_tokens, the group fails with the token counts, no
    crash: in process (group and pointwise) and behind the judge server, which answers 400 as vLLM would."""
    from course_lib.judge.server import serve_in_thread

    model, tokenizer = policy
    metrics = JudgeMetrics()

    def check(judge, score=score_group) -> None:
        scores = score([conv("Paris"), conv("Rome")], DEFAULT_RUBRIC, judge=judge, use_cache=False,
                       metrics=metrics)
        assert all(s.failed for s in scores) and "max_prompt_tokens=40" in scores[0].explanation

    small = LocalJudge(model=model, tokenizer=tokenizer, max_prompt_tokens=40)
    check(small)
    check(small, score_pointwise)
    server, base_url = serve_in_thread(port=0, model=model, tokenizer=tokenizer, max_prompt_tokens=40)
    try:
        check(OpenAIJudge(base_url=base_url, timeout=60, max_retries=0))
    finally:
        server.shutdown()
        server.server_close()
    assert metrics.failed_groups == 3


def test_local_judges_of_different_models_do_not_share_the_cache(tmp_path, policy):
    """The cache key names the judge's model: another model is asked again, the same model is not."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    model, tokenizer = policy
    tiny = AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=model.config.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2))
    tiny.save_pretrained(tmp_path / "other-judge")
    other = AutoModelForCausalLM.from_pretrained(tmp_path / "other-judge")  # a real checkpoint folder
    group, cache = [conv("Paris"), conv("Rome")], tmp_path / "cache"

    def hits(judge_model, **kwargs) -> int:
        metrics = JudgeMetrics()
        judge = LocalJudge(model=judge_model, tokenizer=tokenizer, **kwargs)
        score_pointwise(group, judge=judge, cache_dir=cache, metrics=metrics)
        return metrics.cache_hits

    assert hits(model) == 0
    assert hits(other) == 0, "another model must not read the first model's answers"
    assert hits(model) == 1 and hits(other) == 1  # the same model does
    assert hits(model, name="my-judge") == 0 and hits(other, name="my-judge") == 1  # a given name is the id
    assert len(list(cache.glob("*.json"))) == 3


def test_summarize_env_needs_the_judge(tokenizer):
    from course_lib.envs import load_tasks
    from course_lib.envs.summarize import SummarizeEnv
    from course_lib.rollout import expert_rollout

    tasks = load_tasks("summarize", "test", limit=2)
    demos = expert_rollout(tokenizer, SummarizeEnv, tasks)
    assert all(d.reward == 0.0 and d.info["needs_judge"] for d in demos)
    assert tasks[0]["subject"] in demos[0].messages[-1]["content"]


# ----- training with the judge --------------------------------------------------------------------------


def _judge_run(tmp_path, judge, **overrides):
    from course_lib.checkpoint import read_metrics
    from course_lib.train.config import TrainConfig
    from course_lib.train.loop import train

    reward = {"source": "judge", **overrides.pop("reward", {})}
    config = TrainConfig(**{**dict(env="summarize", run_dir=str(tmp_path / "run"), steps=2, tasks_per_step=2,
                                   group_size=2, rollout=dict(max_turns=2, max_new_tokens=16), eval_every=0,
                                   eval_tasks=0, checkpoint_every=0, progress=False, reward=reward),
                            **overrides})
    result = train(config, judge=judge)
    return result, [r for r in read_metrics(config.run_dir) if r["kind"] == "train"]


def test_rl_run_rewarded_only_by_the_local_judge(tmp_path, policy, monkeypatch):
    """summarize has no verifier: every reward of this short RL run comes from the embedded model as judge,
    asked pointwise because the run says so; each step's row logs what the judge cost."""
    # an empty judge cache: judgings cached by earlier runs on this machine would cost no calls and no tokens
    monkeypatch.setattr("course_lib.judge.scoring._default_cache_dir", lambda: tmp_path / "judge-cache")
    model, tokenizer = policy
    judge = LocalJudge(model=model, tokenizer=tokenizer)
    result, rows = _judge_run(tmp_path, judge=judge, reward=dict(judge_method="pointwise"))
    assert result["step"] == 2 and len(rows) == 2
    for r in rows:
        assert r["judge_failed_groups"] == 0 and 0.0 <= r["reward"] <= 1.0
        assert r["judge_groups"] == 2 and r["judge_pointwise"] == 2
        assert r["judge_calls"] + r["judge_cache_hits"] + r["judge_skipped_identical"] > 0
        assert (r["judge_tokens"] > 0) == (r["judge_calls"] > 0)  # every real call reports its tokens
    assert rows[0]["judge_calls"] > 0  # the first step found nothing cached
    # P(yes) scores are continuous, so a group almost never ties: at least one update really happened
    assert any(not r.get("skipped_update") for r in rows)
    assert all(r["success"] == 0.0 for r in rows)  # success still comes from the verifier, which has none


def test_rl_run_with_a_judge_that_rejects_the_prompt_skips_and_counts(tmp_path):
    """An endpoint that answers 400 "prompt too long": each group fails and is skipped, the run goes on."""
    server, posts = serve_status(400, "prompt is too long")
    try:
        judge = OpenAIJudge(base_url=f"http://127.0.0.1:{server.server_port}/v1", model="m", timeout=5)
        result, rows = _judge_run(tmp_path, judge=judge, model="smollm2-135m", steps=1)
    finally:
        server.shutdown()
        server.server_close()
    assert result["step"] == 1 and rows[0]["judge_failed_groups"] == 2 and rows[0].get("skipped_update")


def test_rl_run_with_a_judge_that_answers_garbage_skips_and_counts(tmp_path):
    """A judge that never answers in JSON: each group is re-asked, then counted as failed and not
    trained on."""
    garbage = ScriptedJudge(lambda messages, call: "I like all of them!")
    result, rows = _judge_run(tmp_path, judge=garbage, model="smollm2-135m", steps=1)
    assert rows[0]["judge_failed_groups"] == 2 and rows[0].get("skipped_update")
    assert len(garbage.calls) > 2  # retried before giving up
