"""A versioned key-value store (KIP-889), on plain Python state.

Each key holds its versions as two sorted lists: the timestamps (``validFrom``) and the
values (None for a tombstone). A version is valid until the next version's timestamp.
The store keeps its own *observed stream time*, the largest timestamp put so far:

- a put older than ``observed - history_retention`` is dropped (the caller counts it);
- a read as of a time older than ``observed - history_retention`` answers None;
- :meth:`expire` drops versions that no read within the retention can still see.

The state is a plain dict (``{"time": int | None, "data": {key: ([ts...], [value...])}}``)
so that the join operator can encode it into its state files, and a client reading the
checkpoint can wrap the same dict and answer the same queries (``app.store(name)``).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from typing import Any, NamedTuple


class Version(NamedTuple):
    """One version of a key: its value (None for a tombstone) and validity interval.

    ``valid_to`` is exclusive; None means the version is still current.
    """

    value: Any
    valid_from: int
    valid_to: int | None


class VersionedStore:
    """Versions per key with history retention, over a plain state dict.

    Examples
    --------
    >>> s = VersionedStore.new(history_retention_ms=100)
    >>> s.put("EUR", 1.10, 10)
    True
    >>> s.put("EUR", 1.20, 50)
    True
    >>> s.get("EUR", as_of=30)
    Version(value=1.1, valid_from=10, valid_to=50)
    >>> s.get("EUR")
    Version(value=1.2, valid_from=50, valid_to=None)
    >>> s.delete("EUR", 60)
    True
    >>> s.get("EUR") is None
    True
    """

    __slots__ = ("retention", "state")

    def __init__(self, state: dict[str, Any], history_retention_ms: int) -> None:
        if history_retention_ms < 0:
            raise ValueError("history retention must not be negative")
        self.state = state
        self.retention = int(history_retention_ms)

    @classmethod
    def new(cls, history_retention_ms: int) -> VersionedStore:
        return cls(cls.empty_state(), history_retention_ms)

    @staticmethod
    def empty_state() -> dict[str, Any]:
        return {"time": None, "data": {}}

    def _too_old(self, ts: int) -> bool:
        t = self.state["time"]
        return t is not None and ts < t - self.retention

    def put(self, key: Hashable, value: Any, timestamp: int) -> bool:
        """Add a version (value None: a tombstone). A second put at the same timestamp
        replaces the first. Returns False, storing nothing, for a put older than the
        history retention."""
        ts = int(timestamp)
        if self.state["time"] is None or ts > self.state["time"]:
            self.state["time"] = ts
        if self._too_old(ts):
            return False
        tss, vals = self.state["data"].setdefault(key, ([], []))
        i = bisect.bisect_left(tss, ts)
        if i < len(tss) and tss[i] == ts:
            vals[i] = value
        else:
            tss.insert(i, ts)
            vals.insert(i, value)
        return True

    def delete(self, key: Hashable, timestamp: int) -> bool:
        """Delete ``key`` as of ``timestamp`` (a tombstone version)."""
        return self.put(key, None, timestamp)

    def get(self, key: Hashable, as_of: int | None = None) -> Version | None:
        """The version valid at ``as_of`` (default: the latest), or None when the key had
        no value then, was deleted, or ``as_of`` is older than the history retention."""
        versions = self.state["data"].get(key)
        if not versions:
            return None
        tss, vals = versions
        if as_of is None:
            i = len(tss) - 1
        else:
            if self._too_old(int(as_of)):
                return None
            i = bisect.bisect_right(tss, int(as_of)) - 1
        if i < 0 or vals[i] is None:
            return None
        return Version(vals[i], tss[i], tss[i + 1] if i + 1 < len(tss) else None)

    def value_at(self, key: Hashable, ts: int) -> Any:
        """The value valid at ``ts``, or None (no version then, a tombstone, or ``ts``
        older than the history retention): :meth:`get` without building a
        :class:`Version`, for the join's per-record lookup."""
        versions = self.state["data"].get(key)
        if not versions:
            return None
        t = self.state["time"]
        if t is not None and ts < t - self.retention:
            return None
        tss, vals = versions
        i = bisect.bisect_right(tss, ts) - 1
        return vals[i] if i >= 0 else None

    def in_retention(self, ts: int) -> bool:
        """Whether a record at ``ts`` is within the history retention (a lookup can answer)."""
        return not self._too_old(int(ts))

    def versions(
        self, key: Hashable, from_ts: int | None = None, to_ts: int | None = None
    ) -> list[Version]:
        """The versions of ``key`` valid at some time in ``[from_ts, to_ts]``, oldest first,
        tombstones left out (KIP-968's ``VersionedKeyQuery``)."""
        versions = self.state["data"].get(key)
        if not versions:
            return []
        tss, vals = versions
        low = self.state["time"] - self.retention if self.state["time"] is not None else None
        out = []
        for i, (ts, v) in enumerate(zip(tss, vals, strict=True)):
            valid_to = tss[i + 1] if i + 1 < len(tss) else None
            if v is None:
                continue
            if to_ts is not None and ts > to_ts:
                break
            if from_ts is not None and valid_to is not None and valid_to <= from_ts:
                continue
            if low is not None and valid_to is not None and valid_to <= low:
                continue  # no in-retention read can see it
            out.append(Version(v, ts, valid_to))
        return out

    def keys(self) -> list[Hashable]:
        return list(self.state["data"])

    def expire(self, changed: set[Hashable] | None = None) -> None:
        """Drop versions no read within the retention can see. The newest version older
        than the bound stays: it is still the value as of in-retention times before the
        next version. Keys whose versions changed are added to ``changed``."""
        if self.state["time"] is None:
            return
        low = self.state["time"] - self.retention
        data = self.state["data"]
        for key in list(data):
            tss, vals = data[key]
            i = bisect.bisect_right(tss, low) - 1
            if i > 0:
                del tss[:i]
                del vals[:i]
                if changed is not None:
                    changed.add(key)
            if len(tss) == 1 and vals[0] is None and tss[0] <= low:
                del data[key]
                if changed is not None:
                    changed.add(key)

    def __len__(self) -> int:
        return len(self.state["data"])
