"""The stateful operators' durable files, driven without Spark.

A dedup task runs through :class:`~kspark_server.operators.grouped.GroupedOperator` with a
stand-in for Spark's group state, against a reference model of deduplication: over random
micro-batch splits, executors whose local store is new or behind (cache misses), failed
attempts whose files stay behind and repeated batches, it gives the model's output and
state. Files of old versions go once no committed version names them.
"""

from __future__ import annotations

import copy
import itertools
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.taskharness import Out, Rec, close_local_stores, frame

from kspark_server import envelope as env
from kspark_server import placement, stateenc, taskfiles, taskstate, transport
from kspark_server.operators.grouped import GroupedOperator, frame_table, output_struct
from kspark_server.spec import DedupSpec, KeyValue, Packed, PrimSpec, StateOptions

STR = PrimSpec(spark="string")


def spec(interval: int, check_log: bool = True, key: str = "string") -> DedupSpec:
    """A dedup by key of ``key`` keys (a Spark type: ``string`` or ``binary``)."""
    return DedupSpec(
        processor="DEDUP",
        store="seen",
        mode="by_key",
        interval_ms=interval,
        id_selector=None,
        input=KeyValue(key=PrimSpec(spark=key), value=STR),
        output_schema=env.envelope_json(key, "string"),
        packed=Packed(),
        state=StateOptions(check_log=check_log),
    )


def declared(key: str = "string") -> Any:
    """The Spark schema the operator's frames declare, for ``key`` keys."""
    return output_struct(transport.operator_schema(env.envelope_json(key, "string"), False))


DECLARED = declared()


class GroupState:
    """Spark's ``GroupState`` of the task: a value that commits when the batch does."""

    def __init__(self, value: Any = None) -> None:
        self.value = value

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> Any:
        return self.value

    def update(self, value: Any) -> None:
        self.value = tuple(value)


class Grouped:
    """One dedup task: the group state, its files
    under ``root``, and the executor's local store under ``tmp``."""

    def __init__(self, interval: int, tmp: Path, mp: pytest.MonkeyPatch) -> None:
        self.fn = GroupedOperator(spec(interval), "", "", str(tmp / "chk"))
        self.tmp, self.mp = tmp, mp
        self.state = GroupState()
        self.executors = itertools.count()
        self.new_executor()

    def new_executor(self) -> None:
        """An executor with an empty local store (a new worker, a restart)."""
        close_local_stores()
        self.mp.setenv("KSPARK_LOCAL_STATE_DIR", str(self.tmp / f"g-{next(self.executors)}"))

    def attempt(self, batch: list[tuple[int, Rec]], commit: bool = True) -> list[Out]:
        """The batch's output; its group state is committed only with ``commit`` (an
        attempt that fails after its operator ran leaves the last committed one)."""
        state = GroupState(self.state.value)
        table = pa_table(batch)
        rows: list[dict[str, Any]] = []
        for f in self.fn((placement.task_keys(1)[0],), iter([table]), state):
            out = frame_table([f], DECLARED)
            rows.extend(r for r in out.to_pylist() if not r["ks_side"])
        if commit:
            self.state = state
        rows.sort(key=lambda r: (r["ks_seq"], r["ks_sub"]))
        return [(r["key"], r["value"], int(r["timestamp"])) for r in rows]

    def files(self) -> taskfiles.TaskFiles:
        return taskfiles.TaskFiles(str(self.tmp / "chk"), "seen", 0, self.state.value)

    def task_state(self) -> Any:
        f = self.files()
        log = [t[0] for t in f.log.get()]
        return taskstate.materialize("dedup", False, list(f.chunks()), log)


def pa_table(batch: list[tuple[int, Rec]]) -> Any:
    import pyarrow as pa

    f = frame(batch).drop(columns=["ks_tvalue", "ks_jside"])
    return pa.Table.from_pandas(f, preserve_index=False)


class DedupModel:
    """Deduplication by key as Kafka Streams defines it, one record at a time: a record is
    dropped when its key was forwarded within ``interval`` of it and that entry has not
    expired (older than stream time minus ``interval``); the entries left after a batch
    are the unexpired ones."""

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.seen: dict[str, int] = {}
        self.stream_time: int | None = None

    def run(self, batch: list[tuple[int, Rec]]) -> list[Out]:
        out: list[Out] = []
        for _, (_, key, value, ts) in sorted(batch, key=lambda r: r[0]):
            self.stream_time = ts if self.stream_time is None else max(self.stream_time, ts)
            low = self.stream_time - self.interval
            if key is not None:
                prev = self.seen.get(key)
                if prev is not None and prev >= low and abs(prev - ts) <= self.interval:
                    continue
                if ts >= low:
                    self.seen[key] = ts
            out.append((key, value, ts))
        if self.stream_time is not None:
            low = self.stream_time - self.interval
            self.seen = {k: t for k, t in self.seen.items() if t >= low}
        return out


