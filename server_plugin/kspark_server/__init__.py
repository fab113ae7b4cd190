"""kspark's server side: operators that run inside Spark's Python workers.

This package never imports ``kspark``. It reads only the versioned operator specs that
``kspark``'s compiler builds (see :mod:`kspark_server.spec`), and it is shipped to servers
that lack it by pickling it by value.
"""

from __future__ import annotations

from kspark_server.spec import SPEC_VERSION, SpecError, check_spec

__all__ = ["SPEC_VERSION", "SpecError", "check_spec"]
