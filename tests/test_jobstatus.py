"""The job's status (jobstatus.py): conditions, state and the patch that writes it."""

from __future__ import annotations

from agents_operator import jobstatus
from agents_operator.api import AgentsJobStatus
from tests.world import NOW


def test_conditions_keep_their_transition_time_until_they_flip():
    st = AgentsJobStatus()
    assert not jobstatus.set_condition(st, "Running", False, "x", "y", NOW)  # False never appears first
    assert st.conditions == []
    assert jobstatus.set_condition(st, "Running", True, "JobRunning", "up", NOW)
    later = NOW.replace(hour=13)
    assert not jobstatus.set_condition(st, "Running", True, "JobRunning", "still up", later)
    assert st.conditions[0].last_transition_time == "2030-01-01T12:00:00Z"
    assert jobstatus.set_condition(st, "Created", True, "JobCreated", "", later)
    assert [c.type for c in st.conditions] == ["Created", "Running"]
    assert jobstatus.set_condition(st, "Failed", True, "X", "", later)
    assert jobstatus.state_of(st) == "Failed"


def test_status_patch_sets_and_removes_keys():
    assert jobstatus.status_patch({"a": 1, "b": 2}, {"a": 1, "c": 3}) == {"c": 3, "b": None}
