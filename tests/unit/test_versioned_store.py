"""The versioned store (KIP-889) against a small reference model, with Hypothesis."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.models import VersionedReference as Reference

from kspark_server.versioned import Version, VersionedStore

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(["a", "b"]),
            st.sampled_from(["x", "y", "z", None]),
            st.integers(0, 60),
        ),
        st.tuples(st.just("expire"), st.just(""), st.just(None), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, 30))
def test_versioned_store_matches_the_reference(
    steps: list[tuple[str, str, str | None, int]], retention: int
) -> None:
    store = VersionedStore.new(retention)
    ref = Reference(retention)
    for op, key, value, ts in steps:
        if op == "put":
            assert store.put(key, value, ts) == ref.put(key, value, ts)
        else:
            store.expire()
        for k in ("a", "b"):
            for as_of in [None, *range(0, 62, 3)]:
                assert store.get(k, as_of) == ref.get(k, as_of), (k, as_of)


def test_versions_lists_the_versions_valid_in_a_range() -> None:
    s = VersionedStore.new(1000)
    for v, ts in [("v10", 10), ("v20", 20), (None, 30), ("v40", 40)]:
        s.put("k", v, ts)
    assert s.versions("k", 12, 45) == [
        Version("v10", 10, 20),
        Version("v20", 20, 30),
        Version("v40", 40, None),
    ]
    assert s.versions("k", 21, 35) == [Version("v20", 20, 30)]
    assert s.versions("k", 31, 39) == []
    assert s.versions("nope") == []


def test_negative_retention_is_rejected() -> None:
    import pytest

    with pytest.raises(ValueError, match="negative"):
        VersionedStore.new(-1)
