"""The launch spec: what a process runs as data, serialised into a container or a command line."""

from dataclasses import replace

from agents_operator import launch, tfconfig
from agents_operator.launch import Launch

PEERS = tfconfig.build("j", "ns", {"ps": 1, "worker": 2}, "worker", 1)
TRAINER = Launch(
    program=launch.TRAIN,
    options=(("config", "hopper"),),
    settings={"seed": 3, "mode": "async", "policy_layers": [64, 64]},
    logdir="/runs/j",
    resume=True,
    job="j",
    namespace="ns",
    peers=PEERS,
    env_servers=tfconfig.EnvServers(("j-envserver-1.ns.svc:6000",), "rollout"),
)


def test_a_trainer_serialises_to_the_command_line_and_environment_it_always_had():
    assert launch.argv(TRAINER) == [
        "train",
        "--config",
        "hopper",
        *("--set", "mode=async", "--set", "policy_layers=[64,64]", "--set", "seed=3"),
        *("--logdir", "/runs/j", "--resume"),
    ]
    assert launch.environment(TRAINER) == {
        "TF_CONFIG": PEERS.to_json(),
        "AGENTS_JOB_NAME": "j",
        "AGENTS_NAMESPACE": "ns",
        "AGENTS_REPLICA_TYPE": "worker",
        "AGENTS_REPLICA_INDEX": "1",
        "AGENTS_LOGDIR": "/runs/j",
        "PYTHONUNBUFFERED": "1",
        "AGENTS_ENV_SERVERS": '{"addresses":["j-envserver-1.ns.svc:6000"],"mode":"rollout"}',
    }


def test_an_env_server_serves_on_its_port_outside_the_cluster():
    server = Launch(program=launch.ENV_SERVER, options=(("env", "Pendulum-v1"), ("envs", "4")), port=6000)
    assert launch.argv(server) == ["env-server", "--env", "Pendulum-v1", "--envs", "4", "--port", "6000"]
    assert launch.environment(server) == {"PYTHONUNBUFFERED": "1"}


def test_a_container_runs_its_launch_until_a_field_changes():
    fields = launch.container(TRAINER)
    assert fields["command"] == [launch.COMMAND]
    assert {e["name"]: e["value"] for e in fields["env"]} == launch.environment(TRAINER)
    assert launch.runs(fields, TRAINER)
    changed = replace(TRAINER, settings={**TRAINER.settings, "metrics_port": 9999})
    assert not launch.runs(fields, changed)
    assert "metrics_port=9999" in launch.argv(changed)
    assert not launch.runs({"command": ["python"], "args": fields["args"]}, TRAINER)
