"""Judge backends: the models a judge asks. They answer; `course_lib.judge.scoring` decides what to ask
and counts.

The contract is a few small `typing.Protocol` classes, one per capability, each runtime-checkable: a backend
is any object that has the methods, it inherits from nothing. Every backend has a ``name`` (part of the
judge's cache key, so it names the model); what else it has decides which judgings it can do:

* `ChatBackend`: ``complete(messages, *, max_tokens, temperature) -> str``, the chat answer: group judging
  with a JSON answer (`score_group(answer="json")`) and turn judging (`score_turns`); a scripted test
  judge may implement only this;
* `UsageBackend` (optional): ``complete_with_usage(...) -> Completion``, the same answer with this call's
  token counts, which the judge records in its metrics (a backend without it counts 0 tokens);
* `YesNoBackend`: ``yes_probability(messages) -> YesNo``, for pointwise judging
  (`course_lib.judge.scoring.score_pointwise`, `course_lib.judge.turns.score_turns_pointwise`);
* `ForcedBackend`: ``forced_scores(messages, header, lines) -> ForcedScores``, for forced-position group
  judging (`course_lib.judge.scoring.score_group`, ``answer="forced"``), and optionally `ForcingCheck`:
  ``can_force() -> bool``, whether it can right now (an endpoint is asked once).

Backends keep no running totals: every call returns its own usage, and the judge that asked adds it to
the metrics it returns to its caller. Two backends ship here:

* :class:`LocalJudge`: a model run in-process with transformers (the embedded SmolLM2-135M by default,
  or any hub model by name on a machine that is online, e.g. ``LocalJudge("Qwen/Qwen2.5-1.5B-Instruct")``);
  it satisfies all five Protocols;
* :class:`OpenAIJudge`: any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp's server, a hosted API,
  or ``python -m course_lib.judge.server``): chat completions, and the completions API with
  ``logprobs`` for forced-position scores where the server has it; all but `YesNoBackend` (a served
  model answers text, so it is not judged pointwise).
"""
from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol, runtime_checkable

from course_lib.judge.errors import JudgeRequestRejected, JudgeUnavailable

# The score digits a forced-position read looks for: digit d at index d.
SCORE_DIGITS = "0123456789"


class Completion(NamedTuple):
    """One chat answer and what it cost: prompt and completion tokens of this call alone."""

    text: str
    prompt_tokens: int
    completion_tokens: int


class YesNo(NamedTuple):
    """A pointwise verdict: P(yes) / (P(yes) + P(no)) for the answer's first token, and the prompt's
    tokens."""

    p_yes: float
    prompt_tokens: int


class ForcedScores(NamedTuple):
    """Forced-position reads: per forced line, the probability of each score digit 0..9 as the next token
    (the variants of one digit, such as "7" and " 7", summed), and the tokens read for them."""

    digit_probs: list[list[float]]
    tokens: int


class TextCompletion(NamedTuple):
    """A raw-text completion (no chat template) and, per generated token, its text, its log-probability
    and the `top` most likely tokens with theirs, as the completions API's ``logprobs`` reports them."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]


Messages = list[dict[str, str]]


@runtime_checkable
class ChatBackend(Protocol):
    """A backend that answers chat prompts: all that group judging in JSON and turn judging need."""

    @property
    def name(self) -> str:
        """The model's name: part of the judge's cache key, so two models never share cached answers."""
        ...

    def complete(self, messages: Messages, *, max_tokens: int = 512, temperature: float = 0.0) -> str:
        """The chat answer to `messages`, at most `max_tokens` long (greedy at temperature 0)."""
        ...


@runtime_checkable
class UsageBackend(Protocol):
    """A backend that reports each chat call's token counts (optional: one without counts 0 tokens)."""

    def complete_with_usage(self, messages: Messages, *, max_tokens: int = 512,
                            temperature: float = 0.0) -> Completion:
        """The chat answer and the prompt and completion tokens of this call alone."""
        ...


