"""The executor-local store with keys of any length: keys past LMDB's 511 bytes keep their
identity (the full key decides, also when digests collide), the time index takes them,
a rebuild restores them, and LMDB's other limits (values, the map size) behave as the
module says. A property test checks the store against a dict over random operations with
a one-byte digest, so that long keys collide all the time."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kspark_server import localstore, stateenc, taskstate
from kspark_server.localstore import SHORT_KEY, TaskStore, time_key

MIB = 1 << 20
#: keys at and around every boundary: LMDB's limit, the time index's, and far past them
LENGTHS = [1, 2, SHORT_KEY - 1, SHORT_KEY, SHORT_KEY + 1, 511, 512, 4096, MIB]
_paths = itertools.count()


@pytest.fixture
def store(tmp_path: Any) -> Iterator[TaskStore]:
    s = TaskStore(str(tmp_path / f"env-{next(_paths)}"))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def tiny_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every long key gets one of two digests: collisions everywhere."""
    monkeypatch.setattr(TaskStore, "digest", staticmethod(lambda k: bytes([k[-1] & 1])))


def keys_of(lengths: list[int]) -> list[bytes]:
    """Distinct keys of the given lengths, plus pairs that differ in their last byte."""
    out = [b"k" * n for n in lengths]
    out += [b"k" * (n - 1) + b"x" for n in lengths if n > 1]
    return out


def test_keys_of_every_length_keep_their_identity(store: TaskStore) -> None:
    keys = keys_of(LENGTHS)
    pairs = [(k, b"entry-%d" % i) for i, k in enumerate(keys)]
    store.apply(pairs, {"stream_time": 1}, ("inc", 1))
    assert store.get_many(keys) == [e for _, e in pairs]
    assert store.get_many([b"k" * 600, b"k" * (MIB + 1)]) == [None, None]
    assert sorted(store.pairs()) == sorted(pairs)
    assert store.count() == len(keys)
    # a new entry replaces the old one, under the same key
    store.apply([(keys[-1], b"new")], {}, ("inc", 2))
    assert store.get_many([keys[-1]]) == [b"new"] and store.count() == len(keys)
    gone = set(keys[::2])
    store.apply([(k, None) for k in gone], {}, ("inc", 3))
    want = {k: None if k in gone else e for k, e in [*pairs[:-1], (keys[-1], b"new")]}
    assert store.get_many(keys) == [want[k] for k in keys]
    assert store.count() == len(keys) - len(gone)


@pytest.mark.usefixtures("tiny_digest")
def test_colliding_digests_never_mix_keys(store: TaskStore) -> None:
    keys = [b"k" * 600, b"k" * 599 + b"x", b"k" * 4096, b"k" * MIB]
    store.apply([(k, k[-8:] + b"!") for k in keys], {}, ("inc", 1))
    assert store.get_many(keys) == [k[-8:] + b"!" for k in keys]
    # remove one in the middle of a run of colliding slots, then add another
    store.apply([(keys[1], None), (b"z" * 900, b"z")], {}, ("inc", 2))
    assert store.get_many([*keys, b"z" * 900]) == [
        keys[0][-8:] + b"!",
        None,
        keys[2][-8:] + b"!",
        keys[3][-8:] + b"!",
        b"z",
    ]
    assert sorted(k for k, _ in store.pairs()) == sorted([keys[0], keys[2], keys[3], b"z" * 900])


@pytest.mark.usefixtures("tiny_digest")
def test_the_time_index_takes_long_keys(store: TaskStore) -> None:
    keys = keys_of([1, SHORT_KEY + 1, 4096, MIB])
    times = {k: 10 * (i + 1) for i, k in enumerate(keys)}
    store.apply(
        [(k, b"e") for k in keys],
        {},
        ("inc", 1),
        index=[(None, time_key(times[k], k)) for k in keys],
    )
    assert store.due(10**6) == sorted(keys, key=times.__getitem__)  # oldest first
    assert store.due(times[keys[2]]) == sorted(
        [k for k in keys if times[k] < times[keys[2]]], key=times.__getitem__
    )
    # move one key's time: the old index key goes, the new one comes
    k = keys[-1]
    store.apply([(k, b"f")], {}, ("inc", 2), index=[(time_key(times[k], k), time_key(5, k))])
    assert store.due(6) == [k]
    # expire: both the entries and their index keys go, the expired keys come back
    expired = store.apply([], {}, ("inc", 3), expire_before=times[keys[1]] + 1)
    assert sorted(expired) == sorted([k, keys[0], keys[1]])
    assert store.due(10**6) == [
        keys[2],
        *(x for x in keys if x not in (k, keys[0], keys[1], keys[2])),
    ]
    assert store.get_many(keys) == [None if x in expired else b"e" for x in keys]


def test_expiring_every_entry_leaves_an_empty_store(store: TaskStore) -> None:
    """The last index entry expired by a batch that touches no key (a batch of null keys,
    in deduplication) used to fail the batch with MDB_BAD_VALSIZE."""
    keys = [b"a", b"b" * 600]
    store.apply(
        [(k, b"e") for k in keys], {}, ("inc", 1), index=[(None, time_key(1, k)) for k in keys]
    )
    assert sorted(store.apply([], {}, ("inc", 2), expire_before=100)) == sorted(keys)
    assert store.count() == 0 and store.due(10**6) == []
    assert store.apply([], {}, ("inc", 3), expire_before=200) == []


