"""A job's containers as local commands (local/processes.py): the plan on localhost ports with the rendered
environment, env servers and sidecars on ports of their own, the launcher's settings in the launch."""

from pathlib import Path

import pytest
import yaml

from agents_operator import local, presets, render, tfconfig
from agents_operator.api import parse_job
from agents_operator.local import processes
from agents_operator.trainer import rundir
from tests.local.standins import PY, job


def tf_config(replica: local.Replica) -> tfconfig.TFConfig:
    """What the trainer of `replica` reads: TF_CONFIG, with the cluster from the run directory's file."""
    config = tfconfig.from_env(replica.env, lambda path: Path(path).read_text())
    assert config is not None
    return config


def test_plan_maps_hosts_to_localhost_and_keeps_the_rendered_environment(tmp_path):
    from agents_operator import manifests

    j = manifests.load_job(Path(__file__).resolve().parents[2] / "examples" / "pendulum.yaml")
    ports = {"ps-0": 40001, "worker-0": 40002, "worker-1": 40003}
    replicas = local.plan(j, tmp_path, ports=ports, metrics_port=9999)
    assert [r.name for r in replicas] == ["ps-0", "worker-0", "worker-1"]
    # The cluster file is what the pods mount from the ConfigMap, written where the operator would create it.
    assert {r.env[tfconfig.CLUSTER_FILE_VAR] for r in replicas} == {str(processes.cluster_file(tmp_path))}
    processes.write_cluster(render.cluster_config(j), tmp_path, ports)
    cfg = tf_config(replicas[2])
    assert cfg.cluster == {"ps": ["localhost:40001"], "worker": ["localhost:40002", "localhost:40003"]}
    assert (cfg.task_type, cfg.task_index) == ("worker", 1)
    argv = replicas[1].argv
    assert argv[:4] == [PY, "-m", "agents_operator", "train"]
    assert argv[argv.index("--logdir") + 1] == str(tmp_path)
    assert "metrics_port=9999" in argv and argv[-1] == "--resume"
    assert replicas[0].env["AGENTS_REPLICA_TYPE"] == "ps"
    assert replicas[1].log_path == tmp_path / "logs" / "pendulum-worker-0.log"


def test_an_elastic_jobs_processes_list_a_local_port_for_every_worker_slot(tmp_path):
    from tests.world import make_job

    j = parse_job(make_job(workers=1, elastic={"maxWorkers": 3}))
    ports = processes.member_ports(j, {"ps-0": 40001, "worker-0": 40002, "worker-2": 40004})
    replicas = local.plan(j, tmp_path, ports=ports)
    assert [r.name for r in replicas] == ["ps-0", "worker-0"]
    processes.write_cluster(render.cluster_config(j), tmp_path, ports)
    cfg = tf_config(replicas[1])
    assert cfg.cluster["worker"][0] == "localhost:40002" and cfg.cluster["worker"][2] == "localhost:40004"
    assert len(set(cfg.cluster["worker"])) == 3  # slot 1 too, on a port of its own
    assert tf_config(replicas[0]).cluster == cfg.cluster


# --- env servers as local processes ----------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_plan_runs_remote_env_servers_on_local_ports_and_tells_each_worker_its_own(tmp_path):
    from agents_operator import manifests

    j = manifests.load_job(EXAMPLES / "cheetah-remote.yaml")
    ports = {f"envserver-{i}": 41000 + i for i in range(4)}
    replicas = local.plan(j, tmp_path, ports=ports)
    assert [r.name for r in replicas] == ["ps-0", *(f"envserver-{i}" for i in range(4)), "worker-0", "worker-1"]
    for i, server in enumerate(replicas[1:5]):
        assert server.argv[:4] == [PY, "-m", "agents_operator", "env-server"]
        assert server.argv[server.argv.index("--port") + 1] == str(41000 + i)
        assert server.restart_policy == "Never"  # the pod's: the plan replaces it, by its OnFailure
        assert server.log_path == tmp_path / "logs" / f"cheetah-remote-envserver-{i}.log"
    for worker in (0, 1):
        env = replicas[5 + worker].env
        servers = tfconfig.parse_env_servers(env[tfconfig.ENV_SERVERS_VAR])
        assert servers.addresses == (f"localhost:{41000 + 2 * worker}", f"localhost:{41001 + 2 * worker}")


def test_plan_gives_each_sidecar_its_own_port(tmp_path):
    from agents_operator import manifests

    j = manifests.load_job(EXAMPLES / "pendulum-sidecar.yaml")
    replicas = local.plan(j, tmp_path, ports={"worker-0/env-server": 42000, "worker-1/env-server": 42001})
    names = [r.name for r in replicas]
    assert names == ["ps-0", "worker-0/env-server", "worker-0", "worker-1/env-server", "worker-1"]
    for worker in (0, 1):
        sidecar, trainer = replicas[1 + 2 * worker], replicas[2 + 2 * worker]
        assert sidecar.sidecar == "env-server" and sidecar.restart_policy == "Always"
        assert sidecar.argv[sidecar.argv.index("--port") + 1] == str(42000 + worker)
        assert sidecar.log_path == tmp_path / "logs" / f"pendulum-sidecar-worker-{worker}.env-server.log"
        servers = tfconfig.parse_env_servers(trainer.env[tfconfig.ENV_SERVERS_VAR])
        assert servers == tfconfig.EnvServers((f"localhost:{42000 + worker}",), "rollout")


def test_the_launchers_settings_replace_the_jobs_own_in_the_launch(tmp_path):
    manifest = yaml.safe_load((EXAMPLES / "hopper.yaml").read_text())
    manifest["spec"]["trainer"]["metricsPort"] = 9100  # the job's own: replaced, not followed, by the launcher's
    j = parse_job(manifest)
    assert j.overrides["metrics_port"] == 9100
    worker = next(r for r in local.plan(j, tmp_path, metrics_port=9999, video=False) if r.name == "worker-0")
    settings = [worker.argv[i + 1] for i, a in enumerate(worker.argv) if a == "--set"]
    assert [s for s in settings if s.startswith(("metrics_port=", "video_episodes="))] == [
        "metrics_port=9999",
        "video_episodes=0",
    ]
    assert worker.argv[worker.argv.index("--logdir") + 1] == str(tmp_path)
    assert worker.env["AGENTS_LOGDIR"] == str(tmp_path)


# --- resuming a run: its saved config checked before anything starts -----------------------------------------


def test_a_run_with_other_learning_settings_is_refused_before_anything_starts(tmp_path):
    j = job(["true"])
    saved = j.config
    rundir.write_config(tmp_path, saved.model_copy(update={"video_episodes": 1, "eval_every": 99}))
    local.check_resume(j, tmp_path, video=False)  # video and evaluation settings may differ
    rundir.write_config(tmp_path, presets.resolve("pendulum", {"learning_rate": 0.5}))
    with pytest.raises(local.LaunchError) as error:
        local.check_resume(j, tmp_path)
    message = str(error.value)
    assert "holds a run with other settings: learning_rate (saved 0.5, given " in message
    assert "\n" not in message and not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("learning_rate: [\n", "not YAML: "), ("learning_rate: -1\n", "learning_rate: Input should be greater than 0")],
)
def test_an_unreadable_saved_config_is_one_line(tmp_path, text, expected):
    (tmp_path / rundir.CONFIG_FILE).write_text(text)
    with pytest.raises(local.LaunchError) as error:
        local.check_resume(job(["true"]), tmp_path)
    assert f"{tmp_path / rundir.CONFIG_FILE}: invalid config: " in str(error.value)
    assert expected in str(error.value) and "\n" not in str(error.value)
