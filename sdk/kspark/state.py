"""State stores for the Processor API: ``Stores`` makes them, ``StreamsBuilder.add_state_store``
adds them, ``KStream.process(supplier, *store_names)`` connects them; the store interfaces
a processor gets from ``context.get_state_store(name)``. See docs/processor-api.md.

Examples
--------
>>> from kspark.state import Stores
>>> Stores.persistent_key_value_store("counts").name
'counts'
"""

from __future__ import annotations

from kspark.dsl.stores import (
    KeyValueBytesStoreSupplier,
    StoreBuilder,
    Stores,
    VersionedBytesStoreSupplier,
    WindowBytesStoreSupplier,
)
from kspark_server.papi import (
    KeyValueIterator,
    KeyValueStore,
    StateStoreError,
    VersionedKeyValueStore,
    VersionedRecord,
    WindowStore,
    WindowStoreIterator,
)

__all__ = [
    "KeyValueBytesStoreSupplier",
    "KeyValueIterator",
    "KeyValueStore",
    "StateStoreError",
    "StoreBuilder",
    "Stores",
    "VersionedBytesStoreSupplier",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "WindowBytesStoreSupplier",
    "WindowStore",
    "WindowStoreIterator",
]
