"""An exported policy's directory (exported/__init__.py): `policy.json` round trips, and a directory that is
not a readable export is one line naming the file and why. No TensorFlow: the SavedModel is a stand-in file."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agents_operator import exported

METADATA = exported.Metadata(
    env_id="Pendulum-v1",
    max_episode_steps=200,
    observation_shape=[3],
    action_shape=[1],
    action_low=[-2.0],
    action_high=[2.0],
    preset="pendulum",
    checkpoint="ckpt-00000004",
    global_step=4,
    env_steps=16384,
    evaluation=exported.Evaluation(episodes=2, seed=7, mean_return=-150.5, returns=[-100.0, -201.0]),
)


def export_dir(tmp_path: Path, metadata: str | None = None) -> Path:
    directory = tmp_path / exported.DIRECTORY
    directory.mkdir()
    (directory / exported.SAVED_MODEL).write_bytes(b"stand-in")
    (directory / exported.METADATA).write_text(METADATA.to_json() if metadata is None else metadata)
    return directory


@pytest.mark.parametrize(
    "metadata", [METADATA, replace(METADATA, evaluation=None, preset=None, max_episode_steps=None)]
)
def test_the_metadata_round_trips_through_policy_json(tmp_path, metadata):
    directory = export_dir(tmp_path, metadata.to_json())
    assert exported.is_export(directory) and not exported.is_export(tmp_path)
    assert exported.read_metadata(directory) == metadata
    assert json.loads((directory / exported.METADATA).read_text())["format"] == exported.FORMAT


def test_a_non_finite_score_cannot_be_written():
    evaluation = replace(METADATA.evaluation, mean_return=float("nan"))
    with pytest.raises(ValueError):
        replace(METADATA, evaluation=evaluation).to_json()


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ("{", "{path}: unreadable: Expecting property name"),
        ("[]", "{path}: format 'list'; this version reads format 1"),
        ('{"format": 2}', "{path}: format 2; this version reads format 1"),
        ('{"format": 1}', "{path}: missing field '"),
    ],
    ids=["not JSON", "not an object", "another format", "a field missing"],
)
def test_an_unreadable_policy_json_is_one_line_naming_it(tmp_path, metadata, reason):
    directory = export_dir(tmp_path, metadata)
    with pytest.raises(exported.ExportError) as error:
        exported.read_metadata(directory)
    assert str(error.value).startswith(reason.format(path=directory / exported.METADATA))


def test_a_field_of_the_wrong_shape_is_one_line(tmp_path):
    data = json.loads(METADATA.to_json())
    data["evaluation"] = {"episodes": 2}
    with pytest.raises(exported.ExportError, match=r"policy.json: .*missing 3 required positional arguments"):
        exported.read_metadata(export_dir(tmp_path, json.dumps(data)))


def test_what_is_no_export_says_what_is_missing(tmp_path):
    with pytest.raises(exported.ExportError, match=f"^{tmp_path / 'none'}: no such directory$"):
        exported.read_metadata(tmp_path / "none")
    with pytest.raises(exported.ExportError, match=r"not an exported policy \(no saved_model.pb\)$"):
        exported.read_metadata(tmp_path)
    (tmp_path / exported.SAVED_MODEL).write_bytes(b"stand-in")
    with pytest.raises(exported.ExportError, match=r"not an exported policy \(no policy.json\)$"):
        exported.read_metadata(tmp_path)
