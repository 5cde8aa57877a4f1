"""Downloads checked against their sha256 before use (a local HTTP server on 127.0.0.1), and safe extraction."""

import hashlib
import http.server
import io
import tarfile
import threading
import zipfile

import pytest

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
    with pytest.raises(DownloadError, match="cannot download"):
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
    with pytest.raises(DownloadError, match="offline, download it elsewhere"):
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