@pytest.mark.usefixtures("tiny_digest")
def test_a_rebuild_restores_long_keys_and_their_index(store: TaskStore) -> None:
    keys = [stateenc.pack("k" * n) for n in (1, 600, 4096, MIB)]

    def entry(ts: int) -> bytes:
        return stateenc.pack([ts, 0])

    def index_of(k: bytes, e: bytes) -> bytes:
        return time_key(int(stateenc.unpack(e)[0]), k)

    base = taskstate.encode_chunks(
        {"stream_time": 9}, [(k, entry(i)) for i, k in enumerate(keys)], 64
    )
    log = [stateenc.encode_frame({"stream_time": 10}, [(keys[1], None), (keys[2], entry(50))])]
    store.rebuild(base, log, ("inc", 4), index_of)
    want = {keys[0]: entry(0), keys[2]: entry(50), keys[3]: entry(3)}
    assert dict(store.pairs()) == want
    assert store.due(10**6) == [keys[0], keys[3], keys[2]]
    assert store.version == ("inc", 4) and store.scalars() == {"stream_time": 10}
    store.reset(list(want.items()), {}, ("inc", 5), index=[index_of(k, e) for k, e in want.items()])
    assert dict(store.pairs()) == want and store.due(10**6) == [keys[0], keys[3], keys[2]]


# -- LMDB's other limits, as they are -----------------------------------------------------


def test_values_of_many_mebibytes_are_kept(store: TaskStore) -> None:
    big = b"v" * (64 * MIB)
    store.apply([(b"k", big), (b"l" * MIB, big)], {"buffer": ["x" * MIB]}, ("inc", 1))
    assert store.get_many([b"k", b"l" * MIB]) == [big, big]
    assert store.scalars() == {"buffer": ["x" * MIB]}


def test_lmdb_refuses_empty_keys_which_the_store_never_writes(tmp_path: Any) -> None:
    """Every key the operators write is MessagePack, at least one byte: LMDB refuses an
    empty one (the empty string and empty bytes are keys of one and two bytes)."""
    assert [len(stateenc.pack(k)) for k in ("", b"", None)] == [1, 2, 1]
    env = lmdb.open(str(tmp_path / "raw"))
    try:
        with pytest.raises(lmdb.BadValsizeError), env.begin(write=True) as txn:
            txn.put(b"", b"x")
    finally:
        env.close()


def test_a_full_map_grows(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment starts small and doubles its map when a write fills it, so that a
    worker process can keep many environments open, and state can outgrow the start."""
    monkeypatch.setattr(localstore, "MAP_SIZE", 4 * MIB)
    store = TaskStore(str(tmp_path / "grows"))
    try:
        pairs = [(b"k%d" % i + b"k" * (i % 2) * 600, b"v" * MIB) for i in range(40)]
        for i in range(0, 40, 8):
            store.apply(pairs[i : i + 8], {}, ("inc", i))
        assert store.count() == 40
        assert store.get_many([k for k, _ in pairs]) == [v for _, v in pairs]
        assert store.env.info()["map_size"] >= 40 * MIB
    finally:
        store.close()


def test_a_map_grown_by_another_process_is_adopted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Python worker of an executor opens the same environment: after one grew the
    map, the others adopt its size (LMDB answers their next transaction MAP_RESIZED)."""
    monkeypatch.setattr(localstore, "MAP_SIZE", 4 * MIB)
    path = str(tmp_path / "shared")
    store = TaskStore(path)
    try:
        store.apply([(b"mine", b"1")], {}, ("inc", 1))
        child = (
            "import sys; from kspark_server import localstore as ls; ls.MAP_SIZE = 4 << 20; "
            "s = ls.TaskStore(sys.argv[1]); "
            "s.apply([(b'k%d' % i, b'v' * (1 << 20)) for i in range(20)], {}, ('inc', 2))"
        )
        subprocess.run([sys.executable, "-c", child, path], check=True, timeout=60)
        assert store.version == ("inc", 2)
        assert store.get_many([b"mine", b"k19"]) == [b"1", b"v" * MIB]
        store.apply([(b"mine", b"2")], {}, ("inc", 3))
        assert store.get_many([b"mine"]) == [b"2"]
    finally:
        store.close()


# -- the store against a dict -------------------------------------------------------------

KEY = st.sampled_from(keys_of([1, SHORT_KEY, SHORT_KEY + 1, 512, 3000]))
OP = st.tuples(KEY, st.none() | st.integers(0, 50))


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(st.lists(OP, max_size=8), max_size=6), expire=st.lists(st.integers(0, 60)))
def test_matches_a_dict(
    batches: list[list[tuple[bytes, int | None]]],
    expire: list[int],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    mp = pytest.MonkeyPatch()
    mp.setattr(TaskStore, "digest", staticmethod(lambda k: bytes([k[-1] & 1])))
    store = TaskStore(str(tmp_path_factory.mktemp("model")))
    model: dict[bytes, int] = {}
    try:
        for n, batch in enumerate(batches):
            changes = dict(batch)
            index = [
                (
                    None if k not in model else time_key(model[k], k),
                    None if t is None else time_key(t, k),
                )
                for k, t in changes.items()
            ]
            pairs = [(k, None if t is None else stateenc.pack(t)) for k, t in changes.items()]
            bound = expire[n] if n < len(expire) else None
            got = store.apply(pairs, {}, ("inc", n), index=index, expire_before=bound)
            for k, t in changes.items():
                if t is None:
                    model.pop(k, None)
                else:
                    model[k] = t
            gone = [] if bound is None else [k for k, t in model.items() if t < bound]
            for k in gone:
                del model[k]
            assert sorted(got) == sorted(gone)
            assert {k: stateenc.unpack(e) for k, e in store.pairs()} == model
            assert store.count() == len(model)
            assert [t for t in (model.get(k) for k in store.due(10**6))] == sorted(model.values())
    finally:
        store.close()
        mp.undo()
