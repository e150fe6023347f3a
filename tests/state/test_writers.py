"""One writer per pipeline and command: leases held by processes, fenced by an epoch that only grows
(SQLite and PostgreSQL state stores)."""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys
import time

import pytest
import sqlalchemy

from binlake.state import fencing
from binlake.state.holders import Holder
from binlake.state.leases import Command
from binlake.state.store import StateStore
from binlake.state.tables import writers_table
from binlake.state.writers import FencedError, WriterBusyError, Writers

TTL = dt.timedelta(minutes=5)


def a_dead_process(command: str) -> Holder:
    """A holder on this host whose process has ended (as after ``kill -9``)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = Holder.this_process(command)  # the child's start time is read before it is reaped
    import psutil

    created = psutil.Process(child.pid).create_time()
    child.wait()
    return Holder(command, "dead" + started.token[4:], socket.gethostname(), child.pid, created)


def test_a_second_process_of_a_command_is_refused_naming_the_first(store: StateStore) -> None:
    writers = Writers(store.engine, "p")
    first = writers.claim(Holder.this_process(Command.STREAM), TTL)
    assert first.epoch == 1
    with pytest.raises(WriterBusyError) as refused:
        writers.claim(Holder.this_process(Command.STREAM), TTL)
    message = str(refused.value)
    assert f"pid {first.holder.pid} on {socket.gethostname()}" in message
    assert "already has a writer for `binlake stream`" in message
    assert "since " in message
    assert "Fix: wait for it to finish, or stop it" in message
    # Another command of the same pipeline, or the same command of another pipeline, is its own writer.
    assert writers.claim(Holder.this_process(Command.SNAPSHOT), TTL).epoch == 1
    assert Writers(store.engine, "q").claim(Holder.this_process(Command.STREAM), TTL).epoch == 1


def test_a_dead_holder_on_this_host_is_taken_over_at_once_and_the_epoch_grows(store: StateStore) -> None:
    writers = Writers(store.engine, "p")
    dead = a_dead_process(Command.SNAPSHOT)
    assert dead.gone()
    assert not Holder.this_process(Command.SNAPSHOT).gone()
    with store.engine.begin() as conn:
        conn.execute(
            writers_table.insert().values(
                pipeline="p", command=Command.SNAPSHOT, token=dead.token, host=dead.host, pid=dead.pid,
                process_started=dead.started, since=dt.datetime.now(dt.UTC),
                expires_at=dt.datetime.now(dt.UTC) + TTL, epoch=7,
            )
        )  # fmt: skip
    taken = writers.claim(Holder.this_process(Command.SNAPSHOT), TTL)
    assert taken.epoch == 8
    # A live holder on another host is not: it keeps the lease until it expires.
    elsewhere = Holder(Command.SNAPSHOT, "elsewhere", "another-host", dead.pid, dead.started)
    assert not elsewhere.gone()


def test_a_released_or_expired_lease_is_claimed_at_a_higher_epoch(store: StateStore) -> None:
    writers = Writers(store.engine, "p")
    lease = writers.claim(Holder.this_process(Command.MAINTAIN), TTL)
    writers.release(lease)
    again = writers.claim(Holder.this_process(Command.MAINTAIN), dt.timedelta(seconds=1))
    assert again.epoch == lease.epoch + 1
    time.sleep(1.2)
    third = writers.claim(Holder(Command.MAINTAIN, "x", "another-host", 1, 0.0), TTL)
    assert third.epoch == again.epoch + 1


def test_a_writer_that_lost_its_lease_can_write_nothing_more(store: StateStore) -> None:
    """The old writer's transactions that write are rolled back by the fence; reads still work;
    its renewal fails too."""
    short = dt.timedelta(seconds=2)
    with fencing.writing(store.engine, "p", Command.STREAM, short) as fence:
        store.offsets("p").save("stream", fence_offset(1))  # its own writes go through
        time.sleep(3.5)  # renewed meanwhile: still the writer
        store.offsets("p").save("stream", fence_offset(2))
        # Another process takes over (as after this one was paused past its lease).
        other = sqlalchemy.create_engine(store.engine.url)
        with other.begin() as conn:
            conn.execute(
                sqlalchemy.update(writers_table)
                .where(writers_table.c.pipeline == "p", writers_table.c.command == Command.STREAM)
                .values(token="newer", host="another-host", epoch=fence.epoch + 1)
            )
        other.dispose()
        with pytest.raises(
            FencedError, match=r"lost its writer lease: it was taken over by `binlake stream`"
        ):
            store.offsets("p").save("stream", fence_offset(3))
        assert store.offsets("p").load("stream") == fence_offset(2)  # nothing of the refused write
        with pytest.raises(FencedError):
            fence.check()
        with pytest.raises(FencedError):
            Writers(store.engine, "p").renew(fence.lease, short)
    # Its release leaves the new writer's lease alone.
    current = Writers(store.engine, "p").current(Command.STREAM)
    assert current is not None
    assert (current.holder.token, current.epoch) == ("newer", fence.epoch + 1)


def test_table_leases_of_a_superseded_writer_do_not_keep_its_successor_out(store: StateStore) -> None:
    writers = Writers(store.engine, "p")
    old = writers.claim(Holder.this_process(Command.STREAM), dt.timedelta(seconds=1))
    store.leases("p").hold(["ns.t"], old.holder, dt.timedelta(minutes=10))
    time.sleep(1.2)  # the old writer's lease expires (paused, say); its table lease would last 10 min
    new = writers.claim(Holder.this_process(Command.STREAM), TTL)
    store.leases("p").hold(["ns.t"], new.holder, dt.timedelta(minutes=10))  # not refused
    with pytest.raises(Exception, match="held by `binlake stream`"):
        store.leases("p").hold(["ns.t"], Holder.this_process(Command.MAINTAIN), TTL)


def fence_offset(pos: int) -> object:
    from binlake.offsets import BinlogOffset

    return BinlogOffset("binlog.000001", pos)
