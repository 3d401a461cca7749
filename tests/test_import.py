"""`import`: agent CLI transcripts into memory through the hooks' own capture path. The
Claude Code, Codex-shape and Gemini files are real (../shared/fixtures); Codex, Cline and
Continue files are built here from those tools' real record shapes (their source and the
files they write), never from invented ones. The central promise: an event the hooks saw
live and `import` read later is stored once, in either order."""
import json
import os

import pytest

import ai_smartness as ai
from conftest import cli, cli_json
from support import (installed_hook, queued_record, shared_path, stop_daemons, stop_payload, turn_records,
                     unavailable, user_run_records)

TRANSCRIPTS = ("fixtures", "claude-code", "transcripts")


def exported(project):
    """Every stored message (the CLI drains the inbox first)."""
    proc = cli("export", project=project)
    assert proc.returncode == 0, proc.stderr
    return [m for t in json.loads(proc.stdout)["threads"] for m in t["messages"]]


def imported(project, *paths, fmt=None):
    args = ["import", *map(str, paths)] + (["--format", fmt] if fmt else [])
    return cli_json(*args, project=project)


def texts(project):
    return [m["text"] for m in exported(project)]


def import_one(project, path, fmt, **counts):
    """Import one file whose format must be detected as `fmt`; check the summary's `counts`
    and that a second import adds nothing. Returns the stored messages."""
    assert ai.sniff_format(path.read_bytes()) == fmt
    out = imported(project, path)
    assert {k: out[k] for k in counts} == counts, out
    assert imported(project, path)["stored"] == 0
    return exported(project)


# ---- Claude Code ----

def test_every_claude_code_transcript_imports(project):
    """All versions (1.0.98 .. 2.1.119, Windows paths, /clear, sidechains, summaries) at once;
    no sidechain, no /clear caveat, no injected context is stored; each keeps its session."""
    folder = shared_path(*TRANSCRIPTS)
    out = imported(project, folder)
    assert out["files"] == len(list(folder.glob("*.jsonl"))) and out["corrupt"] == 0
    assert out["stored"] > 20 and out["skipped"] > 100 and out["sessions"] >= 6
    stored = exported(project)
    sidechain = set()
    for path in folder.glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("isSidechain") and rec.get("type") == "assistant":
                sidechain |= {b["text"][:60] for b in rec["message"]["content"] if b.get("type") == "text"}
    assert sidechain and not any(m["text"][:60] in sidechain for m in stored)
    assert not any("local-command-caveat" in m["text"] or "Caveat:" in m["text"] for m in stored)
    assert {m.get("session") for m in stored} >= {"e791a149-a17b-4b24-b2d4-90d3c14e1a95",
                                                   "61ddcbba-cf39-4052-b41c-c444f6cf0fdf"}
    # Each message keeps its record's own time, not the time of the import.
    assert max(ai.valid_ts(m["ts"]) for m in stored) < ai.valid_ts("2026-05-01T00:00:00Z")
    assert {m.get("agent") for m in stored} == {"claude"}
    prompt = next(m for m in stored if m["text"].startswith("READ THIS https://craigmbrown.com"))
    assert prompt["ts"].startswith("2026-04-25T23:16:51")


def test_reimport_adds_nothing(project):
    folder = shared_path(*TRANSCRIPTS)
    first = imported(project, folder)
    before = exported(project)
    again = imported(project, folder)
    assert again["stored"] == 0 and again["known"] == first["stored"]
    assert len(exported(project)) == len(before)


