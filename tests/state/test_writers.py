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
from binlake.state.leases import Command, TableBusyError
from binlake.state.store import StateStore
from binlake.state.tables import writers_table
from binlake.state.writers import FencedError, WriterBusyError

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
    writers = store.writers("p")
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
    assert store.writers("q").claim(Holder.this_process(Command.STREAM), TTL).epoch == 1


def test_a_dead_holder_on_this_host_is_taken_over_at_once_and_the_epoch_grows(store: StateStore) -> None:
    writers = store.writers("p")
    dead = a_dead_process(Command.SNAPSHOT)
    assert dead.gone()
    assert not Holder.this_process(Command.SNAPSHOT).gone()
    with store.engine.begin() as conn:
        conn.execute(
            writers_table.insert().values(
                pipeline="p", command=Command.SNAPSHOT, token=dead.token, holder=dead.to_json(),
                host=dead.host, pid=dead.pid, process_started=dead.started, since=dt.datetime.now(dt.UTC),
                expires_at=dt.datetime.now(dt.UTC) + TTL, epoch=7,
            )
        )  # fmt: skip
    taken = writers.claim(Holder.this_process(Command.SNAPSHOT), TTL)
    assert taken.epoch == 8
    # A live holder on another host is not: it keeps the lease until it expires.
    elsewhere = Holder(Command.SNAPSHOT, "elsewhere", "another-host", dead.pid, dead.started)
    assert not elsewhere.gone()


def test_a_released_or_expired_lease_is_claimed_at_a_higher_epoch(store: StateStore) -> None:
    writers = store.writers("p")
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
            store.writers("p").renew(fence.lease, short)
    # Its release leaves the new writer's lease alone.
    current = store.writers("p").current(Command.STREAM)
    assert current is not None
    assert (current.holder.token, current.epoch) == ("newer", fence.epoch + 1)


def test_table_leases_go_with_a_superseded_writer(store: StateStore) -> None:
    """A stream paused past its writer lease keeps its table leases (10 minutes): once another
    stream took over and finished, maintenance is not kept out by the paused one's tables."""
    writers = store.writers("p")
    old = writers.claim(Holder.this_process(Command.STREAM), dt.timedelta(seconds=1))
    store.leases("p").hold(["ns.t"], old.holder, dt.timedelta(minutes=10))
    maintain = Holder.this_process(Command.MAINTAIN)
    with pytest.raises(TableBusyError, match="held by `binlake stream`"):
        store.leases("p").hold(["ns.t"], maintain, TTL)  # the stream is the writer: refused
    time.sleep(1.2)  # its writer lease expires (paused, say)
    new = writers.claim(Holder.this_process(Command.STREAM), TTL)
    writers.release(new)
    store.leases("p").hold(["ns.t"], maintain, TTL)


def test_parts_of_a_command_write_side_by_side_but_one_part_once(store: StateStore) -> None:
    """A snapshot's chunk groups (Airflow's mapped jobs) each have a writer lease of their own and
    share the tables; a second run of one group (a retry beside a zombie) is refused."""
    writers = store.writers("p")
    first = Holder.this_process(Command.SNAPSHOT, "of 2 chunks t#0…t#1")
    second = Holder.this_process(Command.SNAPSHOT, "of 2 chunks t#2…t#3")
    writers.claim(first, TTL)
    writers.claim(second, TTL)
    store.leases("p").hold(["ns.t"], first, TTL)
    store.leases("p").hold(["ns.t"], second, TTL)
    with pytest.raises(WriterBusyError, match=r"writer for `binlake snapshot of 2 chunks t#0…t#1`"):
        writers.claim(Holder.this_process(Command.SNAPSHOT, "of 2 chunks t#0…t#1"), TTL)
    with pytest.raises(TableBusyError):
        store.leases("p").hold(["ns.t"], Holder.this_process(Command.MAINTAIN), TTL)


def fence_offset(pos: int) -> object:
    from binlake.offsets import BinlogOffset

    return BinlogOffset("binlog.000001", pos)
