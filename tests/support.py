"""What every test file shares: paths, the event<->hook map, running a hook as installed and
checking its output against the contract, polling, stopping daemons, hook payloads, and the
fixtures that come from ../shared.

Imported by conftest.py, the test files and e2e_support.py. It puts the repo root and tests/
on sys.path itself, so `import ai_smartness` works wherever it is imported from. The module is
reached only through a few names (HOOKS, Store, data_dir_of, daemon_alive, daemon_info,
stop_daemon): when those change, this file changes, not the tests."""
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "ai_smartness.py"
SHARED = ROOT.parent / "shared"
for _path in (ROOT, Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import ai_smartness as mod  # noqa: E402  (needs the sys.path above)

# Generous: a loaded CI machine can be slow, and a passing run never waits this long.
DEADLINE = 60.0
SESSION = "11111111-2222-3333-4444-555555555555"


# ---- the hooks, as the module declares them ----

def hook_events():
    """{Claude Code event: our hook name}, read from the module's own declaration of its hooks:
    the one place to change when that declaration changes shape."""
    return {h.event: h.name for h in mod.HOOKS.values()}


def event_hooks():
    """{our hook name: Claude Code event}."""
    return {name: event for event, name in hook_events().items()}


# The command settings.template.json installs, with the module taken from this checkout.
INSTALLED = ["-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import ai_smartness; "
             "ai_smartness.hook_command(sys.argv[2:])", str(ROOT)]
# Top-level keys Claude Code accepts from a command hook.
TOP_KEYS = {"hookSpecificOutput", "continue", "stopReason", "suppressOutput", "systemMessage", "decision", "reason"}


def installed_hook(name, payload, project, env=None, timeout=DEADLINE):
    """Run a hook as Claude Code does: the installed command, payload on stdin, project in
    CLAUDE_PROJECT_DIR. Returns the CompletedProcess (bytes)."""
    full_env = dict(os.environ, CLAUDE_PROJECT_DIR=str(project), **(env or {}))
    return subprocess.run([sys.executable, *INSTALLED, "hook", name], input=as_stdin(payload),
                          capture_output=True, env=full_env, timeout=timeout)


def check_contract(out, event):
    """stdout is empty (None), or exactly one JSON object Claude Code accepts for `event` (returned)."""
    if not out:
        return None
    assert out.startswith("{"), out[:200]
    doc = json.loads(out)
    assert isinstance(doc, dict) and set(doc) <= TOP_KEYS, doc
    spec = doc.get("hookSpecificOutput")
    if spec is not None:
        assert spec.get("hookEventName") == event, (event, doc)
        if "additionalContext" in spec:
            assert isinstance(spec["additionalContext"], str) and len(spec["additionalContext"]) < 10000
        if event == "PreToolUse":
            assert spec.get("permissionDecision") in ("allow", "deny", "ask", None)
    assert doc.get("decision") != "block" or event == "Stop"
    return doc


def log_records(project):
    path = Path(project) / ".ai" / "logs" / "ai_smartness.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def failures(project):
    """Logged hook failures. A hook over its time budget is late, not failed: the machine's
    load decides that, and what it journaled is still checked by the tests."""
    return [r for r in log_records(project) if r["msg"] == "hook failed"]


def over_budget(project, name):
    """Log records of hook `name` answering nothing because its time budget ran out."""
    return [r for r in log_records(project)
            if r["msg"] == "hook over its time budget; answered nothing" and r.get("hook") == name]


def check_prompt_answer(out, project):
    """An inject hook's stdout: its context, or nothing only when the budget ran out (it is
    counted from process start, so a loaded machine can spend it all). The prompt is
    journaled before the budget can end the hook: callers check that it is stored."""
    doc = check_contract(out.decode("utf-8") if isinstance(out, bytes) else out, "UserPromptSubmit")
    assert doc is not None or over_budget(project, "inject"), "inject answered nothing, and not for lack of time"
    return doc


# ---- missing prerequisites ----

def unavailable(reason):
    """A prerequisite is missing: skip with the reason here, fail under CI, where a skip would
    hide that the test never ran."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: this must not skip)")
    pytest.skip(reason, allow_module_level=True)  # in a test, or for a whole module


def shared_path(*parts):
    """A path under ../shared (real Claude Code fixtures), or unavailable() when absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        unavailable(f"shared fixtures absent: {path}")
    return path


# ---- polling ----

def wait_for(predicate, what=None, timeout=DEADLINE, interval=0.05):
    """Poll predicate() until it returns something truthy, and return that. At the deadline,
    fail the test with "timed out waiting for <what>"; without `what`, return the last falsy
    value instead (for clean-up paths that must not fail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            if what is not None:
                pytest.fail(f"timed out waiting for {what}")
            return value
        time.sleep(interval)


# ---- daemons ----

def store_of(project):
    return mod.Store(mod.data_dir_of(str(project)))


def daemon_pids(under):
    """Live (not zombie) `daemon run` processes whose argv names a path under `under`, from /proc."""
    top, out = str(under).encode(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and b"run" in argv and b"daemon" in argv and any(
                a == top or a.startswith(top + b"/") for a in argv):
            out.append(int(entry))
    return out


def scratch_project(tmp_path, name):
    """For a fixture to `yield from`: a new folder tmp_path/name; afterwards no daemon may be
    left under tmp_path (one a hook of the test started included)."""
    path = tmp_path / name
    path.mkdir()
    yield path
    assert stop_daemons(path, under=tmp_path), "a daemon outlived its test"


def stop_daemons(*projects, under=None, timeout=30.0):
    """Stop the daemon of each project (asked, then SIGTERM by the module's own stop_daemon),
    then SIGKILL any `daemon run` process left under `under` (a test's tmp_path: daemons of
    projects the test did not name). In-process: no CLI process per project. True when no
    daemon is left."""
    for project in projects:
        if not (Path(project) / ".ai").is_dir():
            continue
        store = store_of(project)
        # A hook may have spawned a daemon that has not written daemon.json yet: its run lock
        # is held from the spawn on, so wait on the lock rather than on the status file.
        deadline = time.monotonic() + timeout
        while mod.daemon_alive(store) and time.monotonic() < deadline:
            # One that has not bound its socket yet cannot hear "stop": it writes daemon.json
            # once bound, so wait for that rather than for stop_daemon's fallback SIGTERM.
            wait_for(lambda: mod.daemon_info(store).get("pid") or not mod.daemon_alive(store), timeout=5)
            mod.stop_daemon(store, timeout=2.0)
    for pid in daemon_pids(under) if under is not None else []:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if under is not None and not wait_for(lambda: not daemon_pids(under), timeout=10):
        return False
    return not any((Path(p) / ".ai").is_dir() and mod.daemon_alive(store_of(p)) for p in projects)


# ---- hook payloads: one factory per event, shaped like the real client's ----
# The client gives every tool call an id of its own, and the memory stores one capture per id.
_TOOL_USE_IDS = itertools.count(1)


def _base(event, session=SESSION, project=None):
    cwd = str(project) if project is not None else "/x"
    transcript = str(Path(project) / "t.jsonl") if project is not None else "/nonexistent/t.jsonl"
    return {"session_id": session, "transcript_path": transcript, "cwd": cwd, "hook_event_name": event}


def start_payload(source="startup", session=SESSION, project=None):
    return dict(_base("SessionStart", session, project), source=source)


def prompt_payload(text, session=SESSION, project=None):
    return dict(_base("UserPromptSubmit", session, project), prompt=text)


def read_payload(path, session=SESSION, project=None):
    """PreToolUse of a Read: a recall when `path` is under .ai/recall/."""
    return dict(_base("PreToolUse", session, project), tool_name="Read", tool_input={"file_path": path},
                tool_use_id="toolu_1")


def post_payload(tool, tool_input, tool_response, session=SESSION, project=None):
    return dict(_base("PostToolUse", session, project), tool_name=tool, tool_input=tool_input,
                tool_response=tool_response, tool_use_id=f"toolu_{next(_TOOL_USE_IDS):04d}", duration_ms=5)


def turn_records(common, prompt, calls):
    """Claude Code transcript records of one turn, as the client writes them: the prompt, then per
    call (id, tool name, input, the tool_result's content, the client's toolUseResult, is_error)
    the assistant's tool_use and the user record that carries its result. `common`: the fields
    every record has (sessionId, cwd, version...)."""
    records = [dict(common, type="user", uuid="u0", timestamp="2026-11-20T10:00:00.000Z", promptId="p1",
                    message={"role": "user", "content": prompt})]
    for i, (cid, name, inp, content, result, error) in enumerate(calls):
        records += [dict(common, type="assistant", uuid=f"a{i}", timestamp=f"2026-11-20T10:{i + 1:02d}:00.000Z",
                         message={"id": f"m{i}", "role": "assistant", "content": [
                             {"type": "tool_use", "id": cid, "name": name, "input": inp}]}),
                    dict(common, type="user", uuid=f"r{i}", timestamp=f"2026-11-20T10:{i + 1:02d}:30.000Z",
                         promptId="p1", toolUseResult=result, sourceToolAssistantUUID=f"a{i}",
                         message={"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": cid, "content": content, "is_error": error}]})]
    return records


def queued_record(common, uid, mode, text):
    """A transcript record of an input queued while the agent worked, as Claude Code 2.1.197
    attaches it to the running turn: a prompt the user typed (mode "prompt"), a background
    task's notification ("task-notification")."""
    return dict(common, type="attachment", uuid=uid, parentUuid="r0", timestamp="2026-11-20T10:01:40.000Z",
                attachment={"type": "queued_command", "prompt": text, "commandMode": mode,
                            "timestamp": "2026-11-20T10:01:40.000Z"})


def user_run_records(common, uid, command, stdout="", stderr=""):
    """The transcript records of a command the user ran with "!" at Claude Code 2.1.197's
    prompt: its line, then its output (whole in stderr when it failed)."""
    return [dict(common, type="user", uuid=uid, parentUuid="a0", timestamp="2026-11-20T10:03:00.000Z",
                 message={"role": "user", "content": f"<bash-input>{command}</bash-input>"}),
            dict(common, type="user", uuid=uid + "-out", parentUuid=uid, timestamp="2026-11-20T10:03:01.000Z",
                 message={"role": "user", "content": f"<bash-stdout>{stdout}</bash-stdout><bash-stderr>{stderr}"
                                                     "</bash-stderr>"})]


def bash_payload(marker, i=0, session=SESSION, project=None):
    """A PostToolUse of Bash shaped like fixtures/PostToolUse_Bash.json, carrying `marker`."""
    return dict(post_payload("Bash", {"command": f"python -m pytest tests/test_parser_{i}.py",
                                      "description": f"run suite {i}"},
                             {"stdout": f"collected 12 items; parser regression {marker} fixed in tokenizer "
                                        f"stage {i}", "stderr": "", "interrupted": False, "isImage": False},
                             session, project), duration_ms=97)


def failure_payload(command="npm test", error="Exit code 1\nFAIL src/app.test.ts", session=SESSION, project=None):
    """A PostToolUseFailure of Bash shaped like fixtures/PostToolUseFailure.json."""
    return dict(_base("PostToolUseFailure", session, project), tool_name="Bash", tool_input={"command": command},
                tool_use_id=f"toolu_{next(_TOOL_USE_IDS):04d}", error=error, is_interrupt=False, duration_ms=40)


def stop_payload(message=None, transcript=None, active=False, session=SESSION, project=None):
    payload = dict(_base("Stop", session, project), stop_hook_active=active)
    if transcript is not None:
        payload["transcript_path"] = str(transcript)
    if message is not None:
        payload["last_assistant_message"] = message
    return payload


def precompact_payload(transcript=None, trigger="manual", instructions="", session=SESSION, project=None):
    payload = dict(_base("PreCompact", session, project), trigger=trigger, custom_instructions=instructions)
    if transcript is not None:
        payload["transcript_path"] = str(transcript)
    return payload


def end_payload(reason="exit", session=SESSION, project=None):
    return dict(_base("SessionEnd", session, project), reason=reason)


# One ordinary payload per event: generated suites start from these.
PAYLOADS = {
    "SessionStart": start_payload,
    "UserPromptSubmit": lambda **kw: prompt_payload("how does the tokenizer split identifiers", **kw),
    "PreToolUse": lambda **kw: read_payload(".ai/recall/tokenizer", **kw),
    "PostToolUse": lambda **kw: bash_payload("tokenizermarker", **kw),
    "PostToolUseFailure": failure_payload,
    "Stop": lambda **kw: stop_payload("The tokenizer now splits identifiers on case changes.", **kw),
    "PreCompact": precompact_payload,
    "SessionEnd": end_payload,
}


def payload_for(event, **kw):
    """An ordinary payload for `event` (a Claude Code event or our hook name)."""
    return PAYLOADS[event_hooks().get(event, event)](**kw)


def as_stdin(payload):
    """A payload as hook stdin bytes; str and bytes pass as they are (bad-input tests)."""
    data = payload if isinstance(payload, (str, bytes)) else json.dumps(payload)
    return data.encode() if isinstance(data, str) else data
