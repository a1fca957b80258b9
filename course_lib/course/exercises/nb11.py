"""The exercise checks of notebook 11, scaling out (`notebooks/11_scaling_out.ipynb`): check_trl_env_mask,
check_truncated_importance_weights, check_effective_sample_size.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_trl_env_mask(fn: Any, tokenizer: Any) -> Any:
    """Notebook 11: `fn(trajectory, end_of_turn_id) -> (completion_ids, env_mask)`, what TRL trains on."""
    return graded(
        fn,
        "my_trl_fields",
        "return (completion_ids, env_mask): the span after the prompt up to the last model token and its "
        "end-of-turn token.",
        partial(_grade_trl_env_mask, tokenizer=tokenizer),
    )


def _grade_trl_env_mask(fn, tokenizer) -> str:
    from course_lib.envs import load_tasks
    from course_lib.integrations.trl import trajectory_completion
    from course_lib.models import end_of_turn_id
    from course_lib.rollout import expert_rollout

    eot = end_of_turn_id(tokenizer)
    for t in expert_rollout(tokenizer, "lookup", load_tasks("lookup", "test", 3)):
        start, end = trajectory_completion(t, eot)
        ids, mask = fn(t, eot)
        if list(ids) != t.token_ids[start:end]:
            raise ExerciseFailed(
                f"completion_ids should be token_ids[{start}:{end}] (after the prompt, up to the last "
                f"model token and its end-of-turn token); you gave {len(ids)} ids."
            )
        if list(mask) != t.loss_mask[start:end]:
            raise ExerciseFailed(
                "env_mask must be the trajectory's loss_mask on the same span: 1 on sampled tokens, "
                "0 on observations and template tokens."
            )
    return "TRL will train on exactly the tokens our own trainer trains on."


def check_truncated_importance_weights(fn: Any) -> Any:
    """Notebook 11: `fn(learner_logprobs, sampler_logprobs, mask, cap) -> [B, T]` truncated importance
    weights."""
    return graded(fn, "my_weights",
                  "return min(exp(ℓ_learner − ℓ_sampler), cap) on masked tokens, 0 elsewhere.",
                  _grade_truncated_importance_weights)


def _weights_with(mistake: str):
    """Truncated importance weights with one typical mistake."""
    import torch

    def weights(learner, sampler, mask, cap):
        if mistake == "ratio inverted":
            return torch.clamp(torch.exp(sampler - learner), max=cap) * mask
        if mistake == "no mask":
            return torch.clamp(torch.exp(learner - sampler), max=cap)
        if mistake == "masked inside the exp":
            return torch.clamp(torch.exp((learner - sampler) * mask), max=cap)
        if mistake == "no cap":
            return torch.exp(learner - sampler) * mask
        if mistake == "clipped both ways":
            return torch.clamp(torch.exp(learner - sampler), 1 / cap, cap) * mask
        if mistake == "cap on the log-ratio":
            return torch.exp(torch.clamp(learner - sampler, max=cap)) * mask
        assert mistake == "ratio of log-probs"
        return torch.clamp(learner / sampler, max=cap) * mask

    return weights


_WEIGHT_HINTS = {
    "ratio inverted": "you computed exp(ℓ_sampler − ℓ_learner), the inverse ratio μ/π_θ: the weight is "
                      "π_θ/μ = exp(ℓ_learner − ℓ_sampler), the learner's probability over the sampler's",
    "no mask": "tokens with mask 0 got a weight: an observation was sampled by neither policy, so multiply "
               "by the mask",
    "masked inside the exp": "tokens with mask 0 got weight 1, because exp(0) = 1: multiply the weight by "
                             "the mask after the exp, not the log-ratio before it",
    "no cap": "a weight exceeds the cap: min(w_t, C) bounds each weight from above",
    "clipped both ways": "you raised the small weights to 1/C as well: the truncation caps from above only, "
                         "so a token the learner finds less likely than the sampler did keeps its weight "
                         "below 1",
    "cap on the log-ratio": "you capped the log-ratio ℓ_learner − ℓ_sampler at C, which caps the weight at "
                            "exp(C): cap the weight itself, min(exp(ℓ_learner − ℓ_sampler), C)",
    "ratio of log-probs": "ℓ are log-probs, so the probability ratio is exp(ℓ_learner − ℓ_sampler), not "
                          "ℓ_learner / ℓ_sampler",
}


def _grade_truncated_importance_weights(fn) -> str:
    import torch

    g = torch.Generator().manual_seed(0)
    learner = -torch.rand(3, 5, generator=g) * 3
    sampler = (learner + torch.randn(3, 5, generator=g) * 0.8).clamp(max=-0.05)  # log-probs are ≤ 0
    sampler[1, 3] = learner[1, 3] - 2.5  # a token the sampler found far less likely: ratio e^2.5 ≈ 12
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.float32)
    for cap in (2.0, 1.2):
        expected = torch.clamp(torch.exp(learner - sampler), max=cap) * mask
        got = torch.as_tensor(fn(learner, sampler, mask, cap), dtype=torch.float32)
        if got.shape != expected.shape:
            raise ExerciseFailed(f"you returned shape {tuple(got.shape)}, expected {tuple(expected.shape)}: "
                                 "one weight per token, [B, T]")
        if torch.allclose(got, expected, atol=1e-5):
            continue
        hint = next((h for mistake, h in _WEIGHT_HINTS.items()
                     if torch.allclose(got, _weights_with(mistake)(learner, sampler, mask, cap), atol=1e-5)),
                    "expected min(exp(ℓ_learner − ℓ_sampler), cap) on masked tokens and 0 elsewhere")
        raise ExerciseFailed(f"with cap = {cap}, {hint}.")
    return "a stale sampler's tokens are re-weighted, and no single token can weigh more than the cap."


def check_effective_sample_size(fn: Any) -> Any:
    """Notebook 11: `fn(weights, mask) -> float`, Kish's effective sample size (Σw)² / Σw² over masked
    tokens."""
    return graded(fn, "effective_sample_size",
                  "return (Σ w)² / Σ w² over the tokens with mask 1.", _grade_effective_sample_size)


def _grade_effective_sample_size(fn) -> str:
    import torch

    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    cases = [
        (torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]), 5.0, "all weights 1"),
        (torch.tensor([[2.0, 0.5, 0.5, 7.0], [1.0, 1.0, 3.0, 3.0]]), 25 / 6.5, "mixed weights"),
        (torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), 1.0, "one token carries everything"),
    ]
    for weights, expected, label in cases:
        got = float(fn(weights, mask))
        if abs(got - expected) < 1e-5:
            continue
        if abs(got - 1 / expected) < 1e-5:
            raise ExerciseFailed(
                f"{label}: you gave {got:.4f}, the inverse of {expected:.4f}: (Σw)² over Σw², not Σw² over "
                f"(Σw)²."
            )
        raise ExerciseFailed(
            f"{label}: you gave {got:.4f}, expected {expected:.4f}. Multiply the weights by the "
            "mask first: observation tokens (mask 0) carry no weight, whatever is stored there."
        )
    return "equal weights give every token's worth; one dominant weight gives about one token's worth."
