"""``python -m sandbox`` in its own process (manifest, SIGTERM) and ``recrawl sandbox``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from flows.cli import main as recrawl

ROOT = Path(__file__).resolve().parents[2]


def test_python_m_sandbox_writes_a_manifest_serves_and_stops_on_sigterm(tmp_path):
    manifest = tmp_path / "sandbox.json"
    command = [sys.executable, "-m", "sandbox", "--hosts", "300", "--pages-per-host", "2"]
    server = subprocess.Popen(
        [*command, "--manifest", str(manifest), "--seed", "3"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not manifest.exists():
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            assert time.monotonic() < deadline, "no manifest after 30 s"
            time.sleep(0.05)
        info = json.loads(manifest.read_text())
        assert info["hosts"] == 300 and len(info["page_urls"]) == 600
        assert info["page_urls"][-1] == f"http://127.0.2.50:{info['port']}/p/1"  # host 299
        assert httpx.get(info["page_urls"][-1]).status_code == 200
        fetched = httpx.get(info["api_url"] + "/fetch", params={"url": info["page_urls"][0]})
        assert fetched.status_code == 200
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 0


def test_bad_options_exit_2_with_the_option_named(capsys):
    assert recrawl(["sandbox", "--hosts", "0"]) == 2
    assert "--hosts" in capsys.readouterr().err
    assert recrawl(["sandbox", "--start", "yesterday"]) == 2
    assert "--start" in capsys.readouterr().err
