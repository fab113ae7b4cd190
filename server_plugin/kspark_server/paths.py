"""One form for the file paths that the client and the server compare.

A rescaled app's new query checkpoint must not read again the files that an earlier
generation consumed. The client reads their names from the file sources' logs
(:mod:`kspark.runtime.checkpoints`), and the compiler drops the rows whose
``_metadata.file_path`` is one of them. Both names are URIs that Hadoop writes
(``Path.toUri().toString()``, URL-encoded), but local files appear as ``file:/x``,
``file:///x`` or ``/x``, so both sides go through :func:`normalize_path` (the client) or
its Spark SQL image :func:`normalized_path_column` (the rows), which agree on every URI
Hadoop writes.

The form: a local path (no scheme, or ``file:``) becomes an absolute path with no scheme;
any other scheme (``hdfs``, ``viewfs``, ``s3a``, ``gs``, ``abfss``, ``wasbs``, ``oss``,
...) keeps its scheme and authority. Percent-escapes are kept as they are, because both
sides hold the URL-encoded form.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["LOCAL_PREFIX", "normalize_path", "normalized_path_column"]

#: What a local file's URI starts with, as a Java (and Python) regular expression:
#: ``file:`` and the slashes after it, which become one ``/``.
LOCAL_PREFIX = "^file:/+"

_SLASHES = re.compile("/{2,}")


def _clean(path: str) -> str:
    """``path`` with runs of ``/`` made one and no trailing ``/`` (Hadoop's ``Path`` rules)."""
    path = _SLASHES.sub("/", path)
    return path.rstrip("/") or "/"


def normalize_path(path: str) -> str:
    """A file's URI or path in the one form that kspark compares.

    Parameters
    ----------
    path
        A local path (``/x``), a ``file:`` URI in any of its forms, or a URI of any other
        Hadoop file system (``scheme://authority/path``).

    Returns
    -------
    str
        A local file as an absolute path with no scheme; any other URI as
        ``scheme://authority/path`` with the scheme in lower case. Runs of ``/`` in the
        path become one and a trailing ``/`` goes, as Hadoop's ``Path`` does.

    Examples
    --------
    >>> normalize_path("file:///data/in/a.json")
    '/data/in/a.json'
    >>> normalize_path("file:/data/in/a.json") == normalize_path("/data/in/a.json")
    True
    >>> normalize_path("wasbs://c@acct.blob.core.windows.net/in/a.json")
    'wasbs://c@acct.blob.core.windows.net/in/a.json'
    >>> normalize_path("S3A://bucket/in/")
    's3a://bucket/in'
    """
    parts = urlsplit(path)
    # a one-letter "scheme" is a Windows drive (C:/x), which Hadoop writes as file:/C:/x
    scheme = parts.scheme if len(parts.scheme) > 1 else ""
    if scheme in ("", "file"):
        rest = path[len(scheme) + 1 :] if scheme else path
        # file://x/y is file:/x/y to Spark's own comparison (LOCAL_PREFIX): Hadoop writes
        # no authority for local files, so there is no host to keep
        return "/" + _clean(rest).lstrip("/")
    tail = _clean(parts.path) if parts.path else "/"
    query = f"?{parts.query}" if parts.query else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{scheme}://{parts.netloc}{tail}{query}{fragment}"


def normalized_path_column(path: Column) -> Column:
    """:func:`normalize_path` as a Spark expression, for ``_metadata.file_path``.

    Hadoop writes a file's URI with a lower-case scheme, single slashes and no trailing
    slash, so on those URIs :func:`normalize_path` only turns a ``file:`` prefix into
    ``/``. Doing that in SQL keeps the comparison in the JVM rather than in a Python UDF
    that every input row would go through.
    """
    from pyspark.sql import functions as F

    return F.regexp_replace(path, LOCAL_PREFIX, "/")
