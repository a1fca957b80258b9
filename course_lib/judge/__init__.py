"""LLM-as-a-judge: rewards from a model that reads trajectories, for tasks without a verifier.

The package's map (import each name from its module; this file re-exports nothing). From the bottom up:

* `errors`: JudgeUnavailable (raise: a configuration problem), JudgeRequestRejected (fails one group),
  JudgeAnswerError (an answer that cannot be used; re-asked).
* `answers`: reading what a judge answers: `parse_scores` (the JSON list), `expected_digit` (the score
  digits' probabilities at a forced position), `extract_json`.
* `prompts`: what the judge is shown: the rubrics (`DEFAULT_RUBRIC`, `TURN_RUBRIC`), `render_messages`,
  `shared_prefix`, `group_prompt`, `forced_group_prompt` with `SCORES_HEADER` and `score_line`, the
  pointwise and turn prompts.
* `backends`: the models a judge asks, and their contract as runtime-checkable Protocols, one per
  capability: `ChatBackend` (``name`` and ``complete``: every backend), `UsageBackend` (token counts),
  `YesNoBackend` (P(yes), pointwise judging), `ForcedBackend` and `ForcingCheck` (forced score digits).
  `LocalJudge` (in-process transformers) satisfies all of them, `OpenAIJudge` (any OpenAI-compatible
  endpoint) all but `YesNoBackend`.
* `scoring`: the judges of a group: `score_group`, `score_pointwise` (each takes the backend as the
  keyword ``judge=``), what they return (`JudgeScore`, `GroupScores`, `JudgeMetrics`) and `group_layout`.
* `turns`: the turn judges, built on `scoring`: `score_turns`, `score_turns_pointwise` and `TurnScores`.
* `quality`: how far to trust a judge: `judge_agreement` against a verifier, `pairwise_agreement`,
  `verifier_groups`, `bootstrap_interval`.
* `server`: a small OpenAI-compatible server answering from a local model
  (``python -m course_lib.judge.server --port 8011``; `serve_in_thread` in tests and notebooks).
* `warm_start`: the embedded model fine-tuned as a group judge on verifier-labelled groups
  (`ensure_judge_warm_start`, `labelled_groups`, `JUDGE_WARM_START`).

A new backend is one class that satisfies the Protocols of the judgings it should do, inheriting nothing:
a ``name`` (part of the cache key: it names the model) and ``complete(messages, *, max_tokens,
temperature) -> str`` make it a `ChatBackend`, enough for `score_group` (JSON answers) and `score_turns`;
add ``yes_probability`` for the pointwise judges, ``forced_scores`` for forced group reads. Each judge
checks its backend with ``isinstance`` before asking and names what is missing.

Nothing here imports the trainer (`course_lib.train`) or the course's own helpers (notebook setup,
exercises, grading, solutions): the trainer imports the judge, never the reverse.
"""