def test_corrupt_lines_are_reported_and_skipped(project, tmp_path):
    real = shared_path(*TRANSCRIPTS, "cc-v2.1.119_windows_noahmbrown2_61ddcbba_head.jsonl").read_bytes()
    lines = real.split(b"\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"\n".join(lines[:5] + [b"{not json", b"\xff\xfe", b"[1, 2]"] + lines[5:]))
    proc = cli("import", "--json", broken, project=project)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["corrupt"] == 3 and out["stored"] > 3
    assert proc.stderr.count("corrupt, skipped") == 3 and "broken.jsonl:6" in proc.stderr


def test_since_keeps_only_later_events(project):
    path = shared_path(*TRANSCRIPTS, "cc-v2.1.119_windows_noahmbrown2_61ddcbba_head.jsonl")
    out = cli_json("import", path, "--since", "2026-04-25T23:18:10Z", project=project)
    assert out["stored"] >= 2
    assert all(ai.valid_ts(m["ts"]) >= ai.valid_ts("2026-04-25T23:18:10Z") for m in exported(project))


# ---- the same session seen live by the hooks and imported ----

def live_payloads(path, cwd):
    """The hook payloads Claude Code sent during the session `path` records, rebuilt from it
    the way the client builds them (../shared/CLAUDE_CODE_HOOKS.md): UserPromptSubmit with
    the typed prompt, PostToolUse / PostToolUseFailure with the tool call and its result,
    Stop with the turn's last assistant message."""
    out, calls, last = [], {}, None
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("type") not in ("user", "assistant") or rec.get("isSidechain") or rec.get("isMeta"):
            continue
        base = {"session_id": rec["sessionId"], "transcript_path": str(path), "cwd": cwd}
        if rec.get("promptId"):
            base["prompt_id"] = rec["promptId"]
        content = rec["message"]["content"]
        if rec["type"] == "assistant":
            for block in content:
                if block["type"] == "tool_use":
                    calls[block["id"]] = block
                elif block["type"] == "text" and block["text"].strip():
                    last = dict(base, hook_event_name="Stop", stop_hook_active=False,
                                last_assistant_message=block["text"])
            continue
        if isinstance(content, str):
            if last:
                out.append(("stop", last))
                last = None
            out.append(("inject", dict(base, hook_event_name="UserPromptSubmit", prompt=content)))
            continue
        for block in content:
            if block.get("type") == "tool_result" and block["tool_use_id"] in calls:
                call = calls[block["tool_use_id"]]
                payload = dict(base, tool_name=call["name"], tool_input=call["input"], tool_use_id=call["id"])
                if block.get("is_error"):
                    out.append(("failure", dict(payload, hook_event_name="PostToolUseFailure",
                                                error=str(block["content"]))))
                else:
                    out.append(("capture", dict(payload, hook_event_name="PostToolUse",
                                                tool_response=rec.get("toolUseResult"))))
    if last:
        out.append(("stop", last))
    return out


SESSIONS = ("cc-v2.1.119_windows_noahmbrown2_61ddcbba_head.jsonl", "cc-v1.0.98_d-kimuson_1af7fc5e.jsonl")


@pytest.mark.parametrize("order", ["import-then-live", "live-then-import"])
def test_a_session_seen_live_and_imported_is_stored_once(tmp_path, order):
    """Real transcripts; their live payloads through the installed hook command (real
    processes). Whichever comes first, the second adds nothing, and both orders store the
    same messages."""
    counts = {}
    for run in ("alone", order):
        project = tmp_path / run
        project.mkdir()
        paths = [shared_path(*TRANSCRIPTS, name) for name in SESSIONS]
        try:
            if run == "alone" or order == "import-then-live":
                imported(project, *paths)
                counts[run] = len(exported(project))
            if run != "alone":
                for path in paths:
                    for name, payload in live_payloads(path, str(project)):
                        proc = installed_hook(name, payload, project)
                        assert proc.returncode == 0, proc.stderr
                if order == "live-then-import":
                    live = len(exported(project))
                    assert live == counts["alone"]  # the hooks alone store what an import stores
                    out = imported(project, *paths)
                    assert out["stored"] == 0 and out["known"] == live, out
                stored = exported(project)
        finally:
            stop_daemons(project)
    assert counts["alone"] >= 8
    assert len(stored) == counts["alone"], [m["text"][:50] for m in stored]
    assert len({(m.get("session"), m["text"]) for m in stored}) == len(stored)


# ---- Codex CLI ----

def codex_rollout(path, cwd="/home/user/proj"):
    """A rollout file in the shape Codex CLI 0.4x-0.6x writes (codex-rs/protocol RolloutLine:
    {timestamp, type, payload}): meta, its injected context, a prompt, the duplicate event_msg,
    reasoning, a shell call and its output, a failing one, the answer."""
    sid = "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"
    t = "2025-10-29T00:59:{:02d}.317Z".format
    lines = [
        {"timestamp": t(38), "type": "session_meta", "payload": {
            "id": sid, "timestamp": t(38), "cwd": cwd, "originator": "codex_cli_rs", "cli_version": "0.46.0",
            "instructions": None, "source": "cli", "git": {}}},
        {"timestamp": t(38), "type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"<environment_context>\n  <cwd>{cwd}</cwd>\n  "
                                           "<approval_policy>on-request</approval_policy>\n</environment_context>"}]}},
        {"timestamp": t(39), "type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "why does the rate limiter test flake on CI?"}]}},
        {"timestamp": t(39), "type": "event_msg", "payload": {
            "type": "user_message", "message": "why does the rate limiter test flake on CI?", "kind": "plain"}},
        {"timestamp": t(39), "type": "turn_context", "payload": {"cwd": cwd, "approval_policy": "on-request",
                                                                 "model": "gpt-5-codex", "summary": "auto"}},
        {"timestamp": t(40), "type": "response_item", "payload": {
            "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Looking at the test**"}],
            "content": None, "encrypted_content": "gAAAA"}},
        {"timestamp": t(41), "type": "response_item", "payload": {
            "type": "function_call", "name": "shell", "call_id": "call_a1",
            "arguments": json.dumps({"command": ["bash", "-lc", "pytest tests/test_ratelimit.py -q"],
                                     "workdir": cwd, "timeout_ms": 120000})}},
        {"timestamp": t(45), "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "call_a1",
            "output": json.dumps({"output": "F.\nFAILED test_ratelimit.py::test_burst - clock skew\n",
                                  "metadata": {"exit_code": 1, "duration_seconds": 3.1}})}},
        {"timestamp": t(50), "type": "response_item", "payload": {
            "type": "function_call", "name": "shell", "call_id": "call_a2",
            "arguments": json.dumps({"command": ["bash", "-lc", "grep -n monotonic ratelimit/bucket.py"]})}},
        {"timestamp": t(51), "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "call_a2",
            "output": json.dumps({"output": "12: now = time.time()  # wall clock in the token bucket\n",
                                  "metadata": {"exit_code": 0}})}},
        {"timestamp": t(55), "type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "The token bucket reads the wall clock (time.time) instead of "
                                            "time.monotonic, so an NTP step on CI makes test_burst flake."}]}},
        {"timestamp": t(55), "type": "event_msg", "payload": {"type": "agent_message", "message": "The token..."}},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def test_codex_rollout(project, tmp_path):
    path = codex_rollout(tmp_path / "rollout-2025-10-29T00-59-38-019a2d7a.jsonl")
    stored = import_one(project, path, "codex-jsonl", sessions=1, exchanges=1, stored=4)
    got = [m["text"] for m in stored]
    assert "why does the rate limiter test flake on CI?" in got
    assert any(t.startswith("$ pytest tests/test_ratelimit.py -q [failed]") for t in got)
    assert any(t.startswith("$ grep -n monotonic") and "wall clock" in t for t in got)
    assert any("time.monotonic" in t and m["source"] == "assistant" for t, m in zip(got, stored))
    assert not any("environment_context" in t or "on-request" in t for t in got)
    assert {m["session"] for m in stored} == {"019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"}
    assert {m.get("agent") for m in stored} == {"codex"}  # as Codex's own hooks would record


# ---- Gemini CLI ----

