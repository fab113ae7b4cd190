"""Small reference models that the property tests compare kspark's operators with."""

from __future__ import annotations

from kspark_server.versioned import Version


class VersionedReference:
    """A versioned store (KIP-889) by brute force: every accepted put, kept forever."""

    def __init__(self, retention: int) -> None:
        self.retention = retention
        self.time: int | None = None
        self.puts: list[tuple[str, int, int, str | None]] = []  # key, ts, arrival, value

    def put(self, key: str, value: str | None, ts: int) -> bool:
        self.time = ts if self.time is None else max(self.time, ts)
        if ts < self.time - self.retention:
            return False
        self.puts.append((key, ts, len(self.puts), value))
        return True

    def get(self, key: str, as_of: int | None) -> Version | None:
        mine = sorted((ts, n, v) for k, ts, n, v in self.puts if k == key)
        if not mine:
            return None
        by_ts: dict[int, str | None] = {}
        for ts, _, v in mine:  # a later put at the same timestamp replaces the earlier
            by_ts[ts] = v
        tss = sorted(by_ts)
        if as_of is not None:
            assert self.time is not None
            if as_of < self.time - self.retention:
                return None
            older = [t for t in tss if t <= as_of]
            if not older:
                return None
            t = older[-1]
        else:
            t = tss[-1]
        if by_ts[t] is None:
            return None
        later = [x for x in tss if x > t]
        return Version(by_ts[t], t, later[0] if later else None)
