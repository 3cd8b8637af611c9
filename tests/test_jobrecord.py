"""What the controller keeps about each job (jobrecord.py): a record of its own, busy while anything uses it."""

import asyncio

from agents_operator import reconcile
from agents_operator.jobrecord import JobRecord


def test_a_new_record_remembers_nothing_and_shares_nothing():
    first, second = JobRecord(), JobRecord()
    assert (first.memory.written_status, first.memory.written_at, first.memory.failures) == (None, 0.0, 0)
    assert (first.memory.deleting, first.memory.counted, first.memory.pod_events) == (set(), {}, {})
    assert isinstance(first.memory.desired, reconcile.DesiredCache)
    assert first.lock is not second.lock and first.memory.desired is not second.memory.desired
    first.memory.deleting.add("pj-worker-0")
    assert second.memory.deleting == set()
    assert not (first.dirty or first.forgotten) and first.state is None and not first.busy


async def test_a_record_is_busy_while_a_coroutine_holds_or_awaits_it_or_its_task_runs():
    record = JobRecord()
    record.users += 1
    assert record.busy
    record.users -= 1
    assert not record.busy
    release = asyncio.Event()
    record.task = asyncio.create_task(release.wait())
    await asyncio.sleep(0)
    assert record.busy
    release.set()
    await record.task
    assert not record.busy
