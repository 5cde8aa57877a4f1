"""Downloads checked against their sha256 before use (a local HTTP server on 127.0.0.1), and safe extraction."""

import hashlib
import http.server
import io
import tarfile
import threading
import zipfile

import pytest

from elmo.io.atomic import DiskWriteError
from elmo.io.download import DownloadError, fetch, safe_extract
from elmo.pretrained import _fetch_pinned


def test_download_is_verified_cached_and_refetched_when_damaged(server, tmp_path):
    root, url = server
    (root / "weights.hdf5").write_bytes(b"weights" * 1000)
    digest = hashlib.sha256(b"weights" * 1000).hexdigest()
    cache = tmp_path / "cache"
    path = fetch(f"{url}/weights.hdf5", digest, directory=cache, progress=False)
    assert path.read_bytes() == b"weights" * 1000
    (root / "weights.hdf5").unlink()  # served no more: the cache answers
    assert fetch(f"{url}/weights.hdf5", digest, directory=cache, progress=False) == path
    path.write_bytes(b"tampered")
    with pytest.raises(DownloadError, match="the server answered 404"):
        fetch(f"{url}/weights.hdf5", digest, directory=cache, progress=False)
    assert path.read_bytes() == b"tampered"  # never used (its hash is wrong), never deleted before a complete download
    (root / "weights.hdf5").write_bytes(b"weights" * 1000)
    assert fetch(f"{url}/weights.hdf5", digest, directory=cache, progress=False).read_bytes() == b"weights" * 1000


def test_checksum_mismatch_keeps_nothing(server, tmp_path):
    root, url = server
    (root / "evil.hdf5").write_bytes(b"not what was pinned")
    with pytest.raises(DownloadError, match="does not match the pinned"):
        fetch(f"{url}/evil.hdf5", "0" * 64, directory=tmp_path / "cache", progress=False)
    assert not any((tmp_path / "cache").iterdir())


def test_unpinned_or_unreachable_downloads_are_refused(tmp_path):
    with pytest.raises(DownloadError, match="no sha256 pinned"):
        fetch("http://127.0.0.1:9/x", "", directory=tmp_path)
    with pytest.raises(DownloadError, match=r"cannot download .*try again, or \(offline\) download it elsewhere"):
        fetch("http://127.0.0.1:9/x", "a" * 64, directory=tmp_path, progress=False, timeout=2)


def _tar(tmp_path, name, data=b"x", kind=tarfile.REGTYPE, link=""):
    path = tmp_path / f"{abs(hash(name))}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
        tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return path


@pytest.mark.parametrize("name,kind,link", [("../escape.txt", tarfile.REGTYPE, ""),
                                            ("/abs/escape.txt", tarfile.REGTYPE, ""),
                                            ("link", tarfile.SYMTYPE, "/etc/passwd")])
def test_tar_path_traversal_and_links_are_refused(tmp_path, name, kind, link):
    with pytest.raises(DownloadError, match="not extracted"):
        safe_extract(_tar(tmp_path, name, kind=kind, link=link), tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()


def test_zip_traversal_is_refused_and_good_archives_extract(tmp_path):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("../../escape.txt", "x")
    with pytest.raises(DownloadError, match="outside"):
        safe_extract(bad, tmp_path / "out")
    good = _tar(tmp_path, "model/options.json", b"{}")
    assert [p.name for p in safe_extract(good, tmp_path / "out2")] == ["options.json"]


def test_a_file_in_the_cache_survives_a_failed_trust_on_first_use_download(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_ALLOW_UNPINNED", "1")
    (tmp_path / "options.json").write_text("{}")  # placed by the user, never recorded
    with pytest.raises(DownloadError, match="cannot download"):
        _fetch_pinned("http://127.0.0.1:9/options.json", None, tmp_path, progress=False)
    assert (tmp_path / "options.json").read_text() == "{}" and not (tmp_path / "options.json.sha256").exists()


def test_a_download_shorter_than_its_content_length_is_not_kept(tmp_path):
    """A server that declares 1,000 bytes and closes after 500: nothing kept, nothing trusted."""
    class Short(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"x" * 500)
            self.close_connection = True

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Short)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(DownloadError):
            fetch(f"http://127.0.0.1:{httpd.server_port}/w.hdf5", None, directory=tmp_path, progress=False,
                  verify=False)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert not any(tmp_path.iterdir())


class _Odd(http.server.BaseHTTPRequestHandler):
    """Serves BODY with the Content-Length LENGTH says (None: the true one)."""

    BODY, LENGTH = b"weights" * 100, None

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.BODY)) if self.LENGTH is None else self.LENGTH)
        self.end_headers()
        self.wfile.write(self.BODY)
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def odd_server(monkeypatch):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Odd)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}", monkeypatch
    httpd.shutdown()
    httpd.server_close()


