"""End to end: the real Claude Code CLI as the product's LLM backend (llm.backend claude-cli, set
by `install.sh --llm claude-cli`), against the stand-in Messages API (tests/fake_anthropic.py).

The product's call is made by the installed module in the project, as the daemon makes it. The
project has our hooks, a foreign hook and a project setting; HOME has a user-level hook on every
event. What must hold: the answer is parsed, the request body is redacted, no hook of any level
ran inside the call, no project setting applied, nothing of it was captured or saved as a
session; faults fall back (None), are counted and logged; a cap of N calls makes exactly N."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e_support import CLAUDE_TIMEOUT, Sandbox, claude_bin
from fake_anthropic import FakeAnthropic, http_error, huge, overloaded, request_text, slow, system_entries
from support import log_records, unavailable

SECRET = "sk-ant-api03-" + "Zq9" * 30
PROJECT_MODEL = "project-settings-model"  # what the project's settings ask for: never the product's model
TITLE = {"title": "JWT refresh token rotation", "summary": "Refactoring the rotation in auth.py."}
USER_HOOK = "import sys; open(sys.argv[1], 'a').write('hook ran\\n')"
# The installed module asking its LLM, as the daemon does: argv = data dir, [[purpose, system, user]].
ASK = """import json, sys
sys.path.insert(0, sys.argv[1])
import ai_smartness as ai
store = ai.Store(sys.argv[1])
llm = ai.LLM(store, store.config())
print(json.dumps([llm.ask_json(*call) for call in json.loads(sys.argv[2])]))
"""


@pytest.fixture
def box(tmp_path, monkeypatch):
    claude = claude_bin()
    if not claude:
        unavailable("real Claude Code CLI not found: set AI_SMARTNESS_CLAUDE_BIN (tests/run.sh does)")
    monkeypatch.setenv("PATH", os.path.dirname(claude) + os.pathsep + os.environ.get("PATH", ""))
    # The ledger's days are UTC days: a test counting today's calls must not straddle midnight.
    left = 86400 - time.time() % 86400
    if left < 300:
        time.sleep(left + 1)
    sandbox = Sandbox(tmp_path, claude)
    try:
        done = sandbox.install("--llm", "claude-cli")
        assert done.returncode == 0, "install.sh failed:\n%s\n%s" % (done.stdout, done.stderr)
        settings = sandbox.settings()
        sandbox.settings_path.write_text(json.dumps(dict(settings, model=PROJECT_MODEL)))
        user_marker = tmp_path / "user-hook.log"
        command = "'%s' -c \"%s\" '%s'" % (sys.executable, USER_HOOK, user_marker)
        hooks = {event: [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]
                 for event in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop",
                               "SessionEnd")}
        (sandbox.home / ".claude").mkdir(exist_ok=True)
        (sandbox.home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))
        sandbox.user_marker = user_marker
        yield sandbox
    finally:
        sandbox.stop_daemon()


def configure(box, **llm):
    path = box.project / ".ai" / "config.json"
    config = json.loads(path.read_text())
    config["llm"] = dict(config["llm"], **llm)
    path.write_text(json.dumps(config))
    return config["llm"]


def ask(box, api, calls):
    """The installed module's answers to `calls` ([purpose, system, user]), with the stand-in as
    the API. No INTERNAL_ENV here: the CLI's flags alone must keep every hook out."""
    env = dict(box.env, ANTHROPIC_BASE_URL=api.url, CLAUDE_PROJECT_DIR=str(box.project))
    ai_dir = str(box.project / ".ai")
    done = subprocess.run([sys.executable, "-c", ASK, ai_dir, json.dumps(calls)], cwd=box.project, env=env,
                          capture_output=True, text=True, timeout=CLAUDE_TIMEOUT * (1 + len(calls)))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def hook_contexts(body):
    """What hooks added to a request (their stdout lands in system entries with these prefixes)."""
    return [s for s in system_entries(body) if "hook additional context:" in s or "hook success:" in s]


def hook_records(box):
    return [r for r in log_records(box.project) if "hook" in r]


