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

from kspark.dsl import stores as _stores
from kspark.dsl.stores import *  # noqa: F403  (the public face of kspark.dsl.stores)

__all__ = list(_stores.__all__)
