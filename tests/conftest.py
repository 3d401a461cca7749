"""Every test runs against a temporary project and a temporary HOME, with the fake embedder
unless it asks for another one."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "ai_smartness.py"
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AI_SMARTNESS_EMBEDDER", "fake")
    for var in ("CLAUDE_PROJECT_DIR", "AI_SMARTNESS_INTERNAL", "AI_SMARTNESS_LOCK_FD"):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture
def project(tmp_path):
    path = tmp_path / "proj"
    path.mkdir()
    yield path
    # A daemon a test started must not outlive it.
    info = path / ".ai" / "daemon.json"
    if info.exists():
        subprocess.run([sys.executable, str(SCRIPT), "--project", str(path), "daemon", "stop"],
                       capture_output=True, timeout=60)


def cli(*args, project=None, input=None, env=None, python=None, timeout=120):
    """Run the CLI as a real process."""
    cmd = [python or sys.executable, str(SCRIPT)]
    if project is not None:
        cmd += ["--project", str(project)]
    cmd += [str(a) for a in args]
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(cmd, input=input, capture_output=True, text=True, env=full_env, timeout=timeout)


@pytest.fixture
def run_cli():
    return cli


def cli_json(*args, project=None, **kw):
    proc = cli(*args, "--json", project=project, **kw)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hook(name, payload, project, env=None, timeout=60):
    """Run a hook as Claude Code does: payload on stdin, project in CLAUDE_PROJECT_DIR."""
    data = payload if isinstance(payload, (str, bytes)) else json.dumps(payload)
    if isinstance(data, str):
        data = data.encode()
    full_env = dict(os.environ, CLAUDE_PROJECT_DIR=str(project), **(env or {}))
    return subprocess.run([sys.executable, str(SCRIPT), "hook", name], input=data, capture_output=True,
                          env=full_env, timeout=timeout)


def fixtures_dir(*parts):
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared fixtures absent: {path}")
    return path