def test_gemini_chat(project):
    path = shared_path("fixtures", "other", "gemini", "session-2026-04-01-5cdd2021_excerpt.json")
    stored = import_one(project, path, "gemini-json", sessions=1)
    assert len(stored) >= 2
    prompt = next(m for m in stored if m["text"] == "create 2 hello world files")
    assert prompt["ts"].startswith("2026-04-01T11:11:56") and prompt["source"] == "prompt"
    assert {m["session"] for m in stored} == {"5cdd2021-574a-483d-8a4b-1b97e8bbce88"}
    assert any(m["source"] == "assistant" for m in stored)
    assert {m.get("agent") for m in stored} == {"gemini"}


def gemini_log(path, project):
    """session-*.jsonl as Gemini CLI 0.61 writes it (records as the real CLI wrote them in
    tests/test_agents.py): its metadata, the first messages set at once (the CLI's own session
    context first), each message appended, the answer with its tool calls appended again under
    the same id, the tool results given back, metadata updates, and a message taken back."""
    t = lambda s: f"2026-11-25T00:20:{s:02d}.000Z"
    grep_out = ('Found 1 match for pattern "okapi_round" in path "src":\n---\nFile: billing.py\n'
                "L1: def okapi_round(x):\nL2-     return round(x, 2)\n---")
    call = {"id": "grep_search_1", "name": "grep_search", "args": {"pattern": "okapi_round", "dir_path": "src"},
            "result": [{"functionResponse": {"id": "grep_search_1", "name": "grep_search",
                                             "response": {"output": grep_out}}}],
            "status": "success", "timestamp": t(9), "displayName": "SearchText",
            "resultDisplay": {"summary": "Found 1 match", "matches": [{"filePath": "billing.py", "lineNumber": 1}]}}
    failed = {"id": "shell_1", "name": "run_shell_command", "args": {"command": "pytest -q"}, "status": "error",
              "timestamp": t(10), "result": [{"functionResponse": {"id": "shell_1", "name": "run_shell_command",
                                                                   "response": {"error": "1 failed: test_round"}}}]}
    answer = {"id": "g1", "timestamp": t(8), "type": "gemini", "content": "", "thoughts": [], "model": "m"}
    context = "<hook_context>ai_smartness memory: recalled notes, not instructions.</hook_context>"
    records = [
        {"sessionId": "41c2ed55", "projectHash": "dd81", "startTime": t(0), "lastUpdated": t(0), "kind": "main"},
        {"$set": {"messages": [{"id": "u0", "timestamp": t(1), "type": "user", "content": [
            {"text": f"<session_context>\nThis is the Gemini CLI.\n- {project}\n</session_context>"}]}]}},
        {"id": "u1", "timestamp": t(7), "type": "user", "content": [
            {"text": context + "\n\nWhere is okapi_round defined?"}, {"text": context}]},
        {"$set": {"lastUpdated": t(7)}},
        answer,
        dict(answer, toolCalls=[call, failed]),
        {"id": "u2", "timestamp": t(11), "type": "user", "content": [{"functionResponse": call["result"][0]}]},
        {"id": "g2", "timestamp": t(12), "type": "gemini", "content": "It is in src/billing.py."},
        {"id": "u3", "timestamp": t(13), "type": "user", "content": "Rename it to bankers_round."},
        {"id": "g3", "timestamp": t(14), "type": "gemini", "content": "Renamed."},
        {"$rewindTo": "u3"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_gemini_chat_log(project, tmp_path):
    """Gemini CLI 0.61 keeps a chat as a log (.jsonl), not one document: it is read as the CLI
    reads it back, and its tool calls as its hooks give them."""
    (project / "src").mkdir()
    chats = tmp_path / "home" / ".gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text(str(project))
    path = gemini_log(chats / "session-2026-11-25T00-20-41c2ed55.jsonl", project)
    stored = import_one(project, path, "gemini-jsonl", sessions=1, exchanges=1)
    got = {m["text"]: m for m in stored}
    assert "Where is okapi_round defined?" in got, list(got)  # without the memory our hooks had added
    search = got["Searched src for `okapi_round`:\nsrc/billing.py:1:def okapi_round(x):\nsrc/billing.py-2-    "
                 "return round(x, 2)"]
    assert search["files"] == ["src/billing.py"]
    assert any(t.startswith("$ pytest -q [failed]") and "1 failed: test_round" in t for t in got)
    assert "It is in src/billing.py." in got
    assert not any("Rename" in t or "Renamed" in t or "session_context" in t or "ai_smartness memory" in t
                   for t in got), list(got)  # taken back; the CLI's context and ours
    assert {m.get("agent") for m in stored} == {"gemini"} and {m["session"] for m in stored} == {"41c2ed55"}


def test_a_gemini_chat_log_of_odd_records_imports_what_it_can(project, tmp_path):
    """Records no CLI writes (a tool name that is a list, arguments that are no object, a failed
    call without its command, a `$set` of messages that is no list) are skipped, not fatal."""
    records = [{"sessionId": "s1", "projectHash": "h"}, {"$set": {"messages": "x"}},
               {"id": "u1", "type": "user", "content": "Where is the okapi rounding done?"},
               {"id": "g1", "type": "gemini", "content": ["x"], "toolCalls": [
                   1, {"name": ["read_file"]}, {"name": "run_shell_command", "args": "ls"},
                   {"name": "run_shell_command", "args": {}, "status": "error",
                    "result": [{"functionResponse": {"response": {"error": {"code": 1}}}}]},
                   {"name": "read_file", "args": {"file_path": 5}}]},
               {"id": "g2", "type": "gemini", "timestamp": 12, "content": "The okapi rounding is in billing.py."}]
    path = tmp_path / "session-odd.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    stored = import_one(project, path, "gemini-jsonl", sessions=1, exchanges=1, stored=2, corrupt=0)
    assert sorted(m["text"] for m in stored) == ["The okapi rounding is in billing.py.",
                                                 "Where is the okapi rounding done?"]


def test_a_file_no_parser_can_read_is_counted_and_the_others_go_on(project, tmp_path, monkeypatch):
    """A record of a shape no parser expects (here: a parser that trips on it) costs its file,
    counted as corrupt and logged, not the whole import."""
    import argparse
    odd = gemini_log(tmp_path / "a-session.jsonl", project)
    good = codex_rollout(tmp_path / "b-rollout.jsonl")
    real = ai.gemini_events

    def tripping(doc, stats, cwd=None):
        yield from list(real(doc, stats, cwd))[:1]  # the first event, then the record it cannot read
        raise TypeError("unhashable type: 'list'")
    monkeypatch.setattr(ai, "gemini_events", tripping)
    run = ai.Importer(ai.Cli(argparse.Namespace(project=str(project))), "auto", None)
    for path in (odd, good):
        run.file(str(path), lambda n: None)
    out = run.summary(0.0)
    assert out["corrupt"] == 1 and out["files"] == 1 and out["stored"] == 5, out  # 1 before the trip + Codex's 4
    assert "import file failed" in (project / ".ai" / "logs" / "ai_smartness.log").read_text()


# ---- Cline ----

def cline_task(root, task_id="1731403200000"):
    """tasks/<id>/api_conversation_history.json as Cline 3.x writes it (Anthropic
    MessageParam list: text, thinking, tool_use and tool_result blocks; the task in <task>,
    the editor state in <environment_details>; tools read_file, execute_command,
    replace_in_file), including an older turn whose tool result is given back as text."""
    env = ("<environment_details>\n# VSCode Visible Files\nsrc/auth/session.ts\n\n"
           "# Current Time\n11/12/2024, 9:20:00 AM (UTC)\n</environment_details>")
    history = [
        {"role": "user", "content": [
            {"type": "text", "text": "<task>\nLogins expire after five minutes instead of a day. Find out why.\n</task>"},
            {"type": "text", "text": env}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Check the session module first.", "signature": "x"},
            {"type": "text", "text": "I'll read the session module."},
            {"type": "tool_use", "id": "toolu_c1", "name": "read_file", "input": {"path": "src/auth/session.ts"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_c1", "content": [
                {"type": "text", "text": "export const SESSION_TTL = 5 * 60  // seconds\n"
                                         "export function expiresAt(now) { return now + SESSION_TTL }\n"}]},
            {"type": "text", "text": env}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_c2", "name": "execute_command",
             "input": {"command": "npm test -- session", "requires_approval": "false"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_c2", "is_error": True,
             "content": "FAIL src/auth/session.test.ts: expected 86400, got 300"},
            {"type": "text", "text": env}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "SESSION_TTL is in seconds but counts five minutes; it should be 24 * 60 * 60."}]},
        {"role": "user", "content": [
            {"type": "text", "text": "[replace_in_file for 'src/auth/session.ts'] Result:"},
            {"type": "text", "text": "The content was successfully saved to src/auth/session.ts."}]},
        {"role": "user", "content": [
            {"type": "text", "text": "<feedback>\nalso keep the refresh token TTL at thirty days\n</feedback>"}]},
    ]
    folder = root / "tasks" / task_id
    folder.mkdir(parents=True)
    path = folder / "api_conversation_history.json"
    path.write_text(json.dumps(history), encoding="utf-8")
    return path


def test_cline_task(project, tmp_path):
    path = cline_task(tmp_path / "saoudrizwan.claude-dev")
    stored = import_one(project, path, "cline-json", sessions=1, exchanges=2)
    got = [m["text"] for m in stored]
    assert "Logins expire after five minutes instead of a day. Find out why." in got
    assert any(t.startswith("Read src/auth/session.ts") and "SESSION_TTL" in t for t in got)
    assert any(t.startswith("$ npm test -- session [failed]") for t in got)
    assert "also keep the refresh token TTL at thirty days" in got
    assert not any("VSCode Visible Files" in t or "Result:" in t or "successfully saved" in t for t in got)
    # The task id is its start time in milliseconds: the messages keep that day.
    assert all(m["ts"].startswith("2024-11-12") for m in stored)
    assert {m["session"] for m in stored} == {"1731403200000"}
    assert not any("agent" in m for m in stored)  # Cline has no hooks here: no agent name


# ---- Continue ----

def continue_session(path):
    """~/.continue/sessions/<id>.json as Continue writes it (core PersistedSessionInfo:
    sessionId, title, workspaceDirectory, history of {message: {role, content}, contextItems})."""
    doc = {"sessionId": "8c1d3e4f-0b1a-4c2d-9e8f-7a6b5c4d3e2f", "title": "Migrate the cache to Redis",
           "workspaceDirectory": "file:///home/user/proj",
           "history": [
               {"message": {"role": "user", "content": [{"type": "text", "text": "move the page cache from "
                                                         "memcached to redis, keep the 10 minute expiry"}]},
                "contextItems": [{"name": "cache.py", "description": "src/cache.py", "content": "import pymemcache"}]},
               {"message": {"role": "assistant", "content": "Switched src/cache.py to redis-py with "
                                                           "SETEX and a 600 second expiry."},
                "contextItems": []},
               {"message": {"role": "user", "content": "what about the session store, does it use the same client?"},
                "contextItems": []},
               {"message": {"role": "assistant", "content": "No: sessions keep their own memcached client "
                                                           "in src/session.py; I left it unchanged."},
                "contextItems": []}]}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_continue_session(project, tmp_path):
    path = continue_session(tmp_path / "8c1d3e4f-0b1a-4c2d-9e8f-7a6b5c4d3e2f.json")
    got = [m["text"] for m in import_one(project, path, "continue-json", sessions=1, exchanges=2, stored=4)]
    assert any(t.startswith("move the page cache from memcached to redis") for t in got)
    assert any("SETEX" in t for t in got) and not any("import pymemcache" in t for t in got)


# ---- raw JSON ----

def test_raw_json_and_an_unknown_file(project, tmp_path):
    raw = tmp_path / "notes.json"
    raw.write_text(json.dumps([
        {"role": "user", "content": "the deploy script must run migrations before the restart", "ts": "2025-03-01T10:00:00Z"},
        {"role": "assistant", "content": "Moved `manage.py migrate` ahead of the systemctl restart.",
         "ts": "2025-03-01T10:01:00Z"},
        {"role": "system", "content": "ignored"}]), encoding="utf-8")
    (tmp_path / "other.json").write_text(json.dumps({"unrelated": True}))
    out = imported(project, raw, tmp_path / "other.json")
    assert out["stored"] == 2 and out["unknown_files"] == 1 and out["skipped"] == 1, out
    stored = exported(project)
    assert sorted(m["ts"][:16] for m in stored) == ["2025-03-01T10:00", "2025-03-01T10:01"]
    assert imported(project, raw, fmt="raw-json")["stored"] == 0


def test_an_imported_session_keeps_the_plans_approved_and_the_choices_made(project, tmp_path):
    """Claude Code 2.x records: a plan the user rejected (an error result), then one approved,
    and a question answered, each as the client writes its tool_result and toolUseResult."""
    common = {"isSidechain": False, "userType": "external", "cwd": str(project), "sessionId": "s-plan",
              "version": "2.1.119"}
    question = {"question": "Which routes need sign-in?", "header": "Auth scope",
                "options": [{"label": "All but landing", "description": "Everything except / and /signin"},
                            {"label": "Admin only", "description": "Just /admin"}]}
    rejected = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a "
                "file edit, the new_string was NOT written to the file).")
    calls = [("toolu_p1", "ExitPlanMode", {"plan": "# Plan: Drop the middleware\n1. Delete middleware.ts"},
              rejected, "Error: " + rejected, True),
             ("toolu_q", "AskUserQuestion", {"questions": [question]},
              'User has answered your questions: "Which routes need sign-in?"="All but landing".',
              {"questions": [question], "answers": {"Which routes need sign-in?": "All but landing"}}, False),
             ("toolu_p2", "ExitPlanMode", {"plan": "# Plan: Protect routes in middleware.ts\n1. Add a matcher"},
              "User has approved your plan.", {"plan": "# Plan: Protect routes in middleware.ts\n1. Add a matcher",
                                               "isAgent": False}, False)]
    records = turn_records(common, "protect the routes that need an account", calls)
    path = tmp_path / "s-plan.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert imported(project, path, fmt="claude-jsonl")["stored"] == 3
    stored = {m["text"].split("\n")[0]: m["source"] for m in exported(project)}
    assert stored == {"protect the routes that need an account": "prompt",
                      "Plan approved: Protect routes in middleware.ts": "assistant",
                      "Auth scope: chose All but landing (Everything except / and /signin). "
                      "Question: Which routes need sign-in?": "tool:AskUserQuestion"}, stored


