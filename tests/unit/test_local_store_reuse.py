"""Executor-local stores that survive a restart, driven without Spark.

A dedup task runs on "executors", each a local-state root: a store at the committed
version is used as it is, one behind (its batches still in the durable log) applies only
the missing changes, and any other (ahead by an attempt that was not committed, of another
incarnation, older than the durable base, truncated or overwritten) is rebuilt. Each way,
the output is a clean run's. The task reports which it was, and the entries it wrote, in
its ``local_*`` side rows (the restore report's)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.taskharness import Out, Rec, Runner, close_local_stores

from kspark_server import envelope as env
from kspark_server import localstore, stateenc
from kspark_server.operators.dedup import DedupProcessor
from kspark_server.spec import DedupSpec, KeyValue, Packed, PrimSpec, StateOptions

STR = PrimSpec(spark="string")
APP = "orders"


def spec(app: str = APP) -> DedupSpec:
    return DedupSpec(
        processor="DEDUP",
        store="seen",
        mode="by_key",
        interval_ms=10_000,
        id_selector=None,
        input=KeyValue(key=STR, value=STR),
        output_schema=env.envelope_json("string", "string"),
        packed=Packed(),
        # changes are logged against small bases too, and checked
        state=StateOptions(application_id=app, check_log=True),
    )


def batches() -> list[list[tuple[int, Rec]]]:
    """A large first batch (the base), then small ones (logged against it, not compacted):
    three new keys and a repeat each."""
    first = [(i, (0, f"k{i}", f"v{i}", 280 + i % 20)) for i in range(200)]
    rest = [
        [
            (200 + 10 * b + i, (0, f"k{b}" if i == 3 else f"n{b}-{i}", f"w{b}-{i}", 300 + b))
            for i in range(4)
        ]
        for b in range(6)
    ]
    return [first, *rest]


class Executors(Runner):
    """One task of the dedup operator; :meth:`on` moves it to the executor ``name`` (a
    local-state root of its own), a fresh worker process each time."""

    def restart(self, name: str = "a") -> None:
        close_local_stores()
        self.mp.setenv("KSPARK_LOCAL_STATE_DIR", str(self.tmp / name))
        self.proc = self.make()

    on = restart

    def step(self, batch: list[tuple[int, Rec]]) -> tuple[list[Out], dict[str, int]]:
        """The batch's output, and its ``local_*`` side rows: kind -> entries written."""
        self.sides = {}
        out = self.run(batch)
        return out, {k: n for k, n in self.sides.items() if k.startswith("local_")}

    def store_path(self, name: str) -> str:
        """The data file of the task's store on executor ``name``."""
        folder = localstore.store_dir(str(self.tmp / name), APP, "seen")
        found = [
            os.path.join(d, "data.mdb") for d, _, files in os.walk(folder) if "data.mdb" in files
        ]
        assert len(found) == 1, found
        return found[0]


def clean_run(tmp: Path, mp: pytest.MonkeyPatch) -> list[list[Out]]:
    r = Executors(lambda: DedupProcessor(spec()), tmp / "clean", mp)
    try:
        return [r.run(b) for b in batches()]
    finally:
        close_local_stores()


@pytest.fixture
def want(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[Out]]:
    return clean_run(tmp_path, monkeypatch)


