"""Sampling: from a batch of environments and a numpy snapshot of the policy to the PPO batch of an iteration.

- `rollout`: the one sampling loop (`run`) and what it returns (`Rollout`), run in the trainer or in the
  environments' worker processes;
- `training_env`: a batch of environments with its observation normaliser and reward scaler;
- `batch`: the PPO `Batch` and `to_batch`, which turns a rollout into one (GAE, normalisation);
- `samplers`: the trainer's samplers, one per placement of the environments.

No module here imports TensorFlow (tests/test_layering.py): rollouts run in worker processes and env servers.
"""