def test_a_link_in_the_cache_is_never_written_through(odd_server, tmp_path):
    """A user's file linked into the cache was replaced by the download (exit 0 when pinned), or by a server's HTML
    page and then the link deleted (trust on first use): the link and its file are left as they were."""
    url, _ = odd_server
    mine = tmp_path / "mine" / "w.hdf5"
    mine.parent.mkdir()
    mine.write_bytes(b"my own weights")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "w.hdf5").symlink_to(mine)
    digest = hashlib.sha256(_Odd.BODY).hexdigest()
    for kwargs, fragment in [({"sha256": digest}, "does not match the pinned"),
                             ({"sha256": None, "verify": False, "fresh": True}, "never verified")]:
        with pytest.raises(DownloadError, match=f"symbolic link.*{fragment}.*remove the link"):
            fetch(f"{url}/w.hdf5", directory=cache, progress=False, **kwargs)
        assert mine.read_bytes() == b"my own weights" and (cache / "w.hdf5").is_symlink()
    mine.write_bytes(_Odd.BODY)  # a link to the right file is read
    assert fetch(f"{url}/w.hdf5", digest, directory=cache, progress=False).read_bytes() == _Odd.BODY
    assert sorted(p.name for p in cache.iterdir()) == ["w.hdf5"]


def test_a_refused_first_download_leaves_the_cached_file_as_it_was(odd_server, tmp_path):
    """An unrecorded file in the cache was replaced by an HTML page, which was then deleted: the file was lost."""
    url, monkeypatch = odd_server
    monkeypatch.setenv("ELMO_ALLOW_UNPINNED", "1")
    monkeypatch.setattr(_Odd, "BODY", b"<!DOCTYPE html><html><body>Service unavailable</body></html>\n")
    (tmp_path / "w.hdf5").write_bytes(b"placed here by hand")
    with pytest.raises(DownloadError, match="HTML/XML page.*nothing was kept"):
        _fetch_pinned(f"{url}/w.hdf5", None, tmp_path, progress=False)
    assert (tmp_path / "w.hdf5").read_bytes() == b"placed here by hand"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.hdf5"]


@pytest.mark.parametrize("length", ["abc", "-5", " "])
def test_a_content_length_that_is_no_number_is_unknown_and_the_hash_decides(odd_server, tmp_path, length):
    """'abc' was a ValueError traceback; '-5' refused a complete, correct download ("received 700 of -5 bytes")."""
    url, monkeypatch = odd_server
    monkeypatch.setattr(_Odd, "LENGTH", length)
    digest = hashlib.sha256(_Odd.BODY).hexdigest()
    assert fetch(f"{url}/w.hdf5", digest, directory=tmp_path, progress=False).read_bytes() == _Odd.BODY


def test_a_download_larger_than_the_free_space_is_refused_before_it_is_written(odd_server, tmp_path):
    """A declared 10^15 bytes (or a model larger than the cache's disk) was written until the disk was full, then
    'No space left on device' naming no file."""
    url, monkeypatch = odd_server
    monkeypatch.setattr(_Odd, "LENGTH", str(10**15))
    with pytest.raises(DiskWriteError, match=r"w\.hdf5 needs about .* free; free some space"):
        fetch(f"{url}/w.hdf5", "a" * 64, directory=tmp_path / "cache", progress=False)
    assert not any((tmp_path / "cache").iterdir())


