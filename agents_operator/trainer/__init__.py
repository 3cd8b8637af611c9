"""The PPO trainer that runs inside every worker pod.

Layout: `envs` (environment subprocesses), `wrappers` (everything between the policy and the environments),
`normalize` (streaming statistics), `ppo/` (returns, networks, losses: the algorithm next to the paper),
`learner` (the TensorFlow graph and session), `loop` (rollout -> update -> outputs), `checkpoints`,
`summaries`, `metrics`, `progress`, `visualize`, `plot` and `commands` (the CLI sub-commands).
TensorFlow is imported only by the modules that need it, never by this package itself.
"""

import os

# grpcio (the env servers and their clients) turns its fork support on by default, and then restarts its poller
# around every fork(). A child forked only to exec another program (ffmpeg: imageio forks it to call setpgrp)
# can die before it execs, and the parent's poller logs "epoll_wait error: Bad file descriptor"
# (grpc/grpc#43055, grpcio >= 1.81). No child of the trainer or of an env server uses gRPC: each one execs.
# Set after `import grpc` it comes too late, so it is set here, before any module of this package imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