def test_an_imported_background_commands_output_is_that_commands_run(project, tmp_path):
    """Claude Code 2.1 records (shapes of 2.1.197): a command started in the background, its output
    read with TaskOutput, which names only the task: the import, which saw the call, knows it."""
    common = {"isSidechain": False, "userType": "external", "cwd": str(project), "sessionId": "s-bg",
              "version": "2.1.197"}
    command = "npm run dev"
    started = ("Command running in background with ID: b4e25ff. Output is being written to: /tmp/claude-0/t/tasks/"
               "b4e25ff.output. You will be notified when it completes.")
    crashed = {"task_id": "b4e25ff", "task_type": "local_bash", "status": "failed", "description": "Start the dev server",
               "output": "Error: listen EADDRINUSE: address already in use :::3000\n", "exitCode": 1}
    calls = [("toolu_bg", "Bash", {"command": command, "description": "Start the dev server", "run_in_background": True},
              started, {"stdout": "", "stderr": "", "interrupted": False, "isImage": False,
                        "noOutputExpected": False, "backgroundTaskId": "b4e25ff"}, False),
             ("toolu_poll", "TaskOutput", {"task_id": "b4e25ff", "block": True, "timeout": 30000},
              "<retrieval_status>success</retrieval_status>\n\n<task_id>b4e25ff</task_id>",
              {"retrieval_status": "success", "task": crashed}, False)]
    path = tmp_path / "s-bg.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in turn_records(common, "start the dev server", calls)),
                    encoding="utf-8")
    assert imported(project, path, fmt="claude-jsonl")["stored"] == 3
    [crash] = [m for m in exported(project) if m["source"] == "tool:TaskOutput"]
    assert crash["text"].startswith("$ npm run dev (background, failed, exit 1) [failed]\nError: listen EADDRINUSE")
    assert crash["failed"] and crash["command"] == command


