"""The embedded base model acts in every environment through the batched rollout engine (fast sizes).

The base model rarely writes a valid action; what matters here is that whatever it writes comes back
as an observation, the episode ends with a reward from the verifier, and the mask stays exact.
"""

import pytest

from course_lib.envs import ENVIRONMENTS, load_tasks
from course_lib.rollout import rollout
from course_lib.trajectory import render


@pytest.mark.parametrize("env_name", list(ENVIRONMENTS))  # the one table: a new environment is tested here
def test_base_model_rollouts_run_in_every_environment(policy, env_name):
    model, tokenizer = policy
    tasks = load_tasks(env_name, "test", limit=1)
    groups = rollout(model, tokenizer, env_name, tasks, group_size=2, max_turns=2, max_new_tokens=16,
                     temperature=1.0, seed=0, progress=False)
    trajs = [t for g in groups for t in g]
    assert len(groups) == 1 and len(trajs) == 2
    for t in trajs:
        assert 1 <= t.num_turns <= 2
        assert t.reward in (0.0, 1.0)
        assert tokenizer.decode(t.token_ids) == render(tokenizer, t.messages)
        assert sum(t.loss_mask) == sum(len(s.action_ids) for s in t.steps)
        # every step but the last got its observation back from the environment
        assert all(s.observation_text for s in t.steps[:-1])
