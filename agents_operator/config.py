"""The trainer's configuration: every PPO hyperparameter as a named, documented field.

One model serves three places: the `spec.trainer` overrides of an AgentsJob (camelCase, validated by the
CRD and by `agents-operator validate`), the trainer's own `--set key=value` command line (snake_case), and
the `config.yaml` written into every run directory. Presets are plain data in `presets/*.yaml`.

Names follow the PPO paper (Schulman et al. 2017) and BatchPPO (Hafner et al. 2017) where they exist.
Pure module: no TensorFlow, no Kubernetes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

Layers = Annotated[list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1, max_length=8)]


class TrainerConfig(BaseModel):
    """Resolved hyperparameters of one training run (a preset plus overrides)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True, validate_default=True
    )

    # --- task -------------------------------------------------------------------------------------------
    env_id: str = Field(
        "Pendulum-v1",
        min_length=1,
        max_length=200,
        description="Gymnasium environment id. PyBullet tasks (e.g. HalfCheetahBulletEnv-v0) are registered "
        "through pybullet_envs_gymnasium; any other installed gymnasium id works too.",
    )
    max_episode_steps: int | None = Field(
        None, ge=1, le=1_000_000, description="Time limit per episode; null keeps the environment's own limit."
    )
    total_steps: int = Field(
        1_000_000, ge=1, le=10_000_000_000, description="Environment steps to train for, summed over all workers."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Base random seed; worker i and env j derive theirs.")

    # --- sampling ---------------------------------------------------------------------------------------
    envs_per_worker: int = Field(
        8, ge=1, le=1024, description="Environments each worker steps in parallel (the batch of BatchPPO)."
    )
    envs_per_process: int | None = Field(
        None,
        ge=1,
        le=256,
        description="Environments simulated by one subprocess; null spreads them evenly over one process per "
        "usable CPU (CPU affinity, capped by the container's CPU limit), which measured fastest.",
    )
    rollout_steps: int = Field(
        256, ge=1, le=100_000, description="Steps per environment between two updates (the horizon T)."
    )
    overlap: bool = Field(
        False,
        description="Collect the next rollout while the update runs (double-buffered sampling): the environments "
        "act with the policy one update behind; PPO's clip is taken around the policy the update starts from, "
        "each sample weighted by its probability under that policy over the behaviour's (decoupled PPO). Off: "
        "the serial loop (sample, then update). Async workers in a cluster always sample serially: their "
        "rollouts would act with weights several pushes old.",
    )
    overlap_values: Literal["recomputed", "behaviour"] = Field(
        "recomputed",
        description="The values GAE uses where an update starts from other weights than those that acted: "
        "with overlap, and for async workers in a cluster that update in turn, which pull what the others pushed "
        "since their rollout. Recomputed by the value net the update starts from (truncated episodes' final "
        "values stay the behaviour's), or the behaviour policy's, as computed while acting.",
    )

    # --- optimisation -----------------------------------------------------------------------------------
    epochs: int = Field(10, ge=1, le=1000, description="Passes over each rollout batch (K in the paper).")
    minibatches: int = Field(
        32, ge=1, le=100_000, description="Minibatches per epoch; the worker's batch must divide evenly."
    )
    learning_rate: float = Field(3e-4, gt=0, le=1, description="Adam step size at the start of training.")
    lr_schedule: Literal["constant", "linear"] = Field(
        "linear", description="'linear' anneals the learning rate to zero over total_steps."
    )
    adam_epsilon: float = Field(1e-5, gt=0, le=1, description="Adam epsilon (1e-5 as in the PPO baselines).")
    max_grad_norm: float | None = Field(
        0.5, gt=0, description="Clip the global gradient norm to this value; null disables clipping."
    )

    # --- returns ----------------------------------------------------------------------------------------
    discount: float = Field(0.99, ge=0, le=1, description="Discount factor gamma.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda (1 = Monte-Carlo, 0 = one-step TD).")
    normalize_advantages: bool = Field(True, description="Standardise advantages within each minibatch.")

    # --- objective --------------------------------------------------------------------------------------
    objective: Literal["clip", "kl_penalty"] = Field(
        "clip",
        description="'clip': the clipped surrogate L^CLIP. 'kl_penalty': BatchPPO's adaptive KL penalty with "
        "a squared cutoff.",
    )
    clip_range: float = Field(0.2, gt=0, le=10, description="Epsilon of the clipped surrogate objective.")
    clip_schedule: Literal["constant", "linear"] = Field(
        "constant",
        description="'linear' anneals clip_range to zero (or to clip_range_floor) over total_steps (the zoo's "
        "lin_<x>).",
    )
    clip_range_floor: float = Field(
        0.0,
        ge=0,
        le=10,
        description="The least epsilon the 'linear' clip_schedule anneals to: it follows clip_range x (1 - "
        "progress) until that reaches the floor and holds it there (0: to zero, the zoo's lin_<x>).",
    )
    async_clip_range_floor: float | None = Field(
        None,
        ge=0,
        le=10,
        description="clip_range_floor for the async workers of a cluster, whose updates start from weights "
        "other workers moved after they acted (unset: clip_range_floor).",
    )
    kl_target: float = Field(
        0.01, gt=0, le=10, description="Target KL per update for 'kl_penalty' (the penalty adapts toward it)."
    )
    kl_init_penalty: float = Field(1.0, ge=0, le=1e6, description="Initial KL penalty coefficient beta.")
    kl_cutoff_factor: float = Field(
        2.0, gt=1, le=100, description="KL above this multiple of kl_target is penalised quadratically."
    )
    kl_cutoff_coef: float = Field(1000.0, ge=0, le=1e9, description="Weight of that quadratic cutoff term.")
    value_coef: float = Field(0.5, ge=0, le=1e3, description="Weight of the value loss (c1).")
    value_clip: float | None = Field(
        None, gt=0, description="Clip value predictions to this distance from the old ones; null disables."
    )
    entropy_coef: float = Field(0.0, ge=0, le=10, description="Weight of the entropy bonus (c2).")
    entropy_schedule: Literal["constant", "linear"] = Field(
        "constant", description="'linear' anneals entropy_coef to zero over total_steps, as clip_schedule does."
    )

    # --- networks ---------------------------------------------------------------------------------------
    policy_layers: Layers = Field([64, 64], description="Hidden layer sizes of the policy network.")
    value_layers: Layers = Field([64, 64], description="Hidden layer sizes of the value network.")
    activation: Literal["tanh", "relu"] = Field("tanh", description="Hidden-layer activation.")
    init_log_std: float = Field(
        0.0, ge=-10, le=5, description="Initial log standard deviation of the Gaussian policy (learned)."
    )
    exploration: Literal["state_independent", "state_dependent"] = Field(
        "state_independent",
        description="The Gaussian's standard deviation: learned per action dimension (state_independent), or "
        "a function of the state (state_dependent: gSDE's, Raffin et al. 2021, with new exploration weights "
        "every step): sqrt(sum_j phi_j(s)^2 exp(2 log_std_jk) + 1e-6) for action k, phi the policy's last "
        "hidden layer (its gradient stops there); init_log_std starts every log_std_jk.",
    )
    exploration_hold: int = Field(
        1,
        ge=1,
        le=100_000,
        description="With state_dependent exploration: the steps each environment keeps its exploration weights "
        "(gSDE's sde_sample_freq; new ones are drawn every that many steps and at every rollout's start), so that "
        "the noise latent @ weights changes with the state only in between. 1: new weights every step.",
    )
    orthogonal_init: bool = Field(
        True, description="Orthogonal weight init (gain sqrt 2 hidden, 0.01 policy head, 1 value head)."
    )
    plain_init: Literal["glorot_uniform", "pytorch"] = Field(
        "glorot_uniform",
        description="The weights when orthogonal_init is false: 'glorot_uniform' (Keras's default, zero biases) or "
        "'pytorch' (torch.nn.Linear's default, weights and biases uniform in +-1/sqrt(fan_in): what SB3 trains "
        "with ortho_init=False).",
    )

    # --- normalisation ----------------------------------------------------------------------------------
    normalize_observations: bool = Field(True, description="Streaming mean/std observation normalisation.")
    observation_statistics: Literal["rollout", "step"] = Field(
        "rollout",
        description="The observation statistics a rollout acts with: 'rollout': those of the rollouts before it, "
        "fixed for its length (the first rollout of a run is not normalised); 'step': also updated with every "
        "step's observations as it goes, by each process that acts, as SB3's VecNormalize does.",
    )
    normalize_rewards: bool = Field(True, description="Scale rewards by the std of the discounted return.")
    clip_observations: float = Field(10.0, gt=0, le=1e6, description="Clip normalised observations to +-this.")
    clip_rewards: float = Field(10.0, gt=0, le=1e6, description="Clip normalised rewards to +-this.")

    # --- distribution -----------------------------------------------------------------------------------
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="'sync': gradients of all workers are aggregated into one update per iteration (DPPO). "
        "'async': each worker applies its own updates to the shared parameters.",
    )
    async_updates: Literal["in_turn", "concurrent"] = Field(
        "in_turn",
        description="In 'async' mode: 'in_turn', one worker updates at a time (a turn on ps 0, taken before the "
        "pull and given back after the push), so every update starts from the weights every earlier push left, "
        "while the other workers sample; the job then updates at most as fast as one worker does. 'concurrent', "
        "each worker pulls, updates and pushes whenever it is ready, so updates overlap and each adds its change "
        "to weights that others changed meanwhile.",
    )
    backup_workers: int = Field(
        0,
        ge=0,
        le=998,
        description="In 'sync' mode, each update is the mean of the first (workers - backupWorkers) changes pushed "
        "for it; later ones are dropped, counted and logged, so a lost or slow worker does not stall the others "
        "(backup workers, Chen et al. 2016). 0: every update waits for every worker.",
    )

    # --- outputs ----------------------------------------------------------------------------------------
    checkpoint_every: int = Field(10, ge=1, le=1_000_000, description="Save a checkpoint every N updates.")
    eval_every: int = Field(
        10, ge=0, le=1_000_000, description="Evaluate the deterministic policy every N updates; 0 disables."
    )
    eval_episodes: int = Field(5, ge=1, le=10_000, description="Episodes per evaluation.")
    video_episodes: int = Field(
        1, ge=0, le=100, description="Episodes of the final policy the chief renders to videos/final.gif; 0: none."
    )
    export: bool = Field(
        True,
        description="At the end the chief writes the final policy to exported/ in the run directory: a TensorFlow "
        "SavedModel with signatures act and sample, and policy.json (docs/export.md).",
    )
    metrics_port: int = Field(
        9090, ge=0, le=65535, description="Port of the chief's Prometheus /metrics endpoint; 0 disables it."
    )
    threads: int = Field(1, ge=1, le=256, description="TensorFlow intra- and inter-op threads per process.")
    # Settings above that may differ when a run is resumed are in CHANGEABLE_ON_RESUME, below the class.

    @model_validator(mode="after")
    def _minibatches_divide_batch(self) -> TrainerConfig:
        batch = self.envs_per_worker * self.rollout_steps
        if batch % self.minibatches:
            raise ValueError(
                f"minibatches ({self.minibatches}) must divide envs_per_worker x rollout_steps "
                f"({self.envs_per_worker} x {self.rollout_steps} = {batch})"
            )
        return self

    @model_validator(mode="after")
    def _held_weights_are_state_dependent(self) -> TrainerConfig:
        if self.exploration_hold > 1 and self.exploration != "state_dependent":
            raise ValueError(
                f"exploration_hold ({self.exploration_hold}) holds gSDE's exploration weights: it needs "
                "exploration: state_dependent"
            )
        return self

    @model_validator(mode="after")
    def _clip_floor_under_a_linear_schedule(self) -> TrainerConfig:
        floors = {"clip_range_floor": self.clip_range_floor, "async_clip_range_floor": self.async_clip_range_floor}
        for name, floor in floors.items():
            if floor and self.clip_schedule != "linear":
                raise ValueError(
                    f"{name} ({floor}) is where the linear clip_schedule stops annealing: "
                    "it needs clip_schedule: linear"
                )
            if floor is not None and floor > self.clip_range:
                raise ValueError(f"{name} ({floor}) must not exceed clip_range ({self.clip_range})")
        return self

    def clip_floor(self, async_in_cluster: bool) -> float:
        """The floor of the annealed clip for this worker: `async_clip_range_floor` for an async worker in a
        cluster where it is set, else `clip_range_floor`."""
        if async_in_cluster and self.async_clip_range_floor is not None:
            return self.async_clip_range_floor
        return self.clip_range_floor

    @model_validator(mode="after")
    def _plain_init_without_orthogonal(self) -> TrainerConfig:
        if self.plain_init != "glorot_uniform" and self.orthogonal_init:
            raise ValueError(f"plain_init ({self.plain_init}) is the init without orthogonal_init: set it false")
        return self

    @property
    def batch_size(self) -> int:
        """Transitions one worker collects per update."""
        return self.envs_per_worker * self.rollout_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.minibatches

    def aggregated_changes(self, workers: int) -> int:
        """In sync mode, the changes each update is the mean of: `workers` less the backup workers. ValueError
        when that leaves none."""
        if self.backup_workers >= workers:
            raise ValueError(
                f"backup_workers ({self.backup_workers}) must be less than the workers ({workers}): each update is "
                "the mean of the first workers - backup_workers changes"
            )
        return workers - self.backup_workers


