"""The trainer's input checks (trainer/usage.py): an unknown environment, a malformed AGENTS_ENV_SERVERS or
--env-server, a run directory without a run: each a usage error, one line, before anything starts."""

import pytest

from agents_operator import presets, tfconfig
from agents_operator.trainer import rundir, usage
from tests.trainer.cli import usage_error


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("envs:50051", "AGENTS_ENV_SERVERS is not valid JSON"),
        ('["envs:50051"]', 'AGENTS_ENV_SERVERS must be a JSON object {"addresses": [...], "mode": ...}'),
        ('{"addresses": []}', "AGENTS_ENV_SERVERS.addresses is empty"),
        ('{"addresses": ["envs"]}', "AGENTS_ENV_SERVERS.addresses must be HOST:PORT strings, got ['envs']"),
        ('{"addresses": ["envs:50051"], "mode": "often"}', "AGENTS_ENV_SERVERS.mode 'often' is not one of step"),
    ],
)
@pytest.mark.parametrize("task", [None, "evaluator"])
def test_malformed_env_servers_are_a_usage_error(capsys, monkeypatch, tmp_path, value, expected, task):
    monkeypatch.setenv(tfconfig.ENV_SERVERS_VAR, value)
    if task is not None:
        config = tfconfig.TFConfig({"worker": ["w:2222"]}, task, 0)
        monkeypatch.setenv(tfconfig.ENV_VAR, config.to_json())
    err = usage_error(capsys, "train", "--config", "pendulum", "--logdir", tmp_path / "run")
    assert err.startswith(f"agents-operator train: error: {expected}"), err
    assert not (tmp_path / "run").exists()


def test_an_unknown_environment_is_one_line_naming_it():
    usage.check_env_id("Pendulum-v1")
    with pytest.raises(usage.UsageError, match=r"^env_id 'Nope-v0': .*Nope.* doesn't exist") as error:
        usage.check_env_id("Nope-v0")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("address", ["nowhere", "host:", ":50051", "host:port"])
def test_an_env_server_address_is_host_and_port(address):
    with pytest.raises(usage.UsageError, match=f"--env-server {address!r}: expected HOST:PORT"):
        usage.check_env_server(address, "Pendulum-v1")


def test_a_run_directory_without_a_run_or_with_a_broken_config_is_one_line(tmp_path):
    assert usage.load_saved(tmp_path) is None
    with pytest.raises(usage.UsageError, match=f"no run in {tmp_path} \\(no {rundir.CONFIG_FILE}\\)"):
        usage.saved_config(tmp_path)
    config = presets.resolve("pendulum")
    rundir.write_config(tmp_path, config)
    assert usage.saved_config(tmp_path) == config
    (tmp_path / rundir.CONFIG_FILE).write_text("learning_rate: [\n")
    with pytest.raises(usage.UsageError, match="not YAML"):
        usage.load_saved(tmp_path)


def test_env_servers_are_read_from_the_environment(monkeypatch):
    monkeypatch.delenv(tfconfig.ENV_SERVERS_VAR, raising=False)
    assert usage.env_servers() is None
    servers = tfconfig.EnvServers(("envs:50051",), "rollout")
    monkeypatch.setenv(tfconfig.ENV_SERVERS_VAR, servers.to_json())
    assert usage.env_servers() == servers


def test_importable_finds_modules_without_importing_them():
    assert usage.importable("json") and not usage.importable("no_such_module_here")
