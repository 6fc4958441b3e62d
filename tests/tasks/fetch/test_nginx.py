"""Conditional requests against a real nginx serving static files (a server nobody here wrote)."""

import os
import shutil
import socket
import subprocess
import time

import pytest

from tasks.fetch.engine import EngineState, FetchRequest
from tasks.fetch.rows import record_hash
from tests.tasks.fetch.conftest import quick_settings, run

NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(p)), None
)
pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx not installed (.ci/run installs it from Debian's packages)"
)

CONFIG = """
daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    open_file_cache off;
    types {{ text/html html; }}
    default_type application/octet-stream;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {prefix}/www;
        etag on;
    }}
}}
"""


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def nginx(tmp_path):
    (tmp_path / "www").mkdir()
    (tmp_path / "tmp").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "www" / f"{name}.html").write_text(f"<html><body>page {name}</body></html>")
    port = _free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(CONFIG.format(prefix=tmp_path, port=port))
    proc = subprocess.Popen(
        [NGINX, "-p", str(tmp_path), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    pytest.fail(f"nginx did not start: {err or (tmp_path / 'error.log')}")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", tmp_path / "www"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _again(rows, urls, *, etag=True, last_modified=True):
    return [
        FetchRequest(
            u,
            etag=r["etag"] if etag else None,
            last_modified=r["last_modified"] if last_modified else None,
            record_hash=r["record_hash"],
        )
        for u, r in zip(urls, rows, strict=True)
    ]


def test_nginx_validators_give_304_then_200_after_a_change(nginx):
    base, www = nginx
    urls = [f"{base}/{name}.html" for name in ("a", "b", "c")]
    settings = quick_settings(validator_min_probes=0, validator_probe_rate=0.0)
    state = EngineState(settings)
    first = run(urls, settings, state=state, record_hasher=record_hash)
    rows = first.rows.to_pylist()
    assert [r["outcome"] for r in rows] == ["ok"] * 3
    assert all(r["etag"] and r["last_modified"] for r in rows)  # nginx's own validators

    second = run(_again(rows, urls), settings, state=state, record_hasher=record_hash)
    assert [r["outcome"] for r in second.rows.to_pylist()] == ["not_modified"] * 3
    assert [r["status"] for r in second.rows.to_pylist()] == [304] * 3
    only_date = run(
        _again(rows, urls, etag=False), settings, state=state, record_hasher=record_hash
    )
    assert [r["outcome"] for r in only_date.rows.to_pylist()] == ["not_modified"] * 3

    page = www / "a.html"
    page.write_text("<html><body>page a, now with a real change</body></html>")
    later = time.time() + 10  # make sure Last-Modified (1 s resolution) moves too
    os.utime(page, (later, later))
    third = run(_again(rows, urls), settings, state=state, record_hasher=record_hash)
    changed, *unchanged = third.rows.to_pylist()
    assert changed["outcome"] == "ok" and changed["status"] == 200
    assert changed["etag"] != rows[0]["etag"]
    assert changed["record_hash"] != rows[0]["record_hash"]
    assert [r["outcome"] for r in unchanged] == ["not_modified"] * 2
    assert third.metrics.hosts[base.removeprefix("http://")].validators_trusted
