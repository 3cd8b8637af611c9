"""Sampling: from a batch of environments and a numpy snapshot of the policy to the PPO batch of an iteration.

- `training_env`: a batch of environments with its observation normaliser and reward scaler;
- `batch`: the PPO `Batch` and `to_batch`, which turns a rollout into one (GAE, normalisation);
- `samplers`: the trainer's samplers, one per placement of the environments, each running `envs.rollout`'s
  loop where the policy acts;
- `overlapped`: a sampler whose next rollout runs while the learner updates on this one (config `overlap`).

No module here imports TensorFlow (tests/test_layering.py): the trainer feeds the learner with numpy alone.
"""
