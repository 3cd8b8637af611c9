"""Manifests as YAML (manifests.py): written without aliases, the C emitter as the pure-Python one; read with one
line per problem naming the file (and the line, or the field)."""

import io

import pytest
import yaml

from agents_operator import manifests, render
from tests.render.examples import EXAMPLES, load


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_c_emitter_writes_what_the_python_one_does(path):
    children = render.children(load(path))
    assert manifests.dump_all(children) == manifests.dump_all(children, manifests.PureDumper)


def test_the_same_object_twice_is_written_out_twice_not_aliased():
    shared = {"name": "agents-tmp", "emptyDir": {}}
    text = manifests.dump({"a": [shared], "b": [shared]})
    assert "&id" not in text and "*id" not in text
    assert yaml.safe_load(text) == {"a": [shared], "b": [shared]}
    assert manifests.dump_all([shared, shared]) == manifests.dump_all([shared, shared], manifests.PureDumper)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "{path}: no YAML document found"),
        (b"---\n---\n", "{path}: no YAML document found"),
        (b"a: [1,\n", "{path}:2:1: invalid YAML: did not find expected node content"),
        (b"a: \xff\n", "{path}: cannot read: 'utf-8' codec can't decode byte 0xff"),
    ],
    ids=["empty", "only separators", "unclosed list", "not utf-8"],
)
def test_a_file_that_is_no_manifest_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    with pytest.raises(manifests.ManifestError) as err:
        manifests.load_documents(path)
    assert str(err.value).startswith(message.format(path=path)) and "\n" not in str(err.value)


def test_a_missing_file_cannot_be_read(tmp_path):
    with pytest.raises(manifests.ManifestError, match=r"none.yaml: cannot read: No such file or directory"):
        manifests.load_documents(tmp_path / "none.yaml")


def test_standard_input_is_read_for_dash(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("a: 1\n---\n---\nb: 2\n"))
    assert manifests.load_documents("-") == [{"a": 1}, {"b": 2}]


def test_a_job_file_holds_one_valid_agentsjob(tmp_path):
    good = yaml.safe_load((EXAMPLES[0]).read_text())
    path = tmp_path / "two.yaml"
    path.write_text(manifests.dump_all([good, good]))
    with pytest.raises(manifests.ManifestError, match=r"two.yaml: expected one AgentsJob, found 2 documents"):
        manifests.load_job(path)
    bad = {**good, "spec": {**good["spec"], "replicas": 3, "runPolicy": {"backoffLimit": -1}}}
    path.write_text(manifests.dump(bad))
    with pytest.raises(manifests.ManifestError) as err:
        manifests.load_job(path)
    lines = str(err.value).splitlines()
    assert len(lines) >= 2 and all(line.startswith(f"{path}: ") for line in lines)
    assert any(line.startswith(f"{path}: spec.runPolicy.backoffLimit: ") for line in lines)
    assert f"{path}: spec.replicas: unknown field" in lines