records = st.lists(
    st.tuples(st.sampled_from([f"k{i}" for i in range(12)]) | st.none(), st.integers(0, 40)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@example(  # a large base and small changes: the changes are logged, misses replay them
    data=[(f"k{i}", i) for i in range(12)] + [(f"k{i % 3}", 12 + i) for i in range(18)],
    interval=40,
    cuts=[12, 16, 20, 24, 27],
    events=["", "", "miss", "fail", "fail-miss", "", "miss"],
)
@given(
    data=records,
    interval=st.integers(0, 40),
    cuts=st.lists(st.integers(1, 39), max_size=6, unique=True),
    events=st.lists(st.sampled_from(["", "miss", "fail", "fail-miss"]), min_size=7, max_size=7),
)
def test_splits_misses_and_failed_attempts_match_the_model(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[tuple[str | None, int]],
    interval: int,
    cuts: list[int],
    events: list[str],
) -> None:
    tmp = tmp_path_factory.mktemp("grouped")
    recs = [(i, (0, k, f"e{i}", ts)) for i, (k, ts) in enumerate(data)]
    bounds = [0, *sorted(c for c in cuts if c < len(recs)), len(recs)]
    batches = [recs[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    with pytest.MonkeyPatch.context() as mp:
        model = DedupModel(interval)
        grouped = Grouped(interval, tmp, mp)
        try:
            for batch, event in zip(batches, events, strict=False):
                want = model.run(batch)
                if "fail" in event:
                    # the attempt writes its files and fails before the batch commits
                    grouped.attempt(batch, commit=False)
                if "miss" in event:
                    grouped.new_executor()
                assert grouped.attempt(batch) == want
                got = grouped.task_state()
                assert (got["seen"], got["stream_time"]) == (model.seen, model.stream_time)
        finally:
            close_local_stores()


def test_a_repeated_batch_never_touches_the_committed_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task killed between writing its change file and the batch's commit, then the
    batch again (on the same executor, whose local store is ahead, and on a new one):
    the committed files stay byte for byte, and the state is a clean run's."""
    b1 = [(0, (0, "a", "x", 1)), (1, (0, "b", "y", 2))]
    b2 = [(2, (0, "a", "z", 3)), (3, (0, "c", "w", 4))]
    b3 = [(4, (0, "c", "v", 20)), (5, (0, "d", "u", 21))]
    clean = Grouped(5, tmp_path / "clean", monkeypatch)
    want = [clean.attempt(b) for b in (b1, b2, b3)]
    clean_state = clean.task_state()
    close_local_stores()

    g = Grouped(5, tmp_path / "faulty", monkeypatch)
    assert g.attempt(b1) == want[0]
    folder = g.files().folder
    committed = {n: Path(folder, n).read_bytes() for n in os.listdir(folder)}
    before = copy.deepcopy(g.state.value)
    assert g.attempt(b2, commit=False) == want[1]  # killed before the commit
    assert g.state.value == before
    assert g.attempt(b2, commit=False) == want[1]  # and again, the local store ahead
    g.new_executor()
    assert g.attempt(b2) == want[1]  # the repeat that commits, on a new executor
    assert {n: Path(folder, n).read_bytes() for n in committed} == committed
    assert g.attempt(b3) == want[2]
    assert g.task_state() == clean_state
    close_local_stores()


def test_files_no_committed_version_names_are_collected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small state writes a new base every batch; the next batch deletes the files of
    batches up to the committed version that it does not name (the base it replaced, a
    failed attempt's change)."""
    g = Grouped(100, tmp_path, monkeypatch)
    names: list[set[str]] = []
    for i in range(5):
        batch = [(2 * i, (0, f"k{i}", "v", i)), (2 * i + 1, (0, "k0", "v", i))]
        if i == 2:
            g.attempt(batch, commit=False)  # a failed attempt's files
        g.attempt(batch)
        names.append(g.files()._named)
    files = set(os.listdir(g.files().folder))
    assert files == names[-1] | names[-2]
    close_local_stores()


def test_a_batch_committed_twice_keeps_the_files_of_both_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's state store keeps the first commit of a batch it ran twice (a server killed
    after a task committed but before the micro-batch did): the run that repeated the
    batch goes on with its own version, and a restart loads the first one. So the next
    batch of the repeating run collects neither version's files, and the first version
    still reads as a clean run's state after it."""
    b1 = [(0, (0, "a", "x", 1)), (1, (0, "b", "y", 2))]
    b2 = [(2, (0, "c", "z", 3)), (3, (0, "d", "w", 4))]
    b3 = [(4, (0, "e", "v", 20)), (5, (0, "a", "u", 21))]
    clean = Grouped(100, tmp_path / "clean", monkeypatch)
    want = [clean.attempt(b) for b in (b1, b2, b3)]
    clean_state = clean.task_state()
    close_local_stores()

    g = Grouped(100, tmp_path / "twice", monkeypatch)  # small: a new base every batch
    g.attempt(b1)
    before = g.state.value
    g.attempt(b2)
    first = g.state.value  # killed after this commit, before the micro-batch's
    g.state = GroupState(before)
    g.new_executor()
    assert g.attempt(b2) == want[1]  # the repeat, in the next run
    assert g.state.value != first
    g.attempt(b3)  # the next batch, killed before its micro-batch commits
    g.state = GroupState(first)  # the restart loads the batch's first commit
    g.new_executor()
    assert g.attempt(b3) == want[2]
    assert g.task_state() == clean_state
    close_local_stores()


def test_a_local_store_of_the_losing_attempt_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two attempts of one batch commit different states (a processor that depends on the
    wall clock, say) on two executors, and the first commit is the one Spark keeps. The
    executor that ran the other attempt holds a local store at the same version number:
    it is rebuilt from the committed files, never used as the committed state."""
    b1 = [(0, (0, "a", "x", 1))]
    first_b2 = [(1, (0, "c", "z", 3))]
    other_b2 = [(1, (0, "d", "z", 3))]
    b3 = [(2, (0, "c", "v", 20)), (3, (0, "d", "u", 21))]
    g = Grouped(100, tmp_path, monkeypatch)
    g.attempt(b1)
    before = g.state.value
    g.attempt(first_b2)  # executor 0; the commit Spark keeps
    first = g.state.value
    g.state = GroupState(before)
    g.new_executor()
    g.attempt(other_b2)  # executor 1, the same version number with another state
    g.state = GroupState(first)  # the restart loads the first commit, on executor 1
    assert g.attempt(b3) == [("d", "u", 21)]  # "c" was seen; "d" was not
    close_local_stores()


def test_a_batch_lists_its_task_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that collects the files its base replaced and checks whether its executor's
    local store holds a losing attempt's state asks both of one listing of the task's
    folder: listing a folder of many files on a network filesystem is slow."""
    g = Grouped(100, tmp_path, monkeypatch)  # small: a new base every batch
    g.attempt([(0, (0, "a", "x", 1))])
    g.attempt([(1, (0, "b", "y", 2))])
    folder, replaced = g.files().folder, g.files().named()
    listed: list[str] = []
    real = os.listdir

    def counting(path: Any = ".") -> list[str]:
        listed.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", counting)
    assert g.attempt([(2, (0, "c", "z", 3)), (3, (0, "a", "w", 4))]) == [("c", "z", 3)]
    assert listed.count(folder) == 1
    # it collected the base its last batch replaced, and kept the one that replaced it
    assert set(real(folder)) == replaced | g.files().named()
    assert len(set(real(folder))) == 2
    close_local_stores()


def test_a_missing_file_is_named_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = Grouped(100, tmp_path, monkeypatch)
    g.attempt([(0, (0, "a", "v", 1))])
    folder = g.files().folder
    for n in os.listdir(folder):
        os.remove(os.path.join(folder, n))
    g.new_executor()
    with pytest.raises(stateenc.StateFormatError, match="missing from the checkpoint"):
        g.attempt([(1, (0, "a", "v", 2))])
    close_local_stores()


def test_the_runner_reads_pandas_frames_in_the_input_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark hands the function pandas frames; they are read back in the input's schema."""
    import json

    fields = json.loads(env.envelope_json("string", "string"))["fields"] + [
        {"name": "ks_hash", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "ks_task", "type": "integer", "nullable": True, "metadata": {}},
    ]
    schema = json.dumps({"type": "struct", "fields": fields})
    monkeypatch.setenv("KSPARK_LOCAL_STATE_DIR", str(tmp_path / "local"))
    fn = GroupedOperator(spec(5), "", schema, str(tmp_path / "chk"))
    f: pd.DataFrame = pa_table([(0, (0, "a", "x", 1)), (1, (0, "a", "y", 2))]).to_pandas()
    state = GroupState()
    (out,) = list(fn((placement.task_keys(1)[0],), iter([f]), state))
    table = frame_table([out], DECLARED)
    assert [r["value"] for r in table.to_pylist() if not r["ks_side"]] == ["x"]
    assert state.exists
    close_local_stores()
