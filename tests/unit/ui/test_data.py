"""The Ladders page's in-process caches (ui/data.py, issue 30): a parsed ladder file is reused
only while no ladder file and not the clusters file changed, and the deployment's bucket
override is read afresh on every listing; a versioned value is reused only at its version."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from traceladder.config import find_ladder
from traceladder.ui import data


def _ladders(tmp_path: Path) -> Path:
    """The repo's ladder files (proxy-local `extends` the seed ladder) in a folder of the test's own."""
    folder = tmp_path / "ladders"
    shutil.copytree(find_ladder("proxy-local").parent, folder)
    return folder


def _entry(name: str) -> data.LadderEntry:
    return next(e for e in data.list_ladders() if e.file == name)


def test_an_edited_ladder_file_is_parsed_again(tmp_path, monkeypatch):
    folder = _ladders(tmp_path)
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(folder))
    first = _entry("proxy-local")
    assert first.error is None and first.name == "proxy-local"
    parsed: list[list[Path]] = []
    load = data._load_entries
    monkeypatch.setattr(data, "_load_entries", lambda paths: parsed.append(paths) or load(paths))
    again = _entry("proxy-local")
    assert parsed == []  # nothing changed: nothing parsed
    assert again == first and again is not first  # a copy: a caller's edits never reach the cache
    path = folder / "proxy-local.yaml"
    text = path.read_text()
    assert "\ndescription:" in text
    path.write_text(text.replace("\ndescription:", "\ndescription: edited", 1))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert _entry("proxy-local").description.startswith("edited")
    assert len(parsed) == 1
    # the file it extends changed: it is parsed again too
    seed = folder / "deepseek-v4-flash-mi350x.yaml"
    seed.write_text(seed.read_text().replace('\nschedule: "0 3 * * 1"', '\nschedule: "0 4 * * 1"', 1))
    assert (first.schedule, _entry("proxy-local").schedule) == ("0 3 * * 1", "0 4 * * 1")


def test_a_new_ladder_file_and_a_broken_one_show_at_once(tmp_path, monkeypatch):
    folder = _ladders(tmp_path)
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(folder))
    before = [e.file for e in data.list_ladders()]
    assert "zz-broken" not in before
    (folder / "zz-broken.yaml").write_text("schema: 1\nladder: [not, a, name]\n")
    entries = data.list_ladders()
    assert [e.file for e in entries] == [*before, "zz-broken"]
    assert entries[-1].error and all(e.error is None for e in entries[:-1])


def test_the_bucket_override_is_read_on_every_listing(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(_ladders(tmp_path)))
    monkeypatch.delenv("TRACELADDER_S3_BUCKET", raising=False)
    plain = _entry("proxy-local").bucket
    monkeypatch.setenv("TRACELADDER_S3_BUCKET", "another-bucket")
    assert _entry("proxy-local").bucket == "another-bucket" != plain


def test_a_versioned_value_is_reused_only_at_its_version():
    cache = data._VersionedCache(limit=2)
    cache.put(("b", "k"), '"v1"', {"a": 1})
    assert cache.get(("b", "k"), '"v1"') == {"a": 1}
    assert cache.get(("b", "k"), '"v2"') is None
    cache.put(("b", "x"), "", {"never": "kept"})  # no version, nothing to check it against
    assert cache.get(("b", "x"), "") is None
    cache.put(("b", "k2"), "v", 2)
    cache.put(("b", "k3"), "v", 3)  # over the limit: emptied first
    assert cache.get(("b", "k"), '"v1"') is None and cache.get(("b", "k3"), "v") == 3


def test_listed_timestamps_parse_as_botocore_parses_them():
    import boto3
    from botocore.parsers import DEFAULT_TIMESTAMP_PARSER

    client = data._fast_timestamps(
        boto3.session.Session().client(
            "s3",
            region_name="us-east-1",
            endpoint_url="http://127.0.0.1:9",
            aws_access_key_id="k",
            aws_secret_access_key="s",
        )
    )
    parse = client._endpoint._response_parser_factory._defaults["timestamp_parser"]
    for value in ("2026-12-02T05:56:43.226Z", "2026-12-02T05:56:43Z", "Wed, 02 Dec 2026 05:56:43 GMT"):
        assert parse(value) == DEFAULT_TIMESTAMP_PARSER(value), value
        assert parse(value).utcoffset() is not None


def test_the_s3_client_is_remade_only_when_its_connection_changed(monkeypatch):
    """Every CLIENT_TTL_S the connection is read again; an unchanged one keeps its client (making
    one loads botocore's S3 model, whose discarded copies kept the workers collecting)."""
    uri = {"value": "aws://key:secret-1@?endpoint_url=http%3A%2F%2F127.0.0.1%3A9"}
    made: list[str] = []
    monkeypatch.setenv("AIRFLOW_CONN_TL_TEST_S3", uri["value"])
    monkeypatch.setattr(data, "_make_client", lambda conn_id, hook: made.append(conn_id) or object())
    monkeypatch.setattr(data, "_freeze_long_lived", lambda: None)
    clock = {"now": 1000.0}
    monkeypatch.setattr(data.time, "monotonic", lambda: clock["now"])
    cache = data._ClientCache()
    first = cache.get("tl_test_s3")
    assert cache.get("tl_test_s3") is first and made == ["tl_test_s3"]
    clock["now"] += data.CLIENT_TTL_S + 1  # re-read, unchanged: the same client
    assert cache.get("tl_test_s3") is first and len(made) == 1
    monkeypatch.setenv("AIRFLOW_CONN_TL_TEST_S3", uri["value"].replace("secret-1", "secret-2"))
    clock["now"] += data.CLIENT_TTL_S + 1  # edited: a new client
    assert cache.get("tl_test_s3") is not first and len(made) == 2


def test_a_ttl_cache_drops_what_expired():
    cache = data._TtlCache(5.0)
    for i in range(data.TTL_PRUNE_AT):
        cache.put(("b", f"old-{i}"), i)
    cache._values = {k: (t - 10.0, v) for k, (t, v) in cache._values.items()}  # all expired
    cache.put(("b", "new"), "x")
    assert list(cache._values) == [("b", "new")]
    assert cache.get(("b", "new")) == "x" and cache.get(("b", "old-0")) is None
