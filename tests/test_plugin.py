"""The Claude Code plugin (.claude-plugin/, hooks/hooks.json, hooks/run.sh): the same hooks as
install.sh in exec form, validated and loaded by the real claude CLI (--plugin-dir), whose
hooks then capture and inject against the stand-in Messages API."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from e2e_support import ClaudeRun, Sandbox, claude_bin, json_strings
from fake_anthropic import FakeAnthropic, system_entries, tool_results, tool_use
from support import ROOT, stop_daemons, unavailable, wait_for

PLUGIN_JSON = ROOT / ".claude-plugin" / "plugin.json"
MARKETPLACE = ROOT / ".claude-plugin" / "marketplace.json"
HOOKS_JSON = ROOT / "hooks" / "hooks.json"
RUN_SH = ROOT / "hooks" / "run.sh"
# Claude Code names a plugin's MCP tools mcp__plugin_<plugin>_<server>__<tool>.
PLUGIN_RECALL = "mcp__plugin_ai-smartness_ai_smartness__recall"
TOKEN = "pangolin2096"
BRIEFING_MARK = "SessionStart hook additional context:"
MEMORY_MARK = "UserPromptSubmit hook additional context:"


def load(path):
    return json.loads(path.read_text())


def test_hooks_json_is_the_installers_hooks_in_exec_form():
    template = load(ROOT / "settings.template.json")["hooks"]
    plugin = load(HOOKS_JSON)["hooks"]
    assert list(plugin) == list(template)
    for event, groups in template.items():
        assert len(plugin[event]) == len(groups) == 1
        mine, theirs = plugin[event][0], groups[0]
        assert mine.get("matcher") == theirs.get("matcher"), event
        (h,), (t,) = mine["hooks"], theirs["hooks"]
        name = t["command"].split()[-3]  # "... hook <name> # ai_smartness"
        assert h == {"type": "command", "command": "/bin/sh", "timeout": t["timeout"],
                     "args": ["${CLAUDE_PLUGIN_ROOT}/hooks/run.sh", "hook", name]}, event


def test_manifests_name_one_plugin_with_the_mcp_server():
    plugin, market = load(PLUGIN_JSON), load(MARKETPLACE)
    assert [p["name"] for p in market["plugins"]] == [plugin["name"]]
    assert market["plugins"][0]["source"] == "./" and market["plugins"][0]["version"] == plugin["version"]
    assert plugin["mcpServers"]["ai_smartness"]["args"] == ["${CLAUDE_PLUGIN_ROOT}/hooks/run.sh", "mcp"]
    assert os.access(RUN_SH, os.X_OK)


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck not installed (tests/run.sh installs it)")
def test_launcher_shellcheck():
    done = subprocess.run(["shellcheck", str(RUN_SH)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def launcher(args, project, ai_home, stdin=b"", env=None):
    full = dict(os.environ, CLAUDE_PROJECT_DIR=str(project), AI_SMARTNESS_HOME=str(ai_home), **(env or {}))
    return subprocess.run(["/bin/sh", str(RUN_SH), *args], input=stdin, capture_output=True, env=full, timeout=120)


def test_launcher_prefers_the_shared_venv_and_falls_back_to_python3(project, tmp_path):
    payload = json.dumps({"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup",
                          "cwd": str(project)}).encode()
    # A fake shared venv whose python says who it is, then runs the real one.
    venv_home = tmp_path / "ais_venv"
    (venv_home / "venv" / "bin").mkdir(parents=True)
    fake = venv_home / "venv" / "bin" / "python"
    fake.write_text(f'#!/bin/sh\necho venv-python >&2\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    done = launcher(["hook", "start"], project, venv_home, payload)
    assert done.returncode == 0 and b"venv-python" in done.stderr
    assert "ai_smartness" in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    # No venv: python3 answers; the background build of the venv is skipped when asked to.
    bare = tmp_path / "ais_bare"
    done = launcher(["hook", "start"], project, bare, payload, env={"AI_SMARTNESS_NO_EMBEDDINGS": "1"})
    assert done.returncode == 0 and json.loads(done.stdout)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert not (bare / "plugin-deps.log").exists()
    # A bad payload: fail open, nothing printed.
    done = launcher(["hook", "inject"], project, bare, b"{not json", env={"AI_SMARTNESS_NO_EMBEDDINGS": "1"})
    assert done.returncode == 0 and done.stdout == b""
    stop_daemons(project)


def test_without_the_venv_the_first_session_start_builds_it_once_in_the_background(project, tmp_path):
    # `nohup` on PATH stands in for the installer's run: it records its arguments.
    shims, record = tmp_path / "shims", tmp_path / "nohup-args"
    shims.mkdir()
    (shims / "nohup").write_text(f"#!/bin/sh\necho \"$@\" >> '{record}'\n")
    (shims / "nohup").chmod(0o755)
    ai_home = tmp_path / "ais_new"
    env = {"PATH": f"{shims}:{os.environ['PATH']}"}
    payload = json.dumps({"session_id": "s1", "hook_event_name": "SessionStart", "cwd": str(project)}).encode()
    for _ in range(2):
        done = launcher(["hook", "start"], project, ai_home, payload, env=env)
        assert done.returncode == 0 and b"SessionStart" in done.stdout
    launcher(["hook", "stop"], project, ai_home, b"{}", env=env)
    wait_for(record.exists, "the background installer", timeout=30)
    assert record.read_text().split() == ["bash", str(ROOT / "install.sh"), "--deps-only"]  # once, at start only
    assert (ai_home / "plugin-deps.log").exists()
    stop_daemons(project)


@pytest.fixture
def claude():
    path = claude_bin()
    if not path:
        unavailable("real Claude Code CLI not found: set AI_SMARTNESS_CLAUDE_BIN (tests/run.sh does)")
    return path


def test_claude_validates_the_plugin_and_the_marketplace(claude, tmp_path):
    env = dict(Sandbox(tmp_path, claude).env)
    for target in (ROOT, PLUGIN_JSON):
        done = subprocess.run([claude, "plugin", "validate", "--strict", str(target)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Validation passed" in done.stdout, done.stdout + done.stderr


def test_plugin_loaded_by_claude_captures_and_injects(claude, tmp_path):
    box = Sandbox(tmp_path, claude)
    ai_home = tmp_path / "ais_home"
    ai_home.mkdir()
    (ai_home / "plugin-deps.log").write_text("")  # an attempt already made: no venv build here
    env = dict(box.env, AI_SMARTNESS_HOME=str(ai_home))
    notes = box.write("notes.md", f"The payment retry policy uses exponential backoff capped at 5 minutes ({TOKEN}).\n")

    def run(api, prompt, n):
        out, err = tmp_path / f"c{n}.out", tmp_path / f"c{n}.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.run([claude, "-p", prompt, "--output-format", "json", "--plugin-dir", str(ROOT),
                                   "--allowedTools", f"Read {PLUGIN_RECALL}"], cwd=box.project, env=dict(env, ANTHROPIC_BASE_URL=api.url),
                                  stdin=subprocess.DEVNULL, stdout=o, stderr=e, timeout=180)
        run = ClaudeRun(proc.returncode, out.read_text(errors="replace"), err.read_text(errors="replace"))
        assert proc.returncode == 0 and run.result and run.result.get("result") == "All done.", run
        return api.bodies()

    def threads_with_token():
        done = subprocess.run([sys.executable, str(ROOT / "ai_smartness.py"), "--project", str(box.project),
                               "export"], env=env, capture_output=True, text=True, timeout=120)
        return done.returncode == 0 and any(TOKEN in s for s in json_strings(json.loads(done.stdout)))

    try:
        with FakeAnthropic([tool_use("Read", {"file_path": str(notes)}, id="toolu_notes"), "All done."]) as api:
            bodies = run(api, "Summarise the payment retry policy in notes.md", 1)
        briefing = [s for s in system_entries(bodies[0]) if BRIEFING_MARK in s]
        assert briefing and "ai_smartness" in briefing[0], system_entries(bodies[0])
        offered = [t.get("name", "") for t in bodies[0].get("tools", [])]
        assert PLUGIN_RECALL in offered, offered
        assert [r for r in tool_results(bodies[1]) if r["tool_use_id"] == "toolu_notes"]
        # The Read was captured by the plugin's PostToolUse hook, into this project's memory.
        assert wait_for(threads_with_token, "the captured Read in the memory", timeout=90)
        # Next session: the memory comes with the prompt, and through the plugin's MCP server.
        script = [tool_use(PLUGIN_RECALL, {"query": "payment retry backoff"}, id="toolu_plugin_recall"), "All done."]
        with FakeAnthropic(script) as api:
            bodies = run(api, "What is the payment retry policy backoff cap?", 2)
        memory = "\n".join(s for s in system_entries(bodies[0]) if MEMORY_MARK in s)
        assert TOKEN in memory, system_entries(bodies[0])
        recalled = [r for r in tool_results(bodies[1]) if r["tool_use_id"] == "toolu_plugin_recall"]
        assert recalled and not recalled[0]["is_error"] and TOKEN in recalled[0]["text"], tool_results(bodies[1])
    finally:
        stop_daemons(box.project, under=tmp_path)