@runtime_checkable
class YesNoBackend(Protocol):
    """A backend that reads P(yes) from its next-token distribution: what pointwise judging needs."""

    @property
    def name(self) -> str:
        """The model's name (see `ChatBackend.name`)."""
        ...

    def yes_probability(self, messages: Messages) -> YesNo:
        """P(yes) / (P(yes) + P(no)) for the answer's first token, and the prompt's tokens."""
        ...


@runtime_checkable
class ForcedBackend(Protocol):
    """A backend that reads the score digits' probabilities at forced positions: forced group judging."""

    @property
    def name(self) -> str:
        """The model's name (see `ChatBackend.name`)."""
        ...

    def forced_scores(self, messages: Messages, header: str, lines: list[str]) -> ForcedScores:
        """Per line, P(digit d) for d = 0..9 as the next token after ``prompt + header + line``."""
        ...


@runtime_checkable
class ForcingCheck(Protocol):
    """A `ForcedBackend` that can say whether forced reads work now (optional: without it, they do)."""

    def can_force(self) -> bool:
        """Whether forced reads work (an endpoint may serve chat completions only)."""
        ...


def chatml(messages: list[dict[str, str]]) -> str:
    """Chat messages in the ChatML template (SmolLM2, Qwen2.5), ending with an open assistant turn."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return f"{turns}<|im_start|>assistant\n"


class LocalJudge:
    """A judge run in-process with transformers (greedy decoding by default).

    name: any `load_policy` name ("smollm2-135m", the default, a checkpoint folder, a hub id such as
    "Qwen/Qwen2.5-1.5B-Instruct", which needs the hub: online, e.g. on Colab); with `model` and
    `tokenizer` already loaded, the name of that model (default: its ``name_or_path``). dtype: the
    weights' dtype (`load_policy`'s choice by default: fp32 weights with autocast; a judge only reads, so
    ``dtype="float16"`` halves the memory on a T4).
    The name is part of `self.name`, hence of the cache key: give weights that share a
    ``name_or_path`` (a policy being trained) a name of their own.

    It answers chat prompts (`complete`, for group and turn judging) and reads P(yes) from the
    next-token distribution (`yes_probability`, for pointwise judging); which one is used is the
    caller's choice (`score_group` or `score_pointwise`), not the backend's.

    max_prompt_tokens: a longer prompt is shortened in the middle of its longest non-system message
    (the trajectories of a group prompt, see `_fit_prompt`), so the rubric and the answer format
    survive; when even that cannot fit, `JudgeRequestRejected` fails the group.
    """

    def __init__(self, name: str | None = None, model=None, tokenizer=None, *, device: str | None = None,
                 dtype: str | None = None, max_prompt_tokens: int = 6000):
        if model is None or tokenizer is None:
            from course_lib.models import EMBEDDED, load_policy

            name = name or EMBEDDED
            model, tokenizer = load_policy(name, device=device, dtype=dtype)
        self.model, self.tokenizer = model, tokenizer
        # The model's name is in the cache key: two judge models must never share cached answers.
        self.name = f"local:{name or getattr(model, 'name_or_path', '') or type(model).__name__}"
        self.max_prompt_tokens = max_prompt_tokens
        self._lock = threading.Lock()  # one forward pass at a time (the server answers from threads)

    def _prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _fit_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's token ids, at most `max_prompt_tokens` of them.

        A longer prompt loses tokens in the middle of its longest message that is not the system's: in
        a group prompt that is the trajectories, so the rubric and the answer format (the system
        message), the task (the start of the user message) and the list of ids to score (its end) are
        kept; a middle trajectory may be cut away. (Cutting from the left, as before, lost the rubric.)
        Raises `JudgeRequestRejected` naming the token counts when the rest alone does not fit.
        """
        ids = self._prompt_ids(messages)
        content: list[int] = []
        for _ in range(3):  # re-tokenizing the cut text can move a few tokens: check again
            excess = len(ids) - self.max_prompt_tokens
            if excess <= 0:
                return ids
            cuttable = [i for i, m in enumerate(messages) if m["role"] != "system"]
            longest = max(cuttable, key=lambda i: len(messages[i]["content"]), default=None)
            content = [] if longest is None else \
                self.tokenizer(messages[longest]["content"], add_special_tokens=False)["input_ids"]
            keep = len(content) - excess - 32  # 32: room for the marker below
            if keep < 0:
                break
            head, tail = content[:keep // 2], content[len(content) - (keep - keep // 2):]
            cut = (f"{self.tokenizer.decode(head)}\n[... {len(content) - keep} tokens cut: the judge reads "
                   f"at most {self.max_prompt_tokens} ...]\n{self.tokenizer.decode(tail)}")
            messages = messages[:longest] + [{**messages[longest], "content": cut}] + messages[longest + 1:]
            ids = self._prompt_ids(messages)
        raise JudgeRequestRejected(
            f"the judge prompt has {len(ids)} tokens and cutting its trajectories cannot bring it to "
            f"max_prompt_tokens={self.max_prompt_tokens}: the instructions alone take about "
            f"{len(ids) - len(content)}; raise max_prompt_tokens or shorten the rubric")

    def _encode(self, messages: list[dict[str, str]]):
        import torch

        return torch.tensor([self._fit_prompt(messages)], device=self.model.device)

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int = 512,
                 temperature: float = 0.0) -> str:
        return self.complete_with_usage(messages, max_tokens=max_tokens, temperature=temperature).text

    def complete_with_usage(self, messages: list[dict[str, str]], *, max_tokens: int = 512,
                            temperature: float = 0.0) -> Completion:
        """The answer and the token counts of this call alone, whatever other threads do meanwhile."""
        import torch

        from course_lib.models import autocast_context, end_of_turn_id

        input_ids = self._encode(messages)
        sample = temperature > 0
        with self._lock, torch.no_grad(), autocast_context(self.model.device,
                                                           getattr(self.model, "course_autocast", None)):
            out = self.model.generate(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_tokens,
                do_sample=sample, temperature=temperature if sample else None, top_p=None, top_k=None,
                eos_token_id=end_of_turn_id(self.tokenizer), pad_token_id=self.tokenizer.pad_token_id,
            )
        prompt_tokens = int(input_ids.shape[1])
        text = self.tokenizer.decode(out[0, prompt_tokens:], skip_special_tokens=True)
        return Completion(text, prompt_tokens, int(out.shape[1]) - prompt_tokens)

    def yes_probability(self, messages: list[dict[str, str]]) -> YesNo:
        """P(yes) / (P(yes) + P(no)) for the first token of the answer (both capitalisations, with and
        without a leading space), read from one forward pass: no sampling, always a number in [0, 1]."""
        import torch

        input_ids = self._encode(messages)
        with self._lock, torch.no_grad():
            logits = self.model(input_ids=input_ids).logits[0, -1].float()
        probs = torch.softmax(logits, dim=-1)

        def mass(words: list[str]) -> float:
            ids = {self.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in words}
            return float(sum(probs[i] for i in ids))

        yes, no = mass(["yes", "Yes", " yes", " Yes"]), mass(["no", "No", " no", " No"])
        return YesNo(yes / (yes + no) if yes + no > 0 else 0.5, int(input_ids.shape[1]))

    def can_force(self) -> bool:
        """A model run in-process always gives its next-token distribution: forced reads work."""
        return True

    def _digit_ids(self) -> list[list[int]]:
        """Per score digit d, the token ids that are d alone once surrounding spaces are stripped ("7",
        " 7")."""
        if not hasattr(self, "_digits"):
            texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            self._digits = [[i for i, t in enumerate(texts) if t.strip() == d] for d in SCORE_DIGITS]
        return self._digits

    def _line_ids(self, line: str) -> list[int]:
        """The token ids of a forced line ("id t3f2: "). Most tokenizers write a digit after a space as two
        tokens (" ", "7"): then the line keeps its space and the digit is the next token. One that writes
        " 7" as one token gets the line without its trailing space, so the next token is " 7"."""
        ids = self.tokenizer(line, add_special_tokens=False)["input_ids"]
        with_digit = self.tokenizer(line + "7", add_special_tokens=False)["input_ids"]
        if with_digit[:-1] == ids and with_digit[-1] in self._digit_ids()[7]:
            return ids
        return self.tokenizer(line.rstrip(), add_special_tokens=False)["input_ids"]

    def forced_scores(self, messages: list[dict[str, str]], header: str, lines: list[str]) -> ForcedScores:
        """The score digits' probabilities after each forced line, every line read straight after the header.

        The prompt (chat template, then the answer's start `header`) runs through the model once and its
        keys and values are kept; then all lines run as one batch, each row over a copy of that cache:
        row k is ``prompt + header + lines[k]``, and the next-token distribution at its last token gives
        P(digit d) for d = 0..9. So every line is conditioned on the whole group and on nothing else.

        Why not one sequence with all lines teacher-forced ("id a: 7\nid b: "): line k would then follow
        lines 1..k-1 *with their digits*, which are not known yet; any digit we put there (a placeholder,
        or the model's own guess, which needs a pass per line) would anchor the next read. Reading every
        line after the header gives what n separate prompts would, for one prompt pass and n short rows.

        The prompt is fitted to `max_prompt_tokens` as for `complete`; the header and lines add a few.
        Raises `JudgeRequestRejected` when it cannot fit.
        """
        import torch

        with self._lock, torch.no_grad():
            logits, tokens = self.forced_logits(messages, header, lines)
        probs = torch.softmax(logits.float(), dim=-1)
        digit_probs = [[float(probs[k, ids].sum()) for ids in self._digit_ids()] for k in range(len(lines))]
        return ForcedScores(digit_probs, tokens)

    def forced_logits(self, messages: list[dict[str, str]], header: str, lines: list[str]):
        """The next-token logits [len(lines), vocab] after each forced line, read as `forced_scores`
        describes, and the tokens read. Gradients flow when the caller has them on: a judge warm start
        (`course_lib.judge.warm_start`) trains on exactly these logits."""
        import torch
        from transformers import DynamicCache

        from course_lib.models import autocast_context

        prompt = self._fit_prompt(messages) + self.tokenizer(header, add_special_tokens=False)["input_ids"]
        rows = [self._line_ids(line) for line in lines]
        width, n, device = max(map(len, rows)), len(rows), self.model.device
        pad = self.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
        mask = torch.tensor([[1] * (len(prompt) + len(r)) + [0] * (width - len(r)) for r in rows],
                            device=device)
        positions = (len(prompt) + torch.arange(width, device=device)).expand(n, -1)
        with autocast_context(device, getattr(self.model, "course_autocast", None)):
            out = self.model(input_ids=torch.tensor([prompt], device=device), cache=DynamicCache(),
                             use_cache=True, logits_to_keep=1)
            for layer in out.cache.layers:  # one copy of the prompt's keys and values per line
                layer.batch_select_indices(torch.zeros(n, dtype=torch.long, device=device))
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                cache=out.cache, use_cache=True).logits
        last = logits[torch.arange(n), torch.tensor([len(r) - 1 for r in rows])]
        return last, len(prompt) + sum(map(len, rows))

    def digit_token(self, line: str, digit: int) -> int:
        """The token id of `digit` written right after the forced `line` (what `forced_scores` reads
        there)."""
        token = self.tokenizer(line + str(digit), add_special_tokens=False)["input_ids"][-1]
        if token not in self._digit_ids()[digit]:
            raise ValueError(f"the tokenizer does not write {digit} after {line!r} as one digit token")
        return token

    def complete_text(self, prompt: str, *, max_tokens: int = 16, temperature: float = 0.0,
                      top: int = 0) -> TextCompletion:
        """A raw-text completion (the prompt is not put in the chat template), as the completions API
        answers: the text, the token counts and, with ``top > 0``, each new token's `top` most likely
        tokens and their log-probabilities (before sampling). Raises `JudgeRequestRejected` for a prompt
        over `max_prompt_tokens` (raw text is not cut: its structure is the caller's)."""
        import torch

        from course_lib.models import autocast_context

        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if len(ids) > self.max_prompt_tokens:
            raise JudgeRequestRejected(f"the prompt has {len(ids)} tokens, "
                                       f"over max_prompt_tokens={self.max_prompt_tokens}")
        input_ids = torch.tensor([ids], device=self.model.device)
        sample = temperature > 0
        with self._lock, torch.no_grad(), autocast_context(self.model.device,
                                                           getattr(self.model, "course_autocast", None)):
            out = self.model.generate(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_tokens,
                do_sample=sample, temperature=temperature if sample else None, top_p=None, top_k=None,
                pad_token_id=self.tokenizer.pad_token_id, output_logits=True, return_dict_in_generate=True)
        new = out.sequences[0, len(ids):].tolist()
        chosen, tops = [], []
        for token, step_logits in zip(new, out.logits):
            logprobs = torch.log_softmax(step_logits[0].float(), dim=-1)
            chosen.append(float(logprobs[token]))
            best: dict[str, float] = {}
            for v, i in zip(*(t.tolist() for t in logprobs.topk(top))) if top > 0 else []:
                best.setdefault(self.tokenizer.decode([i]), v)  # two ids may decode alike: keep the likelier
            tops.append(best)
        return TextCompletion(self.tokenizer.decode(new, skip_special_tokens=True), len(ids), len(new),
                              [self.tokenizer.decode([t]) for t in new], chosen, tops)


