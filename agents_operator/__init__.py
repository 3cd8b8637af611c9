"""agents-operator: distributed reinforcement learning (batched PPO over parameter servers) on Kubernetes."""

__version__ = "0.1.0"