def test_claude_cli_answers_redacted_and_runs_no_hook(box):
    config = json.loads((box.project / ".ai" / "config.json").read_text())["llm"]
    assert config["backend"] == "claude-cli" and os.path.isabs(config["cli_path"]), config
    with FakeAnthropic(llm=[json.dumps(TITLE)]) as api:
        (answer,) = ask(box, api, [["titles", "Title this thread. Key: " + SECRET,
                                    "Thread messages: rotate the JWT refresh token. " + SECRET]])
        (body,) = api.bodies("llm")
        main_or_side = api.bodies("main") + api.bodies("side")
    assert answer == TITLE
    sent = json.dumps(body)
    assert SECRET not in sent and sent.count("[REDACTED") >= 2, sent[:2000]
    assert "Title this thread" in sent and not body.get("tools")
    assert body["model"].startswith("claude-haiku"), body["model"]  # not the project's model
    assert not main_or_side, "the CLI asked something else: %r" % main_or_side
    # Nothing ran or was kept: no hook of any level, no capture, no session transcript.
    assert not box.user_marker.exists() and not box.marker_lines()
    assert not hook_records(box), hook_records(box)
    assert not hook_contexts(body), system_entries(body)  # no hook context
    assert not list((box.project / ".ai" / "inbox").glob("*.json"))
    assert not list((box.project / ".ai" / "db" / "threads").glob("*.json"))
    assert not list((box.home / ".claude" / "projects").rglob("*.jsonl"))
    status = box.cli_json("status")["llm"]
    assert status["today"]["calls"] == 1 and status["today"]["tokens"] > 0 and status["last_call"]["ok"]

    # The control: an ordinary session in the same project runs those hooks and that setting.
    with FakeAnthropic(["All done."]) as api:
        run = box.run_claude(api, "What does auth.py do with refresh tokens?")
        assert run.returncode == 0, run
        first = api.bodies()[0]
    assert first["model"] == PROJECT_MODEL and box.user_marker.exists()
    assert any("SessionStart hook additional context" in s for s in system_entries(first))


def test_claude_cli_faults_fall_back_and_a_cap_of_n_makes_n_calls(box):
    faults = [http_error(429), overloaded(), http_error(500), slow(40, json.dumps(TITLE)), "Sure, here it is.",
              huge(600000)]
    # Generous: on a loaded machine the CLI's own start takes seconds; only the slow answer passes it.
    configure(box, timeout_seconds=15, max_calls_per_day=len(faults), max_calls_per_capture=0,
              failure_pause_seconds=0)

    def script(body):  # call i asks about "thread i": its fault whatever came before
        i = int(re.search(r"thread (\d+)", request_text(body)).group(1))
        return faults[i] if i < len(faults) else json.dumps(TITLE)
    with FakeAnthropic(llm=script) as api:
        answers = ask(box, api, [["titles", "Title this thread.", "thread %d" % i] for i in range(len(faults) + 3)])
        asked = sorted({int(re.search(r"thread (\d+)", request_text(b)).group(1)) for b in api.bodies("llm")})
    assert answers == [None] * (len(faults) + 3)
    assert asked == list(range(len(faults))), "a cap of %d calls asked about threads %s" % (len(faults), asked)
    failed = [r for r in log_records(box.project) if r.get("msg") == "llm call failed: the heuristics answer"]
    errors = [r["error"] for r in failed]
    assert len(failed) == len(faults), errors
    # A huge answer: over the size limit, or cut short by the CLI itself (node may exit before a
    # large stdout is flushed to the pipe): either way no answer.
    for expected, error in zip(["429", "529", "500", "timed out", "no JSON", ("bytes", "without a JSON")], errors):
        assert any(e in error for e in ([expected] if isinstance(expected, str) else expected)), (expected, error)
    health = box.cli_json("health")
    llm = health["llm"]
    assert llm["today"]["calls"] == len(faults) and llm["today"]["failures"] == len(faults)
    assert llm["capped"] == "max_calls_per_day" and llm["left"]["calls"] == 0
    assert any("max_calls_per_day" in w for w in health["warnings"]), health["warnings"]
    assert any("failed calls" in w for w in health["warnings"]), health["warnings"]
    assert not box.user_marker.exists() and not hook_records(box)


def test_guards_hold_even_where_a_client_runs_our_hooks(box, monkeypatch):
    """Belt and braces, for a `claude` that would run hooks anyway: with the product's
    environment marker our hooks do nothing (the foreign and user-level hooks still run), and
    without it a prompt that starts with the product's marker is not captured."""
    import ai_smartness as ai
    prompt = ai.LLM_PROMPT_MARKER + "\nTitle this thread: rotate the JWT refresh token."
    monkeypatch.setenv(ai.INTERNAL_ENV, "1")
    with FakeAnthropic(["All done."]) as api:
        assert box.run_claude(api, prompt).returncode == 0
        (first,) = api.bodies("llm")  # the stand-in sees the marker: answered as the product's call
    assert box.user_marker.exists()  # hooks ran...
    assert not hook_contexts(first), system_entries(first)  # ...ours said nothing
    monkeypatch.delenv(ai.INTERNAL_ENV)
    with FakeAnthropic(["All done."]) as api:
        assert box.run_claude(api, prompt).returncode == 0
        (first,) = api.bodies("llm")
    assert any("SessionStart hook additional context" in s for s in system_entries(first))
    box.cli("status")  # drains the inbox
    kept = {str(x): x.read_text() for x in (box.project / ".ai").rglob("*.json")}
    assert not [name for name, text in kept.items() if "rotate the JWT refresh token" in text], kept
