"""The trainer (notebooks 05 to 09), a package whose modules are the stages of one RL step:

    TrainConfig (config)                                          the run as data, in parts
        |
    rollout: a group of episodes per task                         course_lib.rollout
        |
    rewards: verifier / judge / mix, the unfinished rule          course_lib.rewards.assign -> Rewards
        |   (returned beside the rolled-out groups; the batch trains on rewarded copies)
    turn rewards (when the method reads them), values V(s_t)      rewards.turn_rewards, train.critic
        |
    advantages, groups without signal left out                    train.batch.make_batch -> credit.advantages
        |
    update: policy loss (+ value loss), PPO epochs, NaN guard     train.update.update
        |
    metrics row, checkpoint, evaluation                           train.loop.rl_step, train.loop.train

    config.py   TrainConfig, RolloutConfig, RewardConfig, OptimConfig, CriticConfig, Hooks, check
    batch.py    Batch, make_batch
    critic.py   turn_values, make_value_head, param_groups, micro_batch_value_loss
    update.py   update
    loop.py     Run, rl_step(run, step, train_tasks, ...), train(config), config_tasks, nan_guard

Import each name from its module (`from course_lib.train.loop import train`); this package re-exports
nothing. What the trainer uses lives in its own modules: `course_lib.sft` (warm start), `course_lib.evaluate`,
`course_lib.checkpoint`, `course_lib.batching` (the forward pass), `course_lib.credit`, `course_lib.rewards`.
"""