@pytest.fixture
def task(want: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    r = Executors(lambda: DedupProcessor(spec()), tmp_path / "run", monkeypatch)
    yield r
    close_local_stores()


def test_a_store_at_the_committed_version_is_reused(task: Any, want: Any) -> None:
    bs = batches()
    for b, w in zip(bs[:3], want, strict=False):
        assert task.step(b)[0] == w
    task.on("a")  # a restarted server: a new worker process, the same disk
    assert task.step(bs[3]) == (want[3], {"local_reused": 0})


def test_a_store_behind_catches_up_from_the_log(task: Any, want: Any) -> None:
    bs = batches()
    task.step(bs[0])
    task.step(bs[1])
    task.on("b")  # another executor takes the task for two batches
    rebuilt = task.step(bs[2])[1]
    assert list(rebuilt) == ["local_rebuilt"] and rebuilt["local_rebuilt"] >= 200
    assert task.step(bs[3])[0] == want[3]
    ver = task.durable.version()
    assert ver[4] == 3, "the batches since the base are in the log"
    task.on("a")  # back: a's store is two batches behind, the log has them
    out, local = task.step(bs[4])
    assert out == want[4]
    # the two batches' changed keys, not the base
    assert list(local) == ["local_caught_up"] and 0 < local["local_caught_up"] <= 8
    task.on("b")  # b is one batch behind
    out, local = task.step(bs[5])
    assert out == want[5]
    assert list(local) == ["local_caught_up"] and 0 < local["local_caught_up"] <= 4


def test_a_store_ahead_of_the_committed_version_is_rebuilt(task: Any, want: Any) -> None:
    bs = batches()
    for b in bs[:3]:
        task.step(b)
    committed = task.durable.committed
    task.step(bs[3])  # an attempt whose batch is not committed: the store is ahead
    task.durable.committed = committed
    task.on("a")
    out, local = task.step(bs[3])
    assert out == want[3]
    assert list(local) == ["local_rebuilt"]


def test_a_store_older_than_the_durable_base_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bs = batches()
    # many new keys: a log past half the base, so the batch writes a new base
    big = [(900 + i, (0, f"m{i}", f"x{i}", 310)) for i in range(300)]
    seq = [*bs[:4], big, bs[5]]
    want = [Executors(lambda: DedupProcessor(spec()), tmp_path / "clean", monkeypatch)]
    want_out = [want[0].run(b) for b in seq]
    close_local_stores()
    task = Executors(lambda: DedupProcessor(spec()), tmp_path / "run", monkeypatch)
    try:
        task.step(seq[0])
        task.on("b")
        for b in seq[1:5]:
            task.step(b)
        assert task.durable.version()[4] == 0, "a new base"
        task.on("a")  # a's store is at batch 1, the base at batch 5
        out, local = task.step(seq[5])
        assert out == want_out[5]
        assert list(local) == ["local_rebuilt"]
    finally:
        close_local_stores()


def test_a_foreign_store_is_rebuilt(task: Any, want: Any) -> None:
    """The checkpoint was reset (a new incarnation, with its own stores beside the old
    ones), and then a store of the new incarnation was copied over the old one's: the
    old incarnation's task finds another incarnation's version and rebuilds."""
    bs = batches()
    task.step(bs[0])
    task.step(bs[1])
    mine_path = task.store_path("a")
    mine = task.durable.committed
    task.durable.committed = None  # another checkpoint of the app: its own incarnation
    task.on("a")
    task.step(bs[2])
    task.step(bs[3])
    close_local_stores()
    others = [p for p in _data_files(task.tmp / "a") if p != mine_path]
    assert len(others) == 1, "each incarnation has its own store"
    shutil.copyfile(others[0], mine_path)
    os.remove(os.path.join(os.path.dirname(mine_path), "lock.mdb"))
    task.durable.committed = mine
    task.on("a")
    out, local = task.step(bs[2])
    assert out == want[2]
    assert list(local) == ["local_rebuilt"]


def test_an_incarnations_store_is_kept_apart_from_anothers(task: Any, want: Any) -> None:
    """Two durable states of one app's store (a reset checkpoint, or one operator that
    Spark runs twice for two sinks) never rebuild each other's local store."""
    bs = batches()
    task.step(bs[0])
    task.step(bs[1])
    mine = task.durable.committed
    task.durable.committed = None
    task.on("a")
    task.step(bs[2])
    task.durable.committed = mine
    task.on("a")
    assert task.step(bs[2]) == (want[2], {"local_reused": 0})


def _data_files(root: Path) -> list[str]:
    return [os.path.join(d, "data.mdb") for d, _, files in os.walk(root) if "data.mdb" in files]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "garbage-in-place", "empty"])
