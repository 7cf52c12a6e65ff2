"""fetch(): sources in order (archive, mirror, URL), verification, and one clear message per failure.

Every failure must leave the destination folder empty (no partial file, no temporary file).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from fixtures_iwslt import FixtureArchive, build_iwslt_archive, closed_port, serve
from lnrepro.cli import build_parser
from lnrepro.data.download import fetch
from lnrepro.data.registry import datasets
from lnrepro.errors import LnReproError

KEY = "defaults.data.iwslt14.md5"


@pytest.fixture(scope="module")
def fixture_archive(tmp_path_factory) -> FixtureArchive:
    return build_iwslt_archive(tmp_path_factory.mktemp("src") / "de-en.tgz")


@pytest.fixture(scope="module")
def server(fixture_archive):
    with serve() as srv:
        srv.files["de-en.tgz"] = fixture_archive.path.read_bytes()
        yield srv


def _empty(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


def test_download_verifies_and_renames(server, fixture_archive, tmp_path):
    dest = tmp_path / "downloads" / "de-en.tgz"
    out = fetch([server.url("de-en.tgz")], dest, md5=fixture_archive.md5, size=fixture_archive.size,
                checksum_key=KEY, backoff=0)
    assert out == dest
    assert dest.read_bytes() == fixture_archive.path.read_bytes()
    assert [p.name for p in dest.parent.iterdir()] == ["de-en.tgz"]  # no temporary file left
    # A verified file is reused without a new request.
    before = server.count(server.url("de-en.tgz"))
    fetch([server.url("de-en.tgz")], dest, md5=fixture_archive.md5, checksum_key=KEY)
    assert server.count(server.url("de-en.tgz")) == before


def test_second_url_used_when_first_is_missing(server, fixture_archive, tmp_path):
    dest = tmp_path / "d" / "de-en.tgz"
    fetch([server.url("gone.tgz"), server.url("de-en.tgz")], dest, sha256=fixture_archive.sha256, backoff=0)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == fixture_archive.sha256


def test_checksum_mismatch_names_both_digests_and_key(server, fixture_archive, tmp_path):
    dest = tmp_path / "d" / "de-en.tgz"
    wrong = "0" * 32
    with pytest.raises(LnReproError) as e:
        fetch([server.url("de-en.tgz")], dest, md5=wrong, checksum_key=KEY, backoff=0)
    msg = str(e.value)
    assert wrong in msg and fixture_archive.md5 in msg and KEY in msg
    assert _empty(dest.parent)


def test_size_mismatch(server, fixture_archive, tmp_path):
    dest = tmp_path / "d" / "de-en.tgz"
    with pytest.raises(LnReproError, match=r"expected 19982877 bytes.*defaults\.data\.iwslt14\.size"):
        fetch([server.url("de-en.tgz")], dest, size=19982877, checksum_key=KEY, backoff=0)
    assert _empty(dest.parent)


def test_http_404_is_not_retried(server, tmp_path):
    dest = tmp_path / "d" / "missing.tgz"
    url = server.url("missing.tgz")
    with pytest.raises(LnReproError, match="HTTP 404") as e:
        fetch([url], dest, checksum_key=KEY, retries=3, backoff=0)
    assert "not at that address" in str(e.value)
    assert server.count(url) == 1
    assert _empty(dest.parent)


def test_connection_dropped_mid_file(server, fixture_archive, tmp_path):
    dest = tmp_path / "d" / "de-en.tgz"
    url = server.url("de-en.tgz", kind="truncated")
    with pytest.raises(LnReproError, match="dropped after") as e:
        fetch([url], dest, md5=fixture_archive.md5, checksum_key=KEY, retries=1, backoff=0)
    assert f"of {fixture_archive.size} bytes" in str(e.value)
    assert server.count(url) == 2  # retried once
    assert _empty(dest.parent)


def test_offline_without_archive_says_where_to_put_it(tmp_path):
    dest = tmp_path / "results" / "downloads" / "de-en.tgz"
    url = f"http://127.0.0.1:{closed_port()}/de-en.tgz"
    with pytest.raises(LnReproError) as e:
        fetch([url], dest, md5="0" * 32, checksum_key=KEY, retries=2, backoff=0)
    msg = str(e.value)
    assert "cannot connect" in msg and "3 attempts" in msg
    assert str(dest) in msg
    assert "defaults.data.iwslt14.archive" in msg and "defaults.data.iwslt14.mirror" in msg
    assert _empty(dest.parent)


def test_local_archive_is_verified_then_copied(fixture_archive, tmp_path):
    dest = tmp_path / "d" / "de-en.tgz"
    offline = [f"http://127.0.0.1:{closed_port()}/de-en.tgz"]
    with pytest.raises(LnReproError, match="defaults.data.iwslt14.md5"):
        fetch(offline, dest, md5="f" * 32, archive=fixture_archive.path, checksum_key=KEY)
    assert _empty(dest.parent)
    fetch(offline, dest, md5=fixture_archive.md5, archive=fixture_archive.path, checksum_key=KEY)
    assert dest.read_bytes() == fixture_archive.path.read_bytes()
    with pytest.raises(LnReproError, match="defaults.data.iwslt14.archive"):
        fetch(offline, tmp_path / "e" / "de-en.tgz", archive=tmp_path / "nope.tgz", checksum_key=KEY)


def test_mirror_folder_is_used_before_the_network(fixture_archive, tmp_path):
    dest = tmp_path / "d" / "de-en.tgz"
    offline = [f"http://127.0.0.1:{closed_port()}/de-en.tgz"]
    fetch(offline, dest, md5=fixture_archive.md5, mirror=fixture_archive.path.parent, checksum_key=KEY,
          retries=0, backoff=0)
    assert dest.read_bytes() == fixture_archive.path.read_bytes()
    # A mirror without the file falls through to the URL, and the message mentions the mirror.
    with pytest.raises(LnReproError, match="has no de-en.tgz"):
        fetch(offline, tmp_path / "e" / "de-en.tgz", mirror=tmp_path, checksum_key=KEY, retries=0, backoff=0)


def test_sha256_mismatch_names_the_sha256_key(server, fixture_archive, tmp_path):
    dest = tmp_path / "d" / "de-en.tgz"
    with pytest.raises(LnReproError, match=r"sha256 checksum mismatch.*defaults\.data\.iwslt14\.sha256"):
        fetch([server.url("de-en.tgz")], dest, md5=fixture_archive.md5, sha256="a" * 64, checksum_key=KEY,
              backoff=0)
    assert _empty(dest.parent)


def test_dataset_downloads_are_download_command_lines() -> None:
    """Each dataset's files (config.yaml's section) become the `lnrepro download` options fetch_archive runs."""
    data = yaml.safe_load((REPO / "config.yaml").read_text())["defaults"]["data"]
    names = []
    for name, module in datasets().items():
        for d in module.downloads(data[name]):
            a = build_parser().parse_args(["download", *d.cli_args(), "--out", f"results/downloads/{d.name}"])
            assert (a.url, getattr(a, d.algorithm), a.size, a.checksum_key) == (list(d.urls), d.checksum, d.size,
                                                                                d.checksum_key)
            names.append(d.name)
    assert names == ["de-en.tgz"] + [f"multi30k/{s}.{l}.gz" for s in ("train", "val", "test_2016_flickr")
                                     for l in ("de", "en")]


def test_offline_file_without_archive_key_offers_only_the_mirror(tmp_path):
    key = "defaults.data.multi30k.mirror"  # a Download without archive_key passes the mirror key for both
    with pytest.raises(LnReproError) as e:
        fetch([f"http://127.0.0.1:{closed_port()}/val.en.gz"], tmp_path / "val.en.gz", sha256="0" * 64,
              checksum_key="defaults.data.multi30k.sha256.val.en.gz", mirror_key=key, archive_key=key, retries=0)
    assert f"or set {key} to a folder that contains val.en.gz" in str(e.value) and ".archive" not in str(e.value)
