"""The PPO trainer that runs inside every worker pod.

Layout: `envs` (environment subprocesses), `wrappers` (everything between the policy and the environments),
`normalize` (streaming statistics), `ppo/` (returns, networks, losses: the algorithm next to the paper),
`learner` (the TensorFlow graph and session), `loop` (rollout -> update -> outputs), `checkpoints`,
`summaries`, `metrics`, `progress`, `visualize`, `plot` and `commands` (the CLI sub-commands).
TensorFlow is imported only by the modules that need it, never by this package itself.
"""
