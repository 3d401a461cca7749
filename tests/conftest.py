"""Every test runs against a temporary project and a temporary HOME, with the fake embedder
unless it asks for another one. Shared helpers live in support.py.

Fixture names mean one thing in every file:
- `project`: an empty project folder; whatever daemon ran under the test's tmp_path is stopped.
- `proj`: a `project` with its data dir, whose lazily started daemon retires after 30 s idle.
"""
import json
import os
import subprocess
import sys

import pytest

from support import ROOT, SCRIPT, as_stdin, scratch_project, shared_path

__all__ = ["ROOT", "SCRIPT", "cli", "cli_json", "hook", "fixtures_dir"]


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
    yield from scratch_project(tmp_path, "proj")


@pytest.fixture
def proj(project):
    (project / ".ai").mkdir(mode=0o700)  # private whatever the umask: a shared one is refused
    (project / ".ai" / "config.json").write_text(json.dumps({"daemon_idle_seconds": 30}))
    return project


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
    full_env = dict(os.environ, CLAUDE_PROJECT_DIR=str(project), **(env or {}))
    return subprocess.run([sys.executable, str(SCRIPT), "hook", name], input=as_stdin(payload),
                          capture_output=True, env=full_env, timeout=timeout)


def fixtures_dir(*parts):
    """A folder of ../shared/fixtures: skipped when absent, a failure under CI."""
    return shared_path("fixtures", *parts)