class OpenAIJudge:
    """A judge behind any OpenAI-compatible chat-completions endpoint (needs `pip install openai`).

    Unset arguments come from $COURSE_JUDGE_BASE_URL, $COURSE_JUDGE_MODEL and $COURSE_JUDGE_API_KEY;
    without a model name the endpoint's first listed model is used. Connection errors, timeouts, rate
    limits and 5xx answers are retried `max_retries` times with exponential backoff, then raise
    `JudgeUnavailable` naming the URL. A request rejected with 400, 413 or 422 (e.g. a prompt too long)
    raises `JudgeRequestRejected`, which fails only its group; other 4xx answers (401, 403, 404: a
    wrong key, model or URL) raise `JudgeUnavailable` with a hint. Token usage is the server's own count.

    Forced-position group scores (`forced_scores`) use the completions API (raw text, ``logprobs``:
    the top `top_logprobs` tokens, 20 at most on vLLM and OpenAI): the chat messages are rendered with
    `template` (default `chatml`, the template of SmolLM2 and Qwen2.5; pass another model's, e.g.
    ``lambda m: tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True)``), and the
    digits' probabilities are read from the top tokens (a digit outside them counts as 0). `can_force`
    asks the endpoint once whether it answers that way; a chat-only endpoint is judged in JSON.
    """

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 timeout: float = 30, max_retries: int = 3, backoff: float = 0.5,
                 template: Callable[[list[dict[str, str]]], str] = chatml, top_logprobs: int = 20):
        try:
            import openai
        except ImportError:
            raise ImportError("OpenAIJudge needs the openai client: pip install 'course_lib[openai]' "
                              "(or pip install openai)") from None
        self._openai = openai
        self.base_url = base_url or os.environ.get("COURSE_JUDGE_BASE_URL") or "https://api.openai.com/v1"
        self.model = model or os.environ.get("COURSE_JUDGE_MODEL")
        api_key = (api_key or os.environ.get("COURSE_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY")
                   or "none")
        self.max_retries, self.backoff = max_retries, backoff
        # The client's own retries are off: ours are bounded, counted and end in a clear error.
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout, max_retries=0)
        self.template, self.top_logprobs = template, top_logprobs
        self._forced: bool | None = None  # whether the endpoint gives completions with logprobs (asked once)

    @property
    def name(self) -> str:
        return f"openai:{self.base_url}:{self._model()}"

    def _retrying(self, call):
        retryable = (self._openai.APIConnectionError, self._openai.APITimeoutError,
                     self._openai.RateLimitError, self._openai.InternalServerError)
        for attempt in range(self.max_retries + 1):
            try:
                return call()
            except retryable as exc:
                if attempt == self.max_retries:
                    raise JudgeUnavailable(
                        f"judge endpoint {self.base_url} is unavailable after {attempt + 1} tries "
                        f"({type(exc).__name__}: {exc}); is the server running? "
                        "(e.g. python -m course_lib.judge.server --port 8011)") from exc
                time.sleep(self.backoff * 2 ** attempt)
            except self._openai.APIStatusError as exc:
                raise self._refusal(exc) from exc

    def _refusal(self, exc) -> Exception:
        """The error for a 4xx answer: this request only (400, 413, 422) or the configuration (the rest)."""
        status = exc.status_code
        if status in (400, 413, 422):
            return JudgeRequestRejected(f"judge endpoint {self.base_url} rejected the request ({exc})")
        hint = {401: "check the API key ($COURSE_JUDGE_API_KEY or api_key=...)",
                403: "check that the API key may use this model",
                404: f"check base_url (it usually ends in /v1) and the model name {self.model!r}"}
        return JudgeUnavailable(f"judge endpoint {self.base_url} refused the request ({exc}); "
                                f"{hint.get(status, 'check the endpoint and its settings')}")

    def _model(self) -> str:
        if self.model is None:
            models = self._retrying(lambda: self.client.models.list())
            if not models.data:
                raise JudgeUnavailable(f"judge endpoint {self.base_url} lists no models; pass model=...")
            self.model = models.data[0].id
        return self.model

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int = 512,
                 temperature: float = 0.0) -> str:
        return self.complete_with_usage(messages, max_tokens=max_tokens, temperature=temperature).text

    def complete_with_usage(self, messages: list[dict[str, str]], *, max_tokens: int = 512,
                            temperature: float = 0.0) -> Completion:
        """The answer and this call's token counts as the server reports them (0 when it reports none)."""
        model = self._model()
        response = self._retrying(lambda: self.client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=temperature))
        usage = response.usage
        return Completion(response.choices[0].message.content or "",
                          int(getattr(usage, "prompt_tokens", 0) or 0),
                          int(getattr(usage, "completion_tokens", 0) or 0))

    def _top_logprobs(self, prompt: str) -> tuple[dict[str, float], int]:
        """The first new token's top log-probabilities for a raw-text prompt, and the tokens it cost."""
        model = self._model()
        response = self._retrying(lambda: self.client.completions.create(
            model=model, prompt=prompt, max_tokens=1, temperature=0.0, logprobs=self.top_logprobs))
        logprobs = response.choices[0].logprobs if response.choices else None
        top = (logprobs.top_logprobs or [None])[0] if logprobs is not None else None
        if not top:
            raise JudgeRequestRejected(f"judge endpoint {self.base_url} answered without top_logprobs")
        usage = response.usage
        return dict(top), (int(getattr(usage, "prompt_tokens", 0) or 0)
                           + int(getattr(usage, "completion_tokens", 0) or 0))

    def can_force(self) -> bool:
        """Whether the endpoint serves the completions API with ``logprobs`` (vLLM, llama.cpp's server and
        `course_lib.judge.server` do; a chat-only API does not). Asked once, with a short prompt; an
        unreachable endpoint raises `JudgeUnavailable`."""
        if self._forced is None:
            try:
                self._top_logprobs("1, 2, 3,")
                self._forced = True
            except JudgeRequestRejected:  # 400, 413, 422, or an answer without logprobs
                self._forced = False
            except JudgeUnavailable as exc:
                # no completions route: chat only
                if not isinstance(exc.__cause__, self._openai.NotFoundError):
                    raise
                self._forced = False
        return self._forced

    def forced_scores(self, messages: list[dict[str, str]], header: str, lines: list[str]) -> ForcedScores:
        """Per line, P(digit) for d = 0..9 after ``template(messages) + header + line``: one completions
        request per line (max_tokens=1), each line read straight after the header as `LocalJudge` does.
        A digit's variants among the top tokens ("7", " 7") are summed."""
        prompt = self.template(messages) + header
        digit_probs, tokens = [], 0
        for line in lines:
            top, cost = self._top_logprobs(prompt + line)
            probs = [0.0] * len(SCORE_DIGITS)
            for token, logprob in top.items():
                if token.strip() in SCORE_DIGITS and len(token.strip()) == 1:
                    probs[SCORE_DIGITS.index(token.strip())] += math.exp(logprob)
            digit_probs.append(probs)
            tokens += cost
        return ForcedScores(digit_probs, tokens)
