"""Hostile YAML is refused quickly with one line naming the place; ordinary YAML loads as before."""

import pytest
import yaml

from agents_operator import manifests, yamlload


def _bomb(levels: int) -> str:
    """A billion-laughs document: each level repeats the previous one nine times."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*l{i - 1}"] * 9)
        lines.append(f"l{i}: &l{i} [{refs}]")
    return "\n".join(lines) + "\n"


def _never(what: str):
    def fail(*args, **kwargs):
        raise AssertionError(f"the text was {what}")

    return fail


HOSTILE = [
    # (text, the line, the path, a fragment of the reason)
    ("spec:\n  trainer:\n    epochs: 1\n    epochs: 2\n", 4, "spec.trainer.epochs", "duplicate key 'epochs'"),
    ("kind: AgentsJob\nkind: TFJob\n", 2, "kind", "duplicate key 'kind'"),
    ("a:\n  - {x: 1, x: 2}\n", 2, "a.x", "duplicate key 'x'"),
    (_bomb(9), 6, "l5", "nodes once aliases are expanded"),  # 9**6 > 100,000
    ("a: &a [*a]\n", 1, "", "unfinished or unknown anchor"),
    ("a: " + "[" * 100 + "]" * 100 + "\n", 1, "a", "nested more than 64 levels"),
    (
        "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 80)) + "  " * 80 + "v: 1\n",
        65,
        ".".join(["a"] + [f"k{i}" for i in range(1, 64)]),
        "nested more than 64 levels",
    ),
    ("a: " + "9" * 5000 + "\n", 1, "a", "as int: Exceeds the limit (4300 digits)"),
    ("spec:\n  when: !!timestamp 2001-02-30\n", 2, "spec.when", "as timestamp: day is out of range for month"),
    ("a: [1, !!bool maybe]\n", 1, "a", "'maybe' as bool: not one of its values"),
    ("a: !!int abc\n", 1, "a", "'abc' as int: invalid literal"),
    ("a: !!int ''\n", 1, "a", "'' as int: string index out of range"),
    ("{1: x, 0x1: y}\n", 1, "0x1", "duplicate key '0x1'"),  # one key once built: the mapping would lose x
    ("{null: 1, ~: 2}\n", 1, "~", "duplicate key '~'"),
]


@pytest.mark.parametrize(("text", "line", "path", "reason"), HOSTILE, ids=lambda v: str(v)[:30])
def test_hostile_yaml_is_refused_naming_line_and_path(text, line, path, reason, monkeypatch):
    monkeypatch.setattr(yamlload.yaml, "load_all", _never("built"))  # refused from the events, nothing built
    with pytest.raises(yamlload.YAMLBoundsError) as err:
        yamlload.load_all(text)
    assert reason in err.value.reason
    assert (err.value.line, err.value.path) == (line, path)


@pytest.mark.parametrize("text", ["{1: x, '1': y}\n", "{true: x, 'true': y}\n", "{1: a, 1.5: b}\n"])
def test_keys_that_differ_once_built_are_not_duplicates(text):
    assert yamlload.load_all(text) == list(yaml.safe_load_all(text)) and len(yamlload.load_all(text)[0]) == 2


def test_a_value_that_cannot_be_built_is_one_line_naming_file_line_and_path(tmp_path):
    path = tmp_path / "date.yaml"
    path.write_text("spec:\n  when: !!timestamp 2001-02-30\n")
    with pytest.raises(manifests.ManifestError) as err:
        manifests.load_documents(path)
    assert (
        str(err.value) == f"{path}:2: spec.when: cannot read '2001-02-30' as timestamp: day is out of range for month"
    )


def test_a_character_yaml_does_not_allow_is_one_line_with_line_and_column(tmp_path):
    path = tmp_path / "ctl.yaml"
    path.write_text("a: 1\nb: \x1f\n")
    with pytest.raises(manifests.ManifestError) as err:
        manifests.load_documents(path)
    assert str(err.value) == f"{path}:2:4: invalid YAML: control characters are not allowed #x001f"


def test_a_large_ordinary_manifest_is_within_the_bounds():
    text = "".join(f"k{i}: [{i}, {i}.5, 'text {i}', true, null]\n" for i in range(10_000))  # 60k nodes
    assert yamlload.load_all(text) == [yaml.safe_load(text)]


def test_a_manifest_larger_than_etcd_stores_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text("a: '" + "x" * (10 * 1024 * 1024) + "'\n")
    monkeypatch.setattr(yamlload.yaml, "parse", _never("parsed"))
    with pytest.raises(manifests.ManifestError) as err:
        manifests.load_documents(path)
    assert str(err.value) == f"{path}: larger than {yamlload.MAX_BYTES} bytes, the most an API server (etcd) stores"


def test_manifest_errors_name_file_line_and_path(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("spec:\n  trainer: {}\n  trainer: {}\n")
    with pytest.raises(manifests.ManifestError) as err:
        manifests.load_documents(path)
    assert str(err.value) == f"{path}:3: spec.trainer: duplicate key 'trainer'"


@pytest.mark.parametrize(
    "text",
    [
        "a: &x {k: 1}\nb:\n  <<: *x\n  j: 2\n",  # a merge key is not a duplicate
        "a: 1\n---\na: 2\n",  # the same key in two documents
        "a: {b: 1}\nc: {b: 1}\n",  # the same key in two mappings
        "? a\n: x\n? b\n: y\n",  # explicit keys
        "a: &s [1, 2]\nb: [*s, *s]\n",  # a few aliases
    ],
)
def test_ordinary_yaml_loads_as_pyyaml_does(text):
    assert yamlload.load_all(text) == list(yaml.safe_load_all(text))


def test_the_c_loader_is_used_when_pyyaml_has_it():
    assert issubclass(yamlload.Loader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def test_a_plain_date_stays_a_string_as_kubectl_reads_it():
    assert yamlload.load_all("a: 2024-01-01\nb: 2001-02-30\n") == [{"a": "2024-01-01", "b": "2001-02-30"}]


def test_a_date_in_an_annotation_is_valid_as_the_api_server_finds_it(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(
        "apiVersion: agents.dev/v1alpha1\nkind: AgentsJob\n"
        "metadata: {name: demo, annotations: {released: 2024-01-01}}\nspec: {replicaSpecs: {worker: {}}}\n"
    )
    assert manifests.load_job(path).metadata.annotations == {"released": "2024-01-01"}