def test_a_corrupted_store_is_deleted_and_rebuilt(task: Any, want: Any, damage: str) -> None:
    bs = batches()
    for b in bs[:3]:
        task.step(b)
    path = task.store_path("a")
    size = os.path.getsize(path)
    assert size > 16384
    if damage != "garbage-in-place":
        close_local_stores()  # the server stopped: no process holds the store open
    if damage == "truncate":
        os.truncate(path, size // 2)
    elif damage == "empty":
        os.truncate(path, 0)
    else:
        garbage = bytes((i * 151 + 7) % 256 for i in range(size))
        tmp = path + ".tmp"
        Path(tmp).write_bytes(garbage)
        os.replace(tmp, path)  # a new file: even an open store notices
    task.on("a")
    out, local = task.step(bs[3])
    assert out == want[3]
    assert list(local) == ["local_rebuilt"]
    assert task.step(bs[4]) == (want[4], {"local_reused": 0})


def test_a_store_truncated_while_open_is_not_read(task: Any, want: Any) -> None:
    """A worker process that holds the store open (Spark reuses Python workers) finds
    the file shorter and opens it anew, checked, instead of reading pages that are gone."""
    bs = batches()
    for b in bs[:3]:
        task.step(b)
    path = task.store_path("a")
    os.truncate(path, os.path.getsize(path) // 2)
    out, local = task.step(bs[3])
    assert out == want[3]
    assert list(local) == ["local_rebuilt"]


_GROW = """
import sys
from kspark_server import localstore
s = localstore.TaskStore.open(sys.argv[1], "seen", "inc", 0)
s.apply([(b"%06d" % i, b"v" * 200) for i in range(20_000)], {}, ("inc", 2))
"""

_READ_AFTER_CUT = """
import os, subprocess, sys
from kspark_server import localstore
root = sys.argv[1]
s = localstore.TaskStore.open(root, "seen", "inc", 0)
s.apply([(b"a", b"1")], {}, ("inc", 1))
seen = os.path.getsize(os.path.join(s.path, "data.mdb"))
# another worker process grows the store, then the file is cut short, but not below what
# this process saw when it last looked
subprocess.run([sys.executable, "-c", sys.argv[2], root], check=True)
data = os.path.join(s.path, "data.mdb")
grown = os.path.getsize(data)
assert grown > 4 * seen, (seen, grown)
os.truncate(data, (seen + grown) // 2)
again = localstore.TaskStore.open(root, "seen", "inc", 0)
print(again is not s, again.discarded != "", sum(1 for _ in again.pairs()))
"""


def test_a_store_cut_short_above_what_a_process_saw_is_not_read(tmp_path: Path) -> None:
    """A worker holds the store open; another worker grows it; the file is then cut to a
    size between the two: the first worker must see that pages its store names are gone
    (reading them would kill it with SIGBUS), not only that the file shrank below what it
    saw."""
    import subprocess
    import sys

    got = subprocess.run(
        [sys.executable, "-c", _READ_AFTER_CUT, str(tmp_path), _GROW],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert got.returncode == 0, got.stderr[-2000:]
    reopened, discarded, entries = got.stdout.split()
    assert (reopened, discarded, entries) == ("True", "True", "0")


def test_apps_keep_their_stores_apart(tmp_path: Path) -> None:
    root = str(tmp_path)
    a = localstore.TaskStore.open(root, "seen", "inc", 0, application_id="a")
    b = localstore.TaskStore.open(root, "seen", "inc", 0, application_id="b")
    a.reset([(b"k", b"1")], {}, ("inc", 1))
    assert b.version is None and a.path != b.path
    for app in ("a", "b"):
        assert os.path.isfile(os.path.join(root, app, localstore.APP_MARKER))
    close_local_stores()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "header"])
def test_opening_a_damaged_environment_discards_it(tmp_path: Path, damage: str) -> None:
    s = localstore.TaskStore(str(tmp_path / "env"))
    s.reset([(stateenc.pack(i), b"x" * 100) for i in range(2000)], {"a": 1}, ("inc", 3))
    s.env.close()
    path = str(tmp_path / "env" / "data.mdb")
    size = os.path.getsize(path)
    if damage == "truncate":
        os.truncate(path, size - 4096)
    elif damage == "garbage":
        Path(path).write_bytes(os.urandom(size))
    else:
        with open(path, "r+b") as f:
            f.write(b"\xff" * 64)  # the first meta page's header
    again = localstore.TaskStore(str(tmp_path / "env"))
    assert again.discarded
    assert again.version is None and again.count() == 0
    again.env.close()
