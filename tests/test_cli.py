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
