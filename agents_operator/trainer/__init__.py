"""The PPO trainer that runs inside every worker pod.

Layout, each layer importing only those above it (tests/test_layering.py: no cycle, not even through
imports inside functions or for type checkers):

- `normalize` (streaming statistics); `ppo/`: the algorithm next to the paper: `returns` (GAE) and `policy`
  (the numpy actor) in numpy, `networks`, `losses` and `objective` (the PPO loss) in TensorFlow.
- `envs/`: the environments, wherever they run: `types`, `make`, `batch` (`BatchEnv`, subprocesses) with its
  `worker` side and `shared` memory, `remote` (`RemoteBatchEnv`, the env-server client), `episodes`
  (evaluation episodes). `envserver/`: the env server, its request checks and the wire `protocol`.
- `sampling/`: `rollout` (the sampling loop), `training_env` (normalisers), `batch` (the PPO `Batch`, GAE),
  `samplers` (one per placement of the environments).
- `learner` (the TensorFlow graph and session), `distributed` (the cluster), `checkpoints`, `summaries`,
  `metrics`, `progress`, `rundir`.
- `loop` (rollout -> update -> outputs), `evaluator`, `visualize`, `plot` and `commands` (the CLI
  sub-commands).

`normalize`, `ppo.returns`, `ppo.policy`, `envs/`, `envserver/` and `sampling/` never import TensorFlow:
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
