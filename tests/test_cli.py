import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agents_operator import cli

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_examples(capsys):
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    code, out, err = run(capsys, "validate", *map(str, examples))
    assert code == 0, err
    assert out.count("is valid") == len(examples) >= 5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kind: [unclosed", ":2:1: invalid YAML: did not find expected ',' or ']'"),  # libyaml's words
        ("", "no YAML document found"),
        ("- a\n- b\n", "expected a mapping"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n", "kind: expected apiVersion agents.dev"),
        (
            "apiVersion: agents.dev/v1alpha1\nkind: AgentsJob\nmetadata: {name: x}\n"
            "spec: {replicaSpecs: {worker: {replicas: 0}}}\n",
            "spec.replicaSpecs.worker.replicas: Input should be greater than or equal to 1",
        ),
        (
            "apiVersion: agents.dev/v1alpha1\nkind: AgentsJob\nmetadata: {name: x}\n"
            "spec: {trainer: {preset: nope, epochs: many}, replicaSpecs: {worker: {}}}\n",
            "spec.trainer.epochs: Input should be a valid integer",
        ),
    ],
)
def test_validate_bad_input_is_one_line_per_problem(capsys, tmp_path, text, expected):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    code, _, err = run(capsys, "validate", str(path))
    assert code == 1
    assert expected in err
    assert "Traceback" not in err
    assert all(line.startswith(str(path)) for line in err.splitlines())


def test_validate_missing_file(capsys, tmp_path):
    code, _, err = run(capsys, "validate", str(tmp_path / "nope.yaml"))
    assert code == 1
    assert err.strip() == f"{tmp_path / 'nope.yaml'}: cannot read: No such file or directory"


def test_validate_multi_document_file_names_the_document(capsys, tmp_path):
    good = (ROOT / "examples" / "pendulum.yaml").read_text()
    path = tmp_path / "two.yaml"
    path.write_text(good + "---\n" + good.replace("name: pendulum", "name: Bad_Name"))
    code, out, err = run(capsys, "validate", str(path))
    assert code == 1
    assert f"{path}[0]: AgentsJob pendulum is valid" in out
    assert err.startswith(f"{path}[1]: metadata.name:")


def test_render_prints_the_children(capsys):
    code, out, _ = run(capsys, "render", str(ROOT / "examples" / "pendulum.yaml"), "-n", "team-a")
    assert code == 0
    docs = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("NetworkPolicy", "pendulum-replicas"),
        ("ConfigMap", "pendulum-cluster"),
        ("Service", "pendulum-ps-0"),
        ("Service", "pendulum-worker-0"),
        ("Service", "pendulum-worker-1"),
        ("Pod", "pendulum-ps-0"),
        ("Pod", "pendulum-worker-0"),
        ("Pod", "pendulum-worker-1"),
    ]
    assert {d["metadata"]["namespace"] for d in docs} == {"team-a"}


def test_render_rejects_an_invalid_job(capsys, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: agents.dev/v1alpha1\nkind: AgentsJob\nmetadata: {name: x}\nspec: {}\n")
    code, out, err = run(capsys, "render", str(path))
    assert (code, out) == (1, "")
    assert err.strip() == f"{path}: spec.replicaSpecs: Field required"


def test_crd_command_prints_the_checked_in_crd(capsys):
    code, out, _ = run(capsys, "crd")
    assert code == 0
    assert out == (ROOT / "crds" / "agentsjob.yaml").read_text()


def test_console_script_runs():
    exe = Path(sys.executable).parent / "agents-operator"
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True)
    for command in ("crd", "validate", "render"):
        assert command in out.stdout


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "agents-operator run: error: no cluster: not in a pod (no service account) and no kubeconfig"),
        (["--kubeconfig", "{tmp}/none"], "agents-operator run: error: kubeconfig {tmp}/none: "),
        (["--kubeconfig", "{tmp}/bad"], "agents-operator run: error: kubeconfig {tmp}/bad: not YAML: "),
    ],
)
@pytest.mark.timeout(60)  # a cluster found after all means an operator that runs until stopped
def test_run_without_a_cluster_says_what_is_missing_in_one_line(capsys, monkeypatch, tmp_path, argv, expected):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "bad").write_text("clusters: [\n")
    code, _, err = run(capsys, "run", *(a.format(tmp=tmp_path) for a in argv))
    assert code == 2
    assert err.startswith(expected.format(tmp=tmp_path)) and len(err.strip().splitlines()) == 1, err


def test_run_help_states_the_operators_own_intervals(capsys):
    """`run --help` names the defaults that OperatorOptions really uses (the CLI leaves them unset)."""
    from agents_operator import cli, controller

    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"metrics (default {controller.PROGRESS_INTERVAL:g})" in text
    assert f"every job (default {controller.RESYNC_INTERVAL:g})" in text


# --- `agents-operator run` maps its flags onto OperatorOptions (the operator itself is not started) ---


def test_run_flags_reach_the_operator(monkeypatch):
    from agents_operator import operator_main

    seen = []
    monkeypatch.setattr(operator_main, "run", lambda options: seen.append(options) or 0)
    argv = ["run", "-n", "a", "-n", "b", "--log-format", "json", "--peering", "agents", "--metrics-port", "9100"]
    assert cli.main([*argv, "--liveness", "http://0.0.0.0:8080/healthz", "--trainer-image", "img:1"]) == 0
    (options,) = seen
    assert options.namespaces == ["a", "b"] and not options.all_namespaces
    assert options.log_format == "json" and options.peering == "agents" and options.metrics_port == 9100
    assert options.liveness == "http://0.0.0.0:8080/healthz" and options.default_image == "img:1"


def test_pod_security_flags_reach_the_controller_and_render(monkeypatch):
    from agents_operator import operator_main

    seen = []
    monkeypatch.setattr(operator_main, "run", lambda options: seen.append(options) or 0)
    monkeypatch.setenv("POD_NAMESPACE", "ops")  # the chart sets it from the downward API
    argv = ["run", "--allow-privileged-jobs", "--operator-pod-labels", "app=op,release=r"]
    assert cli.main(argv) == 0
    (options,) = seen
    assert options.allow_privileged and options.operator_namespace == "ops"
    assert options.operator_pod_labels == {"app": "op", "release": "r"}
    _, controller = operator_main.build(options, kube=object())
    assert controller.options.allow_privileged
    assert controller.options.render.operator_namespace == "ops"
    assert controller.options.render.operator_pod_labels == (("app", "op"), ("release", "r"))
    monkeypatch.delenv("POD_NAMESPACE")
    assert cli.main(["run"]) == 0
    assert not seen[-1].allow_privileged and seen[-1].operator_namespace is None


def test_malformed_operator_labels_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["run", "--operator-pod-labels", "app"])
    assert exit.value.code == 2
    assert "--operator-pod-labels: expected key=value pairs separated by commas, got 'app'" in capsys.readouterr().err


def test_help_does_not_import_kopf():
    code = "import sys, agents_operator.cli as c\ntry:\n c.main(['run','--help'])\nexcept SystemExit: pass\n"
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kopf','kubernetes','aiohttp')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("[]")