_FIELD_NAMES = {
    **{info.alias: name for name, info in TrainerConfig.model_fields.items() if info.alias},
    **{name: name for name in TrainerConfig.model_fields},
}


def field_name(key: str) -> str | None:
    """The field a settings key names, snake_case (`--set`, config.yaml) or camelCase (`spec.trainer`); None
    for no field."""
    return _FIELD_NAMES.get(key)


def camel_name(name: str) -> str:
    """A field's camelCase name, as `spec.trainer` spells it."""
    return TrainerConfig.model_fields[name].alias or name


CHANGEABLE_ON_RESUME = frozenset(
    {
        "total_steps",
        "checkpoint_every",
        "eval_every",
        "eval_episodes",
        "video_episodes",
        "export",
        "metrics_port",
        "threads",
        "backup_workers",
    }
)
"""Fields of `TrainerConfig` that a resumed run may be given with another value than its saved config's:
they decide how long it trains and what it reports (evaluations, video, export, metrics, checkpoints) or how fast,
not what an update does with the same data. Every other field changes learning, and `--resume` refuses it."""


def describe(error: ValidationError) -> str:
    """A pydantic error as one line: 'learning_rate: Input should be greater than 0 (got -1)'."""
    parts = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown setting"
        elif where:
            message += f" (got {e['input']!r})"
        parts.append(f"{where}: {message}" if where else message)
    return "invalid config: " + "; ".join(parts)
