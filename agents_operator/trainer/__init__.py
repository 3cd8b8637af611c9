"""The PPO trainer that runs inside every worker pod.

Layout: packages in layers, each importing only those below it (tests/test_layering.py: no cycle between
packages nor between modules, not even through imports inside functions or for type checkers):

- `ppo/`: the algorithm next to the paper: `normalize` (streaming statistics), `returns` (GAE) and `policy`
  (the numpy actor) in numpy; `networks`, `losses`, `objective` (the PPO loss) and `epochs` (the K epochs of
  minibatch steps) in TensorFlow.
- `envs/`: the environments, wherever they run: `types`, `make`, `rollout` (the sampling loop `run`,
  `Rollout`), `policy_message`, `batch` (`BatchEnv`, subprocesses) with its `worker` side, the `messages`
  they exchange and the `shared` memory, `episodes` (evaluation episodes).
- `envserver/`: the env server (`server`, its `requests` checks), its client (`client.RemoteBatchEnv`, a
  `connection` per server) and the wire `protocol`.
- `sampling/`: `training_env` (normalisers), `batch` (the PPO `Batch`, `to_batch`), `samplers` (one per
  placement of the environments).
- this package's own modules: `learner` (the TensorFlow graph and session), `localcopy` (a worker's copy of
  the networks and the update on it) and `replicas` (the shared state, the push), `iteration` (one PPO
  iteration, step by step), `distributed` (the cluster), `checkpoints`, `summaries`, `metrics`, `progress`,
  `rundir`; `loop` (iterations -> `outputs`), `evaluator`, `visualize`, `plot`, `usage` and `commands` (the
  CLI sub-commands).

`ppo.normalize`, `ppo.returns`, `ppo.policy`, `envs/`, `envserver/` and `sampling/` never import TensorFlow:
environment processes and env servers load them. TensorFlow is imported only by the modules that need it,
never by this package itself.
"""

import os

# grpcio (the env servers and their clients) turns its fork support on by default, and then restarts its poller
# around every fork(). A child forked only to exec another program (ffmpeg: imageio forks it to call setpgrp)
# can die before it execs, and the parent's poller logs "epoll_wait error: Bad file descriptor"
# (grpc/grpc#43055, grpcio >= 1.81). No child of the trainer or of an env server uses gRPC: each one execs.
# Set after `import grpc` it comes too late, so it is set here, before any module of this package imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
