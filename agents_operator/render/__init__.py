"""AgentsJob -> the exact Pods, Services and other children the operator creates, as plain dicts.

The operator creates what this returns and the local launcher runs the same launches (`RenderedPod`), so what
`agents-operator render` prints is what runs. Pure package:

- `common`: names and numbers every child shares, the options, metadata, volumes, security defaults;
- `pods`: each replica's Pod, the launch each of our containers runs, and the ConfigMap of the cluster they
  mount;
- `envservers`: the env-server containers (remote pods' and sidecars');
- `children`: Services, the NetworkPolicy, TensorBoard, and `children`, everything in order.
"""

from agents_operator.render.children import (
    children,
    export_status,
    network_policy,
    non_pod_children,
    services,
    tensorboard,
    tensorboard_url,
)
from agents_operator.render.common import (
    DEFAULT_IMAGE,
    QUEUE_LABEL,
    RUN_AS,
    SCRATCH_ENV,
    SCRATCH_VOLUME,
    TENSORBOARD_PORT,
    TERMINATION_MESSAGE_POLICY,
    RenderOptions,
    run_dir,
)
from agents_operator.render.envservers import env_server_launch, sidecar_share
from agents_operator.render.pods import RenderedPod, cluster_config, pod, pods, rendered_pod, trainer_launch

__all__ = [
    "DEFAULT_IMAGE",
    "QUEUE_LABEL",
    "RUN_AS",
    "SCRATCH_ENV",
    "SCRATCH_VOLUME",
    "TENSORBOARD_PORT",
    "TERMINATION_MESSAGE_POLICY",
    "RenderOptions",
    "RenderedPod",
    "children",
    "cluster_config",
    "env_server_launch",
    "export_status",
    "network_policy",
    "non_pod_children",
    "pod",
    "pods",
    "rendered_pod",
    "run_dir",
    "services",
    "sidecar_share",
    "tensorboard",
    "tensorboard_url",
    "trainer_launch",
]