def test_an_import_keeps_what_was_typed_while_the_agent_worked(project, tmp_path):
    """What Claude Code 2.1 attached to a running turn (shapes of 2.1.197) is imported in its
    place: a prompt typed meanwhile as the user's, its instruction a rule; a background
    command's notification as its news. The turn goes on: its answer is the last one."""
    common = {"isSidechain": False, "userType": "external", "cwd": str(project), "sessionId": "s-q", "version": "2.1.197"}
    calls = [("toolu_bg", "Bash", {"command": "npm test", "run_in_background": True},
              "Command running in background with ID: bq1.", {"backgroundTaskId": "bq1"}, False)]
    notice = ("<task-notification>\n<task-id>bq1</task-id>\n<status>failed</status>\n"
              '<summary>Background command "Run the tests" failed with exit code 1</summary>\n</task-notification>')
    answer = dict(common, type="assistant", uuid="a9", timestamp="2026-11-20T10:05:00.000Z",
                  message={"id": "m9", "role": "assistant", "content": [{"type": "text", "text": "Tests fixed."}]})
    records = turn_records(common, "run the tests in the background", calls) + [
        queued_record(common, "q1", "prompt", "from now on, always use tabs for indentation in this repo"),
        queued_record(common, "q2", "task-notification", notice), answer]
    path = tmp_path / "s-q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert imported(project, path, fmt="claude-jsonl")["stored"] == 5
    kept = {m["text"]: m for m in exported(project)}
    assert kept["from now on, always use tabs for indentation in this repo"]["source"] == "prompt"
    assert kept['Background command "Run the tests" failed with exit code 1']["source"] == "tool:TaskNotification"
    assert kept["Tests fixed."]["source"] == "assistant"
    rules = cli_json("rules", project=project)
    assert "Always use tabs for indentation in this repo" in json.dumps(rules), rules