def test_a_download_that_disagrees_with_its_first_use_record_names_the_record(odd_server, tmp_path):
    """It said "does not match the pinned ..." with nothing to do about it; the record is the user's to delete."""
    url, _ = odd_server
    (tmp_path / "w.hdf5.sha256").write_text("b" * 64 + "\n")
    with pytest.raises(DownloadError, match=r"recorded on its first use in .*w\.hdf5\.sha256.*delete that record"):
        _fetch_pinned(f"{url}/w.hdf5", None, tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.hdf5.sha256"]


def test_the_servers_refusal_is_not_called_offline(server, tmp_path):
    """A 404 or 500 said "offline, download it elsewhere" on a machine that is online."""
    _, url = server
    with pytest.raises(DownloadError, match="the server answered 404"):
        fetch(f"{url}/missing.hdf5", "a" * 64, directory=tmp_path, progress=False)


@pytest.mark.parametrize("value, on", [("0", False), ("off", False), ("False", False), ("no", False), ("1", True),
                                       ("yes", True), ("", True)])
def test_cache_switches_take_the_usual_spellings(monkeypatch, value, on):
    """ELMO_CONVERT_CACHE=false / off / no left the cache on, and ELMO_ALLOW_UNPINNED=true refused."""
    from elmo.io import converted
    monkeypatch.setenv("ELMO_CONVERT_CACHE", value)
    assert converted.enabled() is on


def test_a_cache_switch_of_another_value_is_one_line(monkeypatch, tmp_path):
    from elmo.errors import UsageError
    from elmo.io import converted
    monkeypatch.setenv("ELMO_CONVERT_CACHE", "sometimes")
    with pytest.raises(UsageError, match="ELMO_CONVERT_CACHE='sometimes': not a switch; set it to 1"):
        converted.enabled()


def test_a_blank_cache_variable_means_the_default_folder(monkeypatch, tmp_path):
    """ELMO_CACHE=' ' made a folder named ' ' in the working folder."""
    from elmo.io.download import cache_dir
    monkeypatch.setenv("ELMO_CACHE", "  ")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "elmo"


def test_a_download_killed_midway_leaves_nothing_for_good(odd_server, tmp_path):
    """A download killed by SIGKILL left its temporary file (up to the whole model) for ever; the next download of
    the same file removes it once it is an hour old. A fresh one (a download running now) and a user's file of a
    similar name are left."""
    import os
    import time

    url, _ = odd_server
    old = tmp_path / ".w.hdf5.k3j4h5g6.tmp"  # atomic_path's name for w.hdf5
    old.write_bytes(b"half a model")
    hour_ago = time.time() - 3700
    os.utime(old, (hour_ago, hour_ago))
    running = tmp_path / ".w.hdf5.abcdefgh.tmp"
    running.write_bytes(b"being written")
    mine = tmp_path / ".w.hdf5.my-notes.tmp"
    mine.write_text("mine")
    os.utime(mine, (hour_ago, hour_ago))
    digest = hashlib.sha256(_Odd.BODY).hexdigest()
    fetch(f"{url}/w.hdf5", digest, directory=tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, mine.name, "w.hdf5"])


def test_a_temporary_file_removed_under_a_running_download_is_one_line(odd_server, tmp_path):
    """Another process cleaning the cache (a writer suspended past the hour): os.replace's FileNotFoundError was a
    traceback."""
    import elmo.io.download as download_module

    url, monkeypatch = odd_server
    original = download_module._receive

    def then_removed(response, tmp, *args):
        result = original(response, tmp, *args)
        tmp.unlink()
        return result

    monkeypatch.setattr(download_module, "_receive", then_removed)
    with pytest.raises(DownloadError, match="temporary file was removed while it ran"):
        fetch(f"{url}/w.hdf5", hashlib.sha256(_Odd.BODY).hexdigest(), directory=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Declares 1,000 bytes and sends them one at a time, 20 ms apart (a server that never quite stops)."""

    def do_GET(self):
        import time
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.02)
        except OSError:  # the client gave up
            pass

    def log_message(self, *args):
        pass


def test_a_server_that_only_trickles_is_given_up_on(tmp_path, monkeypatch):
    """Each read's timeout only caught silence: a byte every 20 s held `elmo` for ever. Under STALL_BYTES in
    STALL_SECONDS ends the download (here 100 bytes in 0.5 s, scaled down), keeping nothing."""
    from elmo.io import download
    monkeypatch.setattr(download, "STALL_SECONDS", 0.5)
    monkeypatch.setattr(download, "STALL_BYTES", 100)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(DownloadError, match=r"cannot download \(\d+ bytes in the last 0.5 s\); nothing was kept"):
            fetch(f"http://127.0.0.1:{httpd.server_port}/w.hdf5", "a" * 64, directory=tmp_path, progress=False)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert not any(tmp_path.iterdir())


def test_a_tls_error_midway_is_one_line(odd_server, tmp_path):
    """A corrupt TLS record while the body was read (ssl.SSLError) ended in a traceback."""
    import http.client
    import ssl

    url, monkeypatch = odd_server

    def garbled(self, size=-1):
        raise ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC] decryption failed or bad record mac")

    monkeypatch.setattr(http.client.HTTPResponse, "read1", garbled)
    with pytest.raises(DownloadError, match="cannot download .*BAD_RECORD_MAC.*nothing was kept: try again"):
        fetch(f"{url}/w.hdf5", "a" * 64, directory=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())
