"""install.sh as a real process: round trips in a temp project (`target`, a path that needs
quoting) and a temp HOME.

Covers: install -> our hooks with absolute paths beside the user's own -> re-run changes
nothing -> uninstall restores the original bytes -> install again; invalid settings stop
everything; --dry-run; --shortcut; reuse of an existing venv; modes under umask 000; the
Python inside install.sh (compiled, linted, its action table and the pip wheel's sha256);
the real Claude Code CLI accepting the merged settings (its hooks fire).
"""
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support import ROOT, hook_events, scratch_project

INSTALL = ROOT / "install.sh"
MARKER = "# ai_smartness"
HOOKS = hook_events()
MATCHERS = {"PreToolUse": "Read",
            "PostToolUse": "Read|Write|Edit|MultiEdit|NotebookEdit|Bash|Grep|Task|Agent|WebFetch|WebSearch|BashOutput|TaskOutput|ExitPlanMode|AskUserQuestion|ReportFindings|TodoWrite|TaskCreate|TaskUpdate|mcp__.*",
            "PostToolUseFailure": "Bash"}

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


def run(home, *args, ai_home=None, env=None, cwd=None, umask=None):
    """install.sh with a temp HOME, no terminal on stdin."""
    env = dict(os.environ, HOME=str(home), AI_SMARTNESS_HOME=str(ai_home or home / "ais_home"),
               **(env or {}))
    return subprocess.run(["bash", str(INSTALL), *map(str, args)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900, cwd=cwd,
                          preexec_fn=None if umask is None else lambda: os.umask(umask))


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


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "install_home"
    path.mkdir()
    return path


@pytest.fixture
def target(tmp_path):
    """The project to install into; its path needs quoting: a space and a single quote."""
    yield from scratch_project(tmp_path, "my proj's dir")


def write_settings(target, text):
    (target / ".claude").mkdir(exist_ok=True)
    (target / ".claude" / "settings.json").write_text(text)


def read_settings(target):
    return json.loads((target / ".claude" / "settings.json").read_text())


def check_hooks(target, python=None):
    """Our seven hooks, in the exact command form, with absolute paths; returns the interpreter."""
    handlers = our_handlers(read_settings(target))
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
        # -I keeps the target folder (cwd) and PYTHON* variables out; -S skips site-packages,
        # which a hook does not need.
        assert words[1:4] == ["-I", "-S", "-c"] and "import ai_smartness" in words[4]
        assert words[5:] == [str(target / ".ai"), "hook", HOOKS[event]]
        pythons.add(words[0])
    assert len(pythons) == 1
    py = pythons.pop()
    assert os.path.isabs(py) and os.access(py, os.X_OK)
    if python is not None:
        assert py == str(python)
    return py


def test_help_and_bad_options(home, target):
    proc = ok(run(home, "--help"))
    assert proc.stdout.startswith("Usage: install.sh")
    for args in (["--bogus", target], ["--lang", "de", target], ["--mode"], ["--purge", target]):
        proc = run(home, *args)
        assert proc.returncode == 2, args
        assert "Usage: install.sh" in proc.stderr
    assert list(target.iterdir()) == []


def test_scripts_parse():
    for script in ("install.sh", "tests/run.sh", ".ci/run"):
        subprocess.run(["bash", "-n", str(ROOT / script)], check=True)


def python_blocks():
    """{first line: source} of every <<'PY' heredoc in install.sh (shellcheck cannot see them)."""
    blocks, start, body = {}, None, []
    for no, line in enumerate(INSTALL.read_text().splitlines(), 1):
        if start is None and line.rstrip().endswith("<<'PY'"):
            start, body = no + 1, []
        elif start is not None and line == "PY":
            blocks[start], start = "\n".join(body) + "\n", None
        elif start is not None:
            body.append(line)
    assert start is None, f"install.sh:{start}: heredoc never closed"
    return blocks


def test_heredoc_python_compiles_and_lints(tmp_path):
    blocks = python_blocks()
    assert len(blocks) == 2  # the JSON edits and the pip bootstrap
    for start, source in blocks.items():
        compile(source, f"install.sh:{start}", "exec")
    # pyflakes' checks (undefined names, unused imports...) when ruff is there: tests/run.sh installs it.
    if subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode:
        pytest.skip("ruff not installed (tests/run.sh installs it): compiled only")
    for start, source in blocks.items():
        path = tmp_path / f"install_sh_line_{start}.py"
        path.write_text(source)
        proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                               "--select", "F,E9", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_json_snippet_rejects_an_unknown_action(tmp_path):
    """A typo in an action name is one clean error line, not a traceback."""
    json_edits = next(iter(python_blocks().values()))
    proc = subprocess.run([sys.executable, "-I", "-", "instal", str(tmp_path / "settings.json")], input=json_edits,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("ai_smartness: error: pyjson: unknown action ['instal']"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


class FakePyPI:
    """urlopen/urlretrieve stand-ins: pip's JSON names one wheel and its sha256."""

    def __init__(self, wheel, digest):
        self.wheel, self.digest = wheel, digest

    def urlopen(self, url, timeout=None):
        meta = {"urls": [{"packagetype": "sdist", "url": "pip-1.tar.gz", "digests": {"sha256": "0"}},
                         {"packagetype": "bdist_wheel", "url": "https://files.example/pip-1-py3-none-any.whl",
                          "digests": {"sha256": self.digest}}]}
        reply = io.BytesIO(json.dumps(meta).encode())
        reply.geturl = lambda: url
        return reply

    def urlretrieve(self, url, path):
        Path(path).write_bytes(self.wheel)


@pytest.mark.parametrize("digest_ok", [True, False], ids=["matching", "mismatching"])
def test_pip_bootstrap_checks_the_wheel_sha256(tmp_path, monkeypatch, capsys, digest_ok):
    bootstrap = list(python_blocks().values())[1]
    wheel = b"PK\x03\x04 a wheel"
    digest = hashlib.sha256(wheel if digest_ok else b"another wheel").hexdigest()
    pypi = FakePyPI(wheel, digest)
    monkeypatch.setattr(urllib.request, "urlopen", pypi.urlopen)
    monkeypatch.setattr(urllib.request, "urlretrieve", pypi.urlretrieve)
    monkeypatch.setattr(sys, "argv", ["-", str(tmp_path)])
    if digest_ok:
        exec(compile(bootstrap, "install.sh", "exec"), {})
        assert capsys.readouterr().out == str(tmp_path / "pip-1-py3-none-any.whl") + "\n"
    else:
        with pytest.raises(SystemExit) as exc:
            exec(compile(bootstrap, "install.sh", "exec"), {})
        assert "sha256" in str(exc.value) and digest in str(exc.value)
        assert capsys.readouterr().out == ""


def test_nothing_is_group_or_world_writable_under_umask_000(home, target):
    ai = target / ".ai"

    def check():
        made = [target / ".claude", target / ".claude" / "settings.json", target / ".gitignore",
                home / ".local" / "bin", home / ".local" / "bin" / "ai"]
        for path in made:
            assert not path.stat().st_mode & 0o022, (path, oct(path.stat().st_mode))
        inside = [ai, *ai.rglob("*")]
        assert ai / "__pycache__" in inside and ai / "i18n" / "en.json" in inside and ai / "logs" in inside
        for path in inside:  # the module, i18n, bytecode and memory: the user's alone
            assert not path.lstat().st_mode & 0o077, (path, oct(path.lstat().st_mode))
    ok(run(home, "--no-embeddings", "--shortcut", target, umask=0))
    check()
    # An older install's readable module, catalog and bytecode become private on the next run.
    for path in (ai / "ai_smartness.py", ai / "i18n" / "en.json", *(ai / "__pycache__").iterdir()):
        path.chmod(0o644)
    (ai / "__pycache__").chmod(0o755)
    ok(run(home, "--no-embeddings", "--shortcut", target, umask=0))
    check()
    ok(run(home, "--uninstall", target))


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
                                "import ai_smartness; ai_smartness.hook_command(sys.argv[2:])' "
                                f"'{{{{AI_DIR}}}}' hook {HOOKS[event]} {MARKER}")


@pytest.mark.parametrize("original", [FOREIGN, '{"model":"haiku"}', None],
                         ids=["foreign-hooks", "no-hooks-compact", "no-settings"])
def test_round_trip(home, target, original):
    if original is not None:
        write_settings(target, original)
    (target / ".gitignore").write_text("node_modules/\n")
    (target / ".gitignore").chmod(0o640)  # an unusual mode: the purge's rewrite must keep it
    # Project modules named like stdlib ones must shadow nothing, neither in install.sh nor in hooks.
    (target / "json.py").write_text("raise SystemExit('the project json.py was imported')\n")
    before = snapshot(target)

    proc = ok(run(home, "--no-embeddings", "--lang", "fr", "--mode", "light", target, cwd=target))
    check_hooks(target)
    settings = read_settings(target)
    if original is not None:
        for key, value in json.loads(original).items():
            if key != "hooks":
                assert settings[key] == value
    if original == FOREIGN:
        assert settings["hooks"]["PostToolUse"][0] == json.loads(FOREIGN)["hooks"]["PostToolUse"][0]
    ai = target / ".ai"
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
    assert (target / ".gitignore").read_text().splitlines().count(".ai/") == 1
    assert "Next steps" in proc.stdout

    # The installed command line really runs the module (paths with a space and a quote).
    start = our_handlers(settings)["SessionStart"][0][1]["command"]
    payload = {"session_id": "t-install", "transcript_path": str(target / "t.jsonl"), "cwd": str(target),
               "hook_event_name": "SessionStart", "source": "startup"}
    hook = subprocess.run(["sh", "-c", start], input=json.dumps(payload), capture_output=True, text=True,
                          cwd=target, timeout=60, env=dict(os.environ, HOME=str(home),
                                                            CLAUDE_PROJECT_DIR=str(target)))
    assert hook.returncode == 0, hook.stderr
    assert "ai_smartness" in hook.stdout

    installed = snapshot(target / ".claude")
    gitignore = (target / ".gitignore").read_bytes()
    proc = ok(run(home, "--no-embeddings", target))
    assert "already configured" in proc.stdout
    assert snapshot(target / ".claude") == installed
    assert (target / ".gitignore").read_bytes() == gitignore
    assert json.loads((ai / "config.json").read_text()) == config

    ok(run(home, "--uninstall", target))
    # Without --purge the memory stays, and so does the .gitignore line that keeps it out of git.
    kept = {p: e for p, e in snapshot(target).items() if p != ".gitignore" and p.split("/")[0] != ".ai"}
    assert kept == {p: e for p, e in before.items() if p != ".gitignore"}
    assert (ai / "config.json").exists()
    assert ".ai/" in (target / ".gitignore").read_text()

    ok(run(home, "--no-embeddings", target))
    check_hooks(target)
    ok(run(home, "--uninstall", "--purge", target))
    assert snapshot(target) == before


def test_uninstall_keeps_changes_made_after_install(home, target):
    write_settings(target, FOREIGN)
    ok(run(home, "--no-embeddings", target))
    settings = read_settings(target)
    user_stop = {"hooks": [{"type": "command", "command": "echo bye"}]}
    settings["hooks"]["Stop"].append(user_stop)
    settings["env"] = {"FOO": "1"}
    write_settings(target, json.dumps(settings))

    ok(run(home, "--uninstall", target))
    result = read_settings(target)
    expected = json.loads(FOREIGN)
    expected["hooks"]["Stop"] = [user_stop]
    expected["env"] = {"FOO": "1"}
    assert result == expected
    assert not (target / ".claude" / "settings.json.ai_smartness.bak").exists()


def test_existing_config_is_kept(home, target):
    ok(run(home, "--no-embeddings", "--lang", "es", target))
    config_file = target / ".ai" / "config.json"
    config = json.loads(config_file.read_text())
    assert (config["language"], config["mode"]) == ("es", "normal")
    config["inject_budget"] = 1234
    config_file.write_text(json.dumps(config))

    ok(run(home, "--no-embeddings", "--mode", "heavy", target))
    assert json.loads(config_file.read_text()) == dict(config, mode="heavy")


def test_invalid_settings_change_nothing(tmp_path, home, target):
    write_settings(target, '{"hooks": {')
    ai_home = tmp_path / "fresh_ais_home"
    before = snapshot(tmp_path)
    # Without --no-embeddings: the check must come before the venv is built, too.
    for args in ([target], ["--uninstall", target]):
        proc = run(home, *args, ai_home=ai_home)
        assert proc.returncode != 0
        assert "settings.json is not valid JSON" in proc.stderr
        assert "nothing was changed" in proc.stderr
        assert snapshot(tmp_path) == before


def test_dry_run_changes_nothing(tmp_path, home, target):
    write_settings(target, FOREIGN)
    before = snapshot(tmp_path)
    proc = ok(run(home, "--dry-run", "--no-embeddings", "--shortcut", target))
    assert "would add ai_smartness hooks" in proc.stdout
    assert snapshot(tmp_path) == before

    ok(run(home, "--no-embeddings", "--shortcut", target))
    installed = snapshot(tmp_path)
    proc = ok(run(home, "--dry-run", "--uninstall", "--purge", target))
    assert "would" in proc.stdout
    assert snapshot(tmp_path) == installed


def test_shortcut(home, target):
    ok(run(home, "--no-embeddings", "--shortcut", target))
    shortcut = home / ".local" / "bin" / "ai"
    assert os.access(shortcut, os.X_OK)
    proc = subprocess.run([str(shortcut), "--help"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, HOME=str(home)))
    assert proc.returncode == 0, proc.stderr
    ok(run(home, "--uninstall", target))
    assert not shortcut.exists()

    shortcut.write_text("#!/bin/sh\necho mine\n")   # someone else's `ai` is never replaced
    proc = ok(run(home, "--no-embeddings", "--shortcut", target))
    assert "not ours" in proc.stderr
    assert shortcut.read_text() == "#!/bin/sh\necho mine\n"
    ok(run(home, "--uninstall", target))
    assert shortcut.exists()


def test_existing_venv_is_reused(tmp_path, home, target):
    """A venv whose python imports the embedding stack is used as it is: no pip run, nothing in
    it changes, the hooks run with its python. Stand-in packages make the import check pass
    without loading torch."""
    venv = tmp_path / "ais_home" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    deps = re.search(r"^DEPS_CHECK='import ([\w, ]+)'$", INSTALL.read_text(), re.M).group(1).split(", ")
    assert "torch" in deps
    for name in deps:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("")
    listing = sorted(os.listdir(site))
    # Any pip install would fail here: reuse must not even try.
    no_pip = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path), "PIP_INDEX_URL": "http://127.0.0.1:9/"}
    proc = ok(run(home, "--deps-only", ai_home=venv.parent, env=no_pip))
    assert "already installed" in proc.stdout
    proc = ok(run(home, target, ai_home=venv.parent, env=no_pip))
    assert "already installed" in proc.stdout
    check_hooks(target, python=venv / "bin" / "python")
    assert sorted(os.listdir(site)) == listing
    ok(run(home, "--uninstall", target))


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
def test_real_cli_runs_installed_hooks(home, target):
    # The foreign hook proves the settings file was accepted: one bad field disables every hook.
    write_settings(target, json.dumps({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": 'echo fired > "$CLAUDE_PROJECT_DIR/foreign_fired"'}]}]}}))
    ok(run(home, "--no-embeddings", target))
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMessagesAPI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeMessagesAPI.bodies = []
    try:
        env = dict(os.environ, HOME=str(home), ANTHROPIC_API_KEY="dummy",
                   ANTHROPIC_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}",
                   DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        proc = subprocess.run([CLAUDE, "-p", "hello", "--output-format", "json"], cwd=target, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert (target / "foreign_fired").exists(), "Claude Code ran no hook from the merged settings"
    request = "\n".join(FakeMessagesAPI.bodies)
    # Our SessionStart briefing reached the model (contract: it names ai_smartness and .ai/recall/).
    assert "SessionStart hook additional context" in request
    assert "ai_smartness" in request and ".ai/recall/" in request
