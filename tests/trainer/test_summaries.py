"""TensorBoard summaries (trainer/summaries.py): scalars written at env steps and read back; only documented
tags; a resumed run's second event file wins where both wrote a step."""

import time

import pytest

from agents_operator.trainer import summaries


def test_scalars_are_read_back_by_tag_in_step_order(tmp_path):
    writer = summaries.SummaryWriter(tmp_path)
    writer.scalars(256, {"train/mean_return": -900.0, "loss/value": 3.5})
    writer.scalars(128, {"train/mean_return": -1200.0})
    writer.close()
    assert summaries.read_scalars(tmp_path, "train/mean_return") == [(128, -1200.0), (256, -900.0)]
    assert summaries.read_scalars(tmp_path, "loss/value") == [(256, 3.5)]
    assert summaries.read_scalars(tmp_path, "eval/mean_return") == []
    assert summaries.read_scalars(tmp_path / "none", "loss/value") == []


def test_several_tags_are_read_in_one_pass_as_each_alone(tmp_path):
    writer = summaries.SummaryWriter(tmp_path)
    writer.scalars(256, {"train/mean_return": -900.0, "loss/value": 3.5})
    writer.scalars(128, {"train/mean_return": -1200.0})
    writer.close()
    tags = ("train/mean_return", "loss/value", "eval/mean_return")
    assert summaries.read_tags(tmp_path, tags) == {tag: summaries.read_scalars(tmp_path, tag) for tag in tags}
    assert summaries.read_tags(tmp_path, tags)["train/mean_return"] == [(128, -1200.0), (256, -900.0)]


def test_only_documented_tags_are_written(tmp_path):
    writer = summaries.SummaryWriter(tmp_path)
    try:
        with pytest.raises(KeyError, match=r"undocumented summary tags: \['loss/total'\]"):
            writer.scalars(1, {"loss/value": 1.0, "loss/total": 2.0})
    finally:
        writer.close()
    assert summaries.read_scalars(tmp_path, "loss/value") == []  # nothing of the refused call was written


def test_a_resumed_runs_later_file_keeps_its_value_of_a_step_written_twice(tmp_path):
    first = summaries.SummaryWriter(tmp_path)
    first.scalars(128, {"loss/value": 1.0})
    first.scalars(256, {"loss/value": 2.0})
    first.close()
    time.sleep(1.1)  # an event file is named after its second: the resumed run's must be another file
    second = summaries.SummaryWriter(tmp_path)
    second.scalars(256, {"loss/value": 20.0})
    second.scalars(384, {"loss/value": 30.0})
    second.close()
    assert summaries.read_scalars(tmp_path, "loss/value") == [(128, 1.0), (256, 20.0), (384, 30.0)]


def test_every_tag_says_what_it_measures():
    assert all(tag.count("/") == 1 and len(meaning) > 10 for tag, meaning in summaries.TAGS.items())