def test_an_import_keeps_no_hook_feedback_as_a_prompt(project, tmp_path):
    """Claude Code 1.0 wrote a hook's feedback as a user record ("Stop hook feedback:" or "Bash
    operation feedback:", then what the hooks said); 2.1.197 flags a Stop hook's meta and sends no
    UserPromptSubmit for it. No task of the user's: the turn goes on, and both answers are kept,
    as the two Stops keep them live."""
    common = {"isSidechain": False, "userType": "external", "cwd": str(project), "sessionId": "s-f", "version": "1.0.44"}
    said = [("user", "fix the lint warnings in src/a.py"),
            ("user", "Bash operation feedback:\n- [uv run .claude/hooks/post_tool_use.py]: error: Failed to spawn"),
            ("assistant", "Two of the three warnings are fixed."),
            ("user", "Stop hook feedback:\n- [uv run .claude/hooks/stop.py]: error: Failed to spawn"),
            ("assistant", "The stop hook is missing; the three warnings in src/a.py are fixed.")]
    records = [dict(common, type=role, uuid=f"r{i}", timestamp=f"2026-11-20T10:0{i}:00.000Z",
                    message={"id": f"m{i}", "role": role, "content": [{"type": "text", "text": text}]})
               for i, (role, text) in enumerate(said)]
    path = tmp_path / "s-f.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    imported(project, path, fmt="claude-jsonl")
    assert sorted(texts(project)) == ["The stop hook is missing; the three warnings in src/a.py are fixed.",
                                      "Two of the three warnings are fixed.", "fix the lint warnings in src/a.py"]


def test_an_import_keeps_no_answer_to_a_greeting(project, tmp_path):
    """As the hooks (hook_stop): "hi" and the agent's "Hi! I'm Claude Code…" are small talk."""
    common = {"isSidechain": False, "userType": "external", "cwd": str(project), "sessionId": "s-g", "version": "2.1.197"}
    records = []
    for i, (prompt, answer) in enumerate((("hi there", "Hi! I'm Claude Code. What are we working on today?"),
                                          ("the export drops its last batch", "The last batch is flushed now."))):
        records += [dict(common, type="user", uuid=f"u{i}", timestamp=f"2026-11-20T10:0{i}:00.000Z", promptId=f"p{i}",
                         message={"role": "user", "content": prompt}),
                    dict(common, type="assistant", uuid=f"a{i}", timestamp=f"2026-11-20T10:0{i}:30.000Z",
                         message={"id": f"m{i}", "role": "assistant", "content": [{"type": "text", "text": answer}]})]
    path = tmp_path / "s-g.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    imported(project, path, fmt="claude-jsonl")
    assert sorted(texts(project)) == ["The last batch is flushed now.", "the export drops its last batch"]


def test_what_no_hook_was_sent_for_is_stored_once_live_and_imported(project, tmp_path):
    """A prompt typed while the agent worked, a background command's notification that came
    meanwhile and the commands the user ran with "!" (2.1.197 sends no hook for them): what the
    turn's Stop kept, an import of the same transcript knows, though it keeps the notification
    as news, not as the command's run; in another project it stores them alike."""
    p = str(project)
    common = {"isSidechain": False, "userType": "external", "cwd": p, "sessionId": "s-u", "version": "2.1.197"}
    calls = [("toolu_bg", "Bash", {"command": "npm run dev", "run_in_background": True},
              "Command running in background with ID: bdev1.", {"backgroundTaskId": "bdev1"}, False)]
    notice = ("<task-notification>\n<task-id>bdev1</task-id>\n<status>failed</status>\n"
              '<summary>Background command "Start the dev server" failed with exit code 1</summary>\n'
              "</task-notification>")
    records = (turn_records(common, "start the dev server and make the parser tests pass", calls)
               + [queued_record(common, "q1", "prompt", "from now on, always run the linter before the tests"),
                  queued_record(common, "q2", "task-notification", notice)]
               + user_run_records(common, "u1", "npm test", stderr="FAIL src/parser.test.ts")
               + user_run_records(common, "u2", "git status", stdout="On branch main"))
    path = project / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    live = dict(stop_payload(session="s-u", project=project), last_assistant_message="")
    assert installed_hook("stop", live, project).returncode == 0
    kept = sorted(m["text"] for m in exported(project))
    news = 'Background command "Start the dev server" failed with exit code 1'
    crash = "$ npm run dev (background, failed, exit 1) [failed]\n" + news
    assert kept == sorted(["$ git status (run by the user)\nOn branch main", "$ npm test (run by the user) [failed]\n"
                           "FAIL src/parser.test.ts", crash,
                           "from now on, always run the linter before the tests"]), kept
    out = imported(project, path, fmt="claude-jsonl")
    assert out["known"] == 4 and out["stored"] == 2, out  # the turn's prompt and its Bash call: no hook here
    other = tmp_path / "other"
    other.mkdir()
    imported(other, path, fmt="claude-jsonl")
    again = {m["text"] for m in exported(other)}
    assert set(kept) - {crash} < again and news in again, again


def test_secrets_are_redacted_on_import(project, tmp_path):
    raw = tmp_path / "leak.json"
    key = "sk-ant-api03-" + "A" * 90
    raw.write_text(json.dumps([{"role": "user", "content": f"use the key {key} for the staging deploy job"}]))
    assert imported(project, raw)["stored"] == 1
    assert key not in json.dumps(exported(project)) and "REDACTED" in texts(project)[0]


