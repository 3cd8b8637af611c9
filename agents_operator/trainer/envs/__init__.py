"""The environments a worker trains on, wherever they run, and the episodes it evaluates on.

- `types`: what every batch shares: `StepResult`, `EnvProcessError`, `BatchChecks`.
- `make`: one environment (`make_env`) and the CPUs a batch may use.
- `rollout`: the one sampling loop (`run`) and what it returns (`Rollout`), run in the trainer, in worker
  processes and in env servers; `policy_message`: the policy as plain values, for whatever acts elsewhere;
  `noise`: a rollout's exploration noise, drawn up front (per step, or gSDE's weights held for some steps).
- `batch`: `BatchEnv`, the batch stepped by worker subprocesses (the parent's side); `worker`: what runs in
  those processes; `messages`: what the two say to each other; `shared`: the memory both sides share.
  (`envserver.client.RemoteBatchEnv`, above this package, has the same interface for env servers.)
- `episodes`: whole episodes of the deterministic policy on one environment (evaluations, videos), each
  depending only on its seed; `BatchEnv.run_episodes` spreads them over its worker processes.

Between the policy and the simulator, in order from the simulator outwards: the time limit and float32
observations (`make_env`, in the environment processes); action clipping to the action bounds, which a batch
does as it hands the actions to its environments (and `episodes.run_episodes` for its single environment);
then, in the trainer, streaming observation normalisation and reward scaling (`sampling.training_env`),
applied to a whole rollout once it is complete. The policy samples unbounded Gaussian actions; only the
clipped copy reaches the environment, and the update uses the sampled one, so the log-probabilities stay those
of the Gaussian.

This package imports no TensorFlow (tests/test_layering.py): its modules run in environment processes and env
servers. Import the modules, not the package: it re-exports nothing, so that a worker process loads only
what it runs.
"""
