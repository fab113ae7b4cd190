"""The error condition of a failure that Spark reports (``[PATH_NOT_FOUND]``, ...).

Spark names most of its errors with a stable condition; kspark decides on the condition
where there is one, and reads an error's message only where Spark gives none.
"""

from __future__ import annotations

__all__ = ["condition"]


def condition(exc: BaseException) -> str | None:
    """``exc``'s Spark error condition, or None for an error without one.

    Examples
    --------
    >>> from pyspark.errors import AnalysisException
    >>> condition(AnalysisException(message="Failed to find the data source: kafka.",
    ...                             errorClass="DATA_SOURCE_NOT_FOUND", messageParameters={}))
    'DATA_SOURCE_NOT_FOUND'
    >>> condition(RuntimeError("Failed to find the data source: kafka")) is None
    True
    """
    get = getattr(exc, "getCondition", None)
    if not callable(get):
        return None
    try:
        value = get()
    except Exception:  # a half-built pyspark exception
        return None
    return str(value) if value else None
