"""The one form of file paths that the client and the operators compare (no Spark)."""

from __future__ import annotations

import re

import pytest

from kspark_server.paths import LOCAL_PREFIX, normalize_path

#: (scheme, authority) of the file systems Hadoop ships or that clouds provide for it
REMOTE = [
    ("hdfs", "namenode:8020"),
    ("viewfs", "cluster"),
    ("webhdfs", "namenode:9870"),
    ("har", "hdfs-namenode:8020"),
    ("s3", "bucket"),
    ("s3a", "bucket"),
    ("s3n", "bucket"),
    ("gs", "bucket"),
    ("abfs", "container@account.dfs.core.windows.net"),
    ("abfss", "container@account.dfs.core.windows.net"),
    ("wasb", "container@account.blob.core.windows.net"),
    ("wasbs", "container@account.blob.core.windows.net"),
    ("adl", "account.azuredatalakestore.net"),
    ("oss", "bucket.oss-cn-hangzhou.aliyuncs.com"),
    ("cos", "bucket-1250000000"),
    ("cosn", "bucket-1250000000"),
    ("obs", "bucket"),
    ("ofs", "om-service/volume"),
    ("o3fs", "bucket.volume.om"),
    ("jfs", "volume"),
    ("alluxio", "master:19998"),
    ("dbfs", ""),
]


@pytest.mark.parametrize(("scheme", "authority"), REMOTE)
def test_a_remote_uri_keeps_its_scheme_and_authority(scheme: str, authority: str) -> None:
    uri = f"{scheme}://{authority}/in/part-0.json"
    assert normalize_path(uri) == uri
    # what the old normaliser got wrong: no leading "/" before the scheme
    assert not normalize_path(uri).startswith("/")


@pytest.mark.parametrize(("scheme", "authority"), REMOTE)
def test_remote_forms_of_one_file_are_equal(scheme: str, authority: str) -> None:
    canonical = f"{scheme}://{authority}/in/part-0.json"
    for form in (
        f"{scheme.upper()}://{authority}/in/part-0.json",
        f"{scheme}://{authority}//in///part-0.json",
        f"{scheme}://{authority}/in/part-0.json/",
    ):
        assert normalize_path(form) == canonical


@pytest.mark.parametrize("scheme", [s for s, _ in REMOTE])
def test_a_remote_root_without_a_path_is_its_root(scheme: str) -> None:
    assert normalize_path(f"{scheme}://bucket") == normalize_path(f"{scheme}://bucket/")
    assert normalize_path(f"{scheme}://bucket/") == f"{scheme}://bucket/"


def test_the_same_path_on_two_authorities_differs() -> None:
    assert normalize_path("s3a://one/x.json") != normalize_path("s3a://two/x.json")
    assert normalize_path("s3a://b/x.json") != normalize_path("gs://b/x.json")


@pytest.mark.parametrize(
    "form",
    [
        "/data/in/a.json",
        "//data/in/a.json",
        "/data//in/a.json",
        "/data/in/a.json/",
        "data/in/a.json",
        "file:/data/in/a.json",
        "file://data/in/a.json",
        "file:///data/in/a.json",
        "FILE:///data/in/a.json",
        "file:////data/in/a.json",
    ],
)
def test_local_forms_are_one_absolute_path(form: str) -> None:
    assert normalize_path(form) == "/data/in/a.json"


def test_local_paths_keep_their_escapes_and_odd_characters() -> None:
    # both sides hold Hadoop's URL-encoded form: escapes are compared, not decoded
    assert normalize_path("file:/data/a%20b.json") == "/data/a%20b.json"
    assert normalize_path("/data/a?b#c.json") == "/data/a?b#c.json"
    assert normalize_path("/") == normalize_path("file:///") == "/"


def test_a_windows_drive_is_a_local_path() -> None:
    assert normalize_path("C:/data/a.json") == normalize_path("file:/C:/data/a.json")


def test_normalizing_twice_changes_nothing() -> None:
    forms = [f"{s}://{a}//in/x.json/" for s, a in REMOTE] + ["file:///x//y/", "C:/x", "/"]
    for form in forms:
        once = normalize_path(form)
        assert normalize_path(once) == once


# The URIs Hadoop writes into the file sources' logs and into _metadata.file_path: the
# Spark expression (normalized_path_column, a regexp_replace with LOCAL_PREFIX) must give
# the same form as normalize_path on each of them. Java's and Python's regexes agree on
# LOCAL_PREFIX.
HADOOP_WRITTEN = [
    "file:/data/in/part-0.json",
    "file:///data/in/part-0.json",
    "file:/data/in/a%20b.json",
    "file:/C:/data/part-0.json",
    *[f"{s}://{a}/in/part-0.json" for s, a in REMOTE],
    *[f"{s}://{a}/in/a%20b.json" for s, a in REMOTE],
]


@pytest.mark.parametrize("uri", HADOOP_WRITTEN)
def test_the_spark_expression_agrees_with_normalize_path(uri: str) -> None:
    assert re.sub(LOCAL_PREFIX, "/", uri) == normalize_path(uri)
