"""agents-operator: distributed reinforcement learning as a Kubernetes object."""
