import json
import re

import pytest

from agents_operator import tfconfig
from agents_operator.tfconfig import TFConfig, TFConfigError


def test_build_matches_the_tfjob_convention():
    cfg = tfconfig.build("pend", "ml", {"ps": 1, "worker": 2}, "worker", 1)
    assert json.loads(cfg.to_json()) == {
        "cluster": {
            "ps": ["pend-ps-0.ml.svc:2222"],
            "worker": ["pend-worker-0.ml.svc:2222", "pend-worker-1.ml.svc:2222"],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    assert cfg.address == "pend-worker-1.ml.svc:2222"
    assert (cfg.num_ps, cfg.num_workers) == (1, 2)


@pytest.mark.parametrize(
    ("replicas", "task"),
    [
        ({"worker": 1}, ("worker", 0)),
        ({"ps": 2, "worker": 3}, ("ps", 1)),
        ({"ps": 1, "worker": 4, "evaluator": 1}, ("evaluator", 0)),
        ({"ps": 3, "worker": 999}, ("worker", 998)),
    ],
)
def test_round_trip(replicas, task):
    cfg = tfconfig.build("j", "default", replicas, *task, port=3333)
    again = tfconfig.parse(cfg.to_json())
    assert again == cfg
    assert again.to_json() == cfg.to_json()
    assert "evaluator" not in again.cluster


def test_evaluator_is_not_a_cluster_member():
    cfg = tfconfig.build("j", "ns", {"ps": 1, "worker": 1, "evaluator": 1}, "evaluator", 0)
    assert cfg.address is None
    assert set(cfg.cluster) == {"ps", "worker"}


def test_parse_keeps_unknown_top_level_keys():
    text = json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"})
    cfg = tfconfig.parse(text)
    assert cfg.environment == "cloud"
    assert json.loads(cfg.to_json())["rpc_layer"] == "grpc"


def test_on_local_ports_puts_every_member_on_its_own_port():
    cfg = tfconfig.build("j", "ns", {"ps": 1, "worker": 2}, "worker", 1)
    local = cfg.on_local_ports({("ps", 0): 40001, ("worker", 0): 40002, ("worker", 1): 40003})
    assert local.cluster == {"ps": ["localhost:40001"], "worker": ["localhost:40002", "localhost:40003"]}
    assert (local.task_type, local.task_index) == ("worker", 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"task": {"type": "worker"}}', "cluster"),
        ('{"cluster": {"worker": ["a:1"]}}', "task.type"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}', "not one of"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}', "not in the cluster"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}', "integer"),
        ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "no worker"),
        ('{"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}', "lists of addresses"),
    ],
)
def test_parse_errors_say_what_is_wrong(text, message):
    with pytest.raises(TFConfigError, match=message):
        tfconfig.parse(text)


def _no_file(path: str) -> str:
    raise FileNotFoundError(2, "No such file or directory", path)


def test_from_env():
    assert tfconfig.from_env({}, _no_file) is None
    assert tfconfig.from_env({"TF_CONFIG": "  "}, _no_file) is None
    cfg = TFConfig({"worker": ["w:1"]}, "worker", 0)
    assert tfconfig.from_env({"TF_CONFIG": cfg.to_json()}, _no_file) == cfg


def test_the_cluster_is_read_from_its_file_when_tf_config_names_only_the_task():
    cfg = TFConfig({"ps": ["p:1"], "worker": ["w:1", "w:2"]}, "worker", 1)
    files = {"/etc/c.json": tfconfig.cluster_json(cfg.cluster)}
    env = {"TF_CONFIG": cfg.task_json(), tfconfig.CLUSTER_FILE_VAR: "/etc/c.json"}
    assert "cluster" not in json.loads(cfg.task_json())
    assert tfconfig.from_env(env, files.__getitem__) == cfg
    # TF_CONFIG's own cluster, when it has one, is the one used
    assert tfconfig.from_env({**env, "TF_CONFIG": cfg.to_json()}, _no_file) == cfg


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "AGENTS_CLUSTER_FILE /etc/c.json: cannot read the cluster: No such file or directory"),
        ("[1", "AGENTS_CLUSTER_FILE /etc/c.json is not valid JSON"),
        ('["w:1"]', "AGENTS_CLUSTER_FILE /etc/c.json must be a JSON object"),
        ('{"worker": "w:1"}', "AGENTS_CLUSTER_FILE /etc/c.json must map task types to lists of addresses"),
        ('{"ps": ["p:1"]}', "task worker:1 is not in the cluster (0 worker address(es))"),
        ('{"worker": ["w:1"]}', "task worker:1 is not in the cluster (1 worker address(es))"),
    ],
)
def test_a_bad_cluster_file_is_named_with_what_is_wrong(text, message):
    task = TFConfig({"worker": ["a", "b"]}, "worker", 1).task_json()
    env = {"TF_CONFIG": task, tfconfig.CLUSTER_FILE_VAR: "/etc/c.json"}
    with pytest.raises(TFConfigError, match=re.escape(message)):
        tfconfig.from_env(env, _no_file if text is None else {"/etc/c.json": text}.__getitem__)


@pytest.mark.parametrize(
    ("replicas", "task", "environment"),
    [
        ({"ps": 1, "worker": 2}, ("worker", 1), "cloud"),
        ({"worker": 1}, ("worker", 0), "cloud"),
        ({"ps": 3, "worker": 5}, ("evaluator", 0), 'gökçe "quoted"'),
        ({"ps": 999, "worker": 999}, ("ps", 998), "cloud"),
    ],
)
def test_the_spliced_json_is_the_plain_encoding(replicas, task, environment):
    base = tfconfig.build("job", "ns", replicas, *task)
    cfg = TFConfig(base.cluster, base.task_type, base.task_index, environment)
    assert cfg.to_json() == json.dumps(cfg.to_dict(), sort_keys=True, separators=(",", ":"))