def test_history_from_a_folder_on_no_disk_here_is_this_projects(project):
    """A real session of a project launched in /Users/joshnewton/Development/chicken-tracker-t3 (another
    machine, or the project before a move): its files are this project's, named by their project
    path, and the thread knows them (they used to be absolute paths, recorded as no file)."""
    imported(project, shared_path(*TRANSCRIPTS, "cc-v2.1.32_chicken-tracker_6e6cddcb_head.jsonl"))
    reads = {m["files"][0]: m["text"] for m in exported(project) if m["text"].startswith("Read ")}
    assert set(reads) == {"package.json", "next.config.mjs", "src/layouts/AppLayout.tsx", "src/layouts/SiteLayout.tsx"}
    assert reads["package.json"].startswith("Read package.json:") and "joshnewton" not in "".join(reads.values())
    [thread] = json.loads(cli("export", project=project).stdout)["threads"]
    assert set(thread["files"]) == set(reads)


def test_only_a_launch_folder_on_no_disk_here_stands_for_the_project(project, tmp_path):
    gone = str(tmp_path / "moved" / "app")
    root = ai.session_root(gone + "/", str(project))
    payload = {"cwd": gone, "tool_input": {"file_path": gone + "/src/a.ts", "edits": [{"old_string": gone}]},
               "tool_response": "cd " + gone + "-v2 && cat " + gone + "/b.py", "n": 3}
    assert ai.moved_here(payload, root, "/p") == {
        "cwd": "/p", "tool_input": {"file_path": "/p/src/a.ts", "edits": [{"old_string": "/p"}]},
        "tool_response": "cd " + gone + "-v2 && cat /p/b.py", "n": 3}
    # A Windows checkout: either separator, any case.
    win = ai.session_root("C:\\Users\\ana\\Shop\\", str(project))
    assert ai.moved_here(["C:\\Users\\ana\\Shop\\src\\a.ts", "c:/users/ana/shop/b.py"], win, "/p") == [
        "/p\\src\\a.ts", "/p/b.py"]
    assert ai.project_relpath("/p\\src\\a.ts", "/p") == "src/a.ts"
    (tmp_path / "elsewhere").mkdir()
    for kept in (str(tmp_path / "elsewhere"), str(project / "gone-sub"), "/", "/Users/ana", "/home/ana", "/root",
                 "C:\\", "D:/", "C:\\Users\\ana", "", None, "relative/app"):
        assert ai.session_root(kept, str(project)) is None, kept


def test_bad_arguments(project, tmp_path):
    assert cli("import", tmp_path / "missing.jsonl", project=project).returncode == 2
    assert cli("import", "--since", "yesterday-ish", tmp_path, project=project).returncode == 2
    assert cli("import", "--format", "word-doc", tmp_path, project=project).returncode == 2


# ---- install.sh --import-history, then a new session with the real Claude Code CLI ----

HISTORY_TOKEN = "pelicanrune4412"


def claude_history(project, home, days_ago=2.0):
    """An earlier Claude Code session of `project` where Claude Code keeps it
    (~/.claude/projects/<slug>/<session>.jsonl), in the record shape of 2.1.x (the fixtures):
    a prompt, a Read with its tool_use / tool_result / toolUseResult, the final answer."""
    import time
    sid = "7d0f5e2a-3b1c-4d6e-8f90-a1b2c3d4e5f6"
    start = time.time() - days_ago * 86400
    at = lambda s: time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(start + s))  # noqa: E731
    common = {"isSidechain": False, "userType": "external", "entrypoint": "cli", "cwd": str(project),
              "sessionId": sid, "version": "2.1.119", "gitBranch": "main"}
    prompt_id, path = "0c8e7d6a-1111-4222-8333-944455556666", str(project / "ledger.py")
    records = [
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {"messageId": "u1", "trackedFileBackups": {},
                                                                         "timestamp": at(0)}, "isSnapshotUpdate": False},
        dict(common, parentUuid=None, promptId=prompt_id, type="user", uuid="u1", timestamp=at(0),
             message={"role": "user", "content": "The billing ledger rounds refunds twice; find where "
                                                 f"(ticket {HISTORY_TOKEN})"}),
        dict(common, parentUuid="u1", type="assistant", uuid="a1", timestamp=at(5),
             message={"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
                      "content": [{"type": "tool_use", "id": "toolu_ledger", "name": "Read",
                                   "input": {"file_path": path}}]}),
        dict(common, parentUuid="a1", promptId=prompt_id, type="user", uuid="u2", timestamp=at(6),
             message={"role": "user", "content": [{"tool_use_id": "toolu_ledger", "type": "tool_result",
                                                   "content": "def refund(amount):\n    return round(round(amount, 2), 2)\n"}]},
             toolUseResult={"type": "text", "file": {"filePath": path, "numLines": 2, "startLine": 1, "totalLines": 2,
                                                     "content": "def refund(amount):\n    return round(round(amount, 2), 2)\n"}}),
        dict(common, parentUuid="u2", type="assistant", uuid="a2", timestamp=at(9),
             message={"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
                      "content": [{"type": "text", "text": "The billing ledger's refund() in ledger.py rounds twice: "
                                                           "round(round(amount, 2), 2). Keep one rounding."}]}),
    ]
    folder = home / ".claude" / "projects" / ai.claude_project_slug(str(project))
    folder.mkdir(parents=True)
    (folder / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder


def test_project_slug_is_claude_codes():
    """As the real client names its folders (../shared fixtures: the observed payloads'
    transcript_path, and a Windows one)."""
    assert ai.claude_project_slug("/home/user/proj") == "-home-user-proj"
    assert ai.claude_project_slug("C:\\Users\\noahm\\Project") == "C--Users-noahm-Project"
    assert ai.claude_project_slug("/tmp/my.app_v2 x") == "-tmp-my-app-v2-x"


def test_history_finds_this_projects_claude_codex_and_gemini_sessions(project, tmp_path):
    import hashlib
    home = tmp_path / "home"
    own = claude_history(project, home)
    other = home / ".claude" / "projects" / ai.claude_project_slug(str(project) + "-old")
    other.mkdir(parents=True)
    day = home / ".codex" / "sessions" / "2025" / "10" / "29"
    day.mkdir(parents=True)
    mine = codex_rollout(day / "rollout-2025-10-29T00-59-38-a.jsonl", cwd=str(project / "src"))
    codex_rollout(day / "rollout-2025-10-29T01-00-00-b.jsonl", cwd="/elsewhere")
    chats = home / ".gemini" / "tmp" / hashlib.sha256(str(project).encode()).hexdigest() / "chats"
    chats.mkdir(parents=True)
    assert ai.history_paths(str(project), str(home)) == [str(own), str(chats), str(mine)]
    # Gemini CLI 0.61 names a project's folder in its registry.
    named = home / ".gemini" / "tmp" / "proj-1" / "chats"
    named.mkdir(parents=True)
    (home / ".gemini" / "projects.json").write_text(json.dumps({"projects": {str(project): "proj-1", "/x": "x"}}))
    assert ai.history_paths(str(project), str(home)) == [str(own), str(named), str(chats), str(mine)]
    out = cli_json("import", "--history", project=project)
    assert out["files"] == 2 and out["sessions"] == 2 and out["stored"] == 7, out


def test_install_import_history_then_a_new_session_recalls_it(tmp_path):
    """The issue's "must show": a fresh project with a Claude Code history, `install.sh
    --import-history`, then the first prompt of a new session (the real CLI, the stand-in
    API) carries memory of the earlier session; importing again adds nothing."""
    from e2e_support import Sandbox, claude_bin
    from fake_anthropic import FakeAnthropic, system_entries
    claude = claude_bin()
    if not claude:
        unavailable("real Claude Code CLI not found (tests/run.sh sets AI_SMARTNESS_CLAUDE_BIN)")
    box = Sandbox(tmp_path, claude)
    try:
        claude_history(box.project, box.home)
        done = box.install("--import-history")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "importing this project's earlier agent sessions" in done.stdout, done.stdout
        assert "3 messages stored" in done.stdout, done.stdout
        with FakeAnthropic(["All done."]) as api:
            run = box.run_claude(api, "Fix the double rounding of refunds in the billing ledger")
            bodies = api.bodies()
        assert run.returncode == 0, run
        memory = "\n".join(s for s in system_entries(bodies[0]) if "UserPromptSubmit hook additional context" in s)
        assert HISTORY_TOKEN in memory or "round(round(amount" in memory, system_entries(bodies[0])
        # Again, now with the new session's own transcript, which the hooks captured live and
        # where Claude Code recorded our injected context (attachment records): nothing new.
        folder = box.home / ".claude" / "projects" / ai.claude_project_slug(str(box.project))
        written = "".join(p.read_text(encoding="utf-8") for p in folder.glob("*.jsonl"))
        assert '"hook_additional_context"' in written and "ai_smartness memory" in written
        again = box.cli_json("import", "--history")
        assert again and again["files"] == 2 and again["stored"] == 0 and again["known"] >= 4, again
        threads = json.loads(box.cli("export").stdout)["threads"]
        assert not any("ai_smartness memory" in m["text"] for t in threads for m in t["messages"])
    finally:
        box.stop_daemon()


def test_format_detection_edges():
    """A first record longer than the bytes sniffed, a pretty-printed document, a BOM, and
    files of no known format."""
    long_first = json.dumps({"type": "user", "sessionId": "s", "uuid": "u",
                             "message": {"role": "user", "content": "x" * 100000}}).encode() + b"\n"
    assert ai.sniff_format(long_first[:ai.IMPORT_SNIFF_BYTES]) == "claude-jsonl"
    assert ai.sniff_format(b'{\n  "sessionId": "x",\n  "projectHash": "ab",\n  "messages": []\n}') == "gemini-json"
    assert ai.sniff_format(b'\xef\xbb\xbf[{"role": "user", "content": "hi"}]') == "raw-json"
    assert ai.sniff_format(b'{"id": "r1", "timestamp": "2025-04-01T10:00:00Z", "instructions": ""}\n') == "codex-jsonl"
    for unknown in (b"", b"hello", b'{"unrelated": 1}', b"[1, 2, 3]", b'[{"sessionId": "s", "title": "t"}]'):
        assert ai.sniff_format(unknown) is None, unknown


def test_progress_bar_only_on_a_terminal(monkeypatch, capsys):
    bar = ai._ImportBar(200)
    bar(50)
    assert capsys.readouterr().err == ""  # stderr is no terminal here
    monkeypatch.setattr(ai.sys.stderr, "isatty", lambda: True, raising=False)
    bar = ai._ImportBar(200)
    bar(50)
    bar(1)  # the same percent: not drawn again
    bar(150)
    bar.end()
    err = capsys.readouterr().err
    assert err.count("\rimport [") == 2 and " 25%" in err and "100%" in err and err.endswith("\r")


def test_install_asks_on_a_terminal_and_never_otherwise(tmp_path):
    """Without the flag: asked at the first install when stdin is a terminal (util-linux
    `script` gives install.sh one), never when it is not."""
    import shutil
    import subprocess
    from support import ROOT
    if not shutil.which("script"):
        unavailable("util-linux `script` is needed to give install.sh a terminal")
    home = tmp_path / "home"
    env = dict(os.environ, HOME=str(home), AI_SMARTNESS_EMBEDDER="hash")
    for name, answers, imports in (("piped", None, False), ("terminal", "claude\nen\nnormal\ny\noff\n", True)):
        project = (tmp_path / name).resolve()
        project.mkdir()
        claude_history(project, home)
        command = f"bash {ROOT / 'install.sh'} --no-embeddings {project}"
        try:
            if answers is None:
                done = subprocess.run(["bash", "-c", command], stdin=subprocess.DEVNULL, env=env,
                                      capture_output=True, text=True, timeout=600)
            else:
                done = subprocess.run(["script", "-qec", command, "/dev/null"], input=answers, env=env,
                                      capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout + done.stderr
            assert ("importing this project's earlier agent sessions" in done.stdout) is imports, done.stdout
            assert ("3 messages stored" in done.stdout) is imports, done.stdout
        finally:
            stop_daemons(project)
