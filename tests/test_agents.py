"""Codex CLI and Gemini CLI: their adapters (payloads in, answers out), one memory whichever
agent wrote it, `install.sh --agent`, and the real CLIs (npm packages installed by
tests/run.sh) run against local stand-ins of their model APIs (tests/fake_agents_api.py).

The payloads below were recorded from the real CLIs (Codex CLI 0.169.0, Gemini CLI 0.61.0)
against those stand-ins; paths and ids are shortened."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli, cli_json
from e2e_support import INSTALL_SH
from fake_agents_api import FakeGemini, FakeResponses, request_text
from support import ROOT, SCRIPT, as_stdin, post_payload, prompt_payload, shared_path, stop_daemons, unavailable

import ai_smartness as mod

CLI_TIMEOUT = 180


# ---- recorded payloads ----

def codex_payload(event, project, **fields):
    """A Codex CLI 0.169 hook payload, as recorded (PreToolUse and PostToolUse add tool_*)."""
    base = {"session_id": "01a20a46-0bc3-75f3", "turn_id": "01a20a46-0be7-7c33",
            "transcript_path": "/home/u/.codex/sessions/rollout-01a20a46.jsonl", "cwd": str(project),
            "hook_event_name": event, "model": "gpt-5.2", "permission_mode": "default"}
    if event == "SessionStart":
        del base["turn_id"]
    return dict(base, **fields)


def gemini_payload(event, project, **fields):
    """A Gemini CLI 0.61 hook payload, as recorded."""
    return dict({"session_id": "fe8a5b75-f7cf-4f60", "transcript_path": "/home/u/.gemini/tmp/p/chats/s.jsonl",
                 "cwd": str(project), "hook_event_name": event, "timestamp": "2026-11-23T21:18:26.966Z"}, **fields)


def agent_hook(agent, name, payload, project):
    """Run `hook --agent AGENT NAME` as the installed command does; returns stdout (str)."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--project", str(project), "hook", "--agent", agent, name],
                          input=as_stdin(payload), capture_output=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc
    return proc.stdout.decode("utf-8")


def stored(project):
    """Every stored message (the CLI drains the inbox first)."""
    cli_json("threads", "--status", "all", project=project)
    export = json.loads(cli("export", project=project).stdout)
    return [m for t in export["threads"] for m in t["messages"]]


# ---- the registry ----

def test_every_agent_event_names_a_hook_and_its_template_installs_exactly_those():
    assert mod.AGENTS[mod.NATIVE_AGENT].events == {h.event: h.name for h in mod.HOOKS.values()}
    for name, adapter in mod.AGENTS.items():
        assert set(adapter.events.values()) <= set(mod.HOOKS), name
        assert set(adapter.tools.values()) <= set(mod.TOOL_ORIGINS) | mod.PLAN_TOOLS, name
        if name == mod.NATIVE_AGENT:
            continue
        hooks = json.loads((ROOT / f"{name}.template.json").read_text())["hooks"]
        installed = {event: group["hooks"][0]["command"].split(" hook ")[1] for event, [group] in hooks.items()}
        assert installed == {e: f"--agent {name} {h} # ai_smartness" for e, h in adapter.events.items()}
        # A hook on tool events runs only for the tools the adapter knows.
        for event, [group] in hooks.items():
            if adapter.events[event] in ("pretool", "capture"):
                assert set(group["matcher"].split("|")) <= set(adapter.tools), (name, event)


def test_hook_help_names_the_agents(run_cli):
    proc = run_cli("hook", "--help")
    assert proc.returncode == 0 and "--agent" in proc.stdout and "gemini" in proc.stdout


# ---- Codex CLI ----

def test_recorded_codex_payloads_have_the_fields_of_its_published_schemas(tmp_path):
    folder = shared_path("fixtures", "other", "codex", "hook-input-schemas")
    samples = {"user-prompt-submit": codex_payload("UserPromptSubmit", tmp_path, prompt="hi"),
               "post-tool-use": codex_payload("PostToolUse", tmp_path, tool_name="Bash", tool_input={"command": "ls"},
                                              tool_response="a\n", tool_use_id="c1"),
               "stop": codex_payload("Stop", tmp_path, stop_hook_active=False, last_assistant_message="Done.")}
    for name, payload in samples.items():
        schema = json.loads((folder / f"{name}.command.input.schema.json").read_text())
        assert set(schema["required"]) == set(payload), name
        assert payload["hook_event_name"] == schema["properties"]["hook_event_name"]["const"]


def test_codex_hooks_store_prompts_commands_and_answers_with_their_agent(proj):
    (proj / "notes.txt").write_text("the wombat cache\n")
    out = agent_hook("codex", "SessionStart", codex_payload("SessionStart", proj, source="startup"), proj)
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    out = agent_hook("codex", "UserPromptSubmit", codex_payload(
        "UserPromptSubmit", proj, prompt="Why does the wombat cache evict entries too early?"), proj)
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert agent_hook("codex", "PostToolUse", codex_payload(
        "PostToolUse", proj, tool_name="Bash", tool_input={"command": "cat notes.txt"},
        tool_response="the wombat cache keeps 64 entries\n", tool_use_id="c1"), proj) == ""
    assert agent_hook("codex", "PostToolUse", codex_payload(
        "PostToolUse", proj, tool_name="apply_patch",
        tool_input={"command": "*** Begin Patch\n*** Update File: cache.py\n@@\n-SIZE = 64\n+SIZE = 256\n*** End Patch"},
        tool_response="Success. Updated the following files:\nM cache.py\n", tool_use_id="c2"), proj) == ""
    assert agent_hook("codex", "Stop", codex_payload(
        "Stop", proj, stop_hook_active=False, last_assistant_message="The wombat cache now keeps 256 entries."),
        proj) == ""
    by_text = {m["text"]: m for m in stored(proj)}
    assert by_text["Why does the wombat cache evict entries too early?"]["agent"] == "codex"
    assert by_text["$ cat notes.txt\nthe wombat cache keeps 64 entries"]["agent"] == "codex"
    assert any(t.startswith("Edited cache.py:") and "+SIZE = 256" in t for t in by_text)
    assert by_text["The wombat cache now keeps 256 entries."]["source"] == "assistant"
    # The turn id groups a turn's captures, as Claude Code's prompt_id does.
    assert {m.get("turn") for m in by_text.values()} == {"01a20a46-0be7-7c33"}


def test_codex_pretool_passes_every_other_command_untouched(proj):
    for command in ("ls -la", "cat notes.txt", "cat 'unclosed"):
        payload = codex_payload("PreToolUse", proj, tool_name="Bash", tool_input={"command": command}, tool_use_id="c")
        assert agent_hook("codex", "PreToolUse", payload, proj) == ""


def test_a_memory_written_from_claude_code_is_recalled_from_codex(proj):
    """Claude Code's hooks write it; Codex CLI's prompt gets it injected, and its `cat
    .ai/recall/<query>` is denied with the recall as the reason the model reads."""
    seed_claude_memory(proj)
    assert [m["agent"] for m in stored(proj)] == ["claude"]
    out = agent_hook("codex", "UserPromptSubmit", codex_payload(
        "UserPromptSubmit", proj, prompt="How are invoices rounded, the okapi rule?"), proj)
    assert "okapi" in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    payload = codex_payload("PreToolUse", proj, tool_name="Bash", tool_input={"command": "cat .ai/recall/okapi"},
                            tool_use_id="c3")
    spec = json.loads(agent_hook("codex", "PreToolUse", payload, proj))["hookSpecificOutput"]
    assert spec["permissionDecision"] == "deny"
    assert "okapi_round" in spec["permissionDecisionReason"]
    # The Codex prompt is stored beside Claude Code's capture, in the one memory.
    assert sorted(m["agent"] for m in stored(proj)) == ["claude", "codex"]


# ---- Gemini CLI ----

def test_gemini_hooks_translate_events_tools_and_answers(proj):
    (proj / "notes.txt").write_text("the numbat index\n")
    out = agent_hook("gemini", "SessionStart", gemini_payload("SessionStart", proj, source="startup"), proj)
    assert "additionalContext" in json.loads(out)["hookSpecificOutput"]
    # Non-interactive, Gemini CLI puts the briefing before the prompt: it is not the user's words.
    out = agent_hook("gemini", "BeforeAgent", gemini_payload(
        "BeforeAgent", proj, prompt="<hook_context>Memory of this project ...</hook_context>\n\n"
                                    "Rebuild the numbat index from scratch please"), proj)
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "BeforeAgent"
    for tool, tool_input, response in [
            ("read_file", {"file_path": "notes.txt"}, {"llmContent": "the numbat index\n", "returnDisplay": ""}),
            ("run_shell_command", {"command": "ls"},
             {"llmContent": "<untrusted_context>\nOutput: notes.txt numbat.db\nProcess Group PGID: 22475\n"
                            "</untrusted_context>", "returnDisplay": "notes.txt"}),
            ("read_file", {"file_path": "gone.txt"},
             {"llmContent": "Could not read file.", "returnDisplay": "File not found.",
              "error": {"message": "File not found: gone.txt", "type": "file_not_found"}}),
            ("update_topic", {"title": "numbat"}, {"llmContent": "ok", "returnDisplay": ""})]:
        payload = gemini_payload("AfterTool", proj, tool_name=tool, tool_input=tool_input, tool_response=response)
        assert agent_hook("gemini", "AfterTool", payload, proj) == ""
    assert agent_hook("gemini", "AfterAgent", gemini_payload(
        "AfterAgent", proj, prompt="Rebuild the numbat index", prompt_response="The numbat index was rebuilt.",
        stop_hook_active=False), proj) == ""
    texts = {m["text"]: m["agent"] for m in stored(proj)}
    assert texts == {"Rebuild the numbat index from scratch please": "gemini",
                     "Read notes.txt:\nthe numbat index": "gemini",
                     "$ ls\nnotes.txt numbat.db": "gemini",
                     "The numbat index was rebuilt.": "gemini"}
    payload = gemini_payload("BeforeTool", proj, tool_name="read_file", tool_input={"file_path": ".ai/recall/numbat"})
    doc = json.loads(agent_hook("gemini", "BeforeTool", payload, proj))
    assert doc["decision"] == "deny" and "numbat" in doc["reason"] and "(gemini)" in doc["reason"]
    payload = gemini_payload("BeforeTool", proj, tool_name="read_file", tool_input={"file_path": "notes.txt"})
    assert agent_hook("gemini", "BeforeTool", payload, proj) == ""


def test_gemini_grep_search_is_kept_as_a_search_of_the_project(proj):
    """Gemini CLI's grep_search answers "File: <path>" then "L<n>: <line>", paths from the folder
    searched: kept as Claude Code's Grep is, with project paths; nothing found is not kept."""
    (proj / "src").mkdir()
    found = ('Found 2 matches for pattern "okapi_round" in path "src":\n---\nFile: billing.py\n'
             'L3: def okapi_round(x):\nL4- return round(x, 2)\n---\nFile: api/view.py\nL9: total = okapi_round(t)\n---')
    for tool_input, text in (({"pattern": "okapi_round", "dir_path": "src"}, found),
                             ({"pattern": "numbat"}, 'No matches found for pattern "numbat" in the workspace directory.'),
                             ({"pattern": "okapi", "names_only": True},
                              'Found 1 files with matches for pattern "okapi" in the workspace directory:\nsrc/billing.py')):
        payload = gemini_payload("AfterTool", proj, tool_name="grep_search", tool_input=tool_input,
                                 tool_response={"llmContent": text, "returnDisplay": {"summary": "x"}})
        assert agent_hook("gemini", "AfterTool", payload, proj) == ""
    searches = sorted((m["text"], m.get("files")) for m in stored(proj))
    assert searches == [
        ("Searched src for `okapi_round`:\nsrc/billing.py:3:def okapi_round(x):\nsrc/billing.py-4-return round(x, 2)\n"
         "src/api/view.py:9:total = okapi_round(t)", ["src/billing.py", "src/api/view.py"]),
        ("Searched the project for `okapi`:\nsrc/billing.py", ["src/billing.py"])]


def test_gemini_command_that_exits_non_zero_is_kept_as_failed(proj):
    """Gemini CLI's AfterTool for a shell command says "Exit Code: N" when N is not 0 (no
    PostToolUseFailure): kept as Claude Code's failure is; exit 0 says nothing of the kind."""
    for command, text in (("pytest -q", "Output: 1 failed: test_round\nExit Code: 1\nProcess Group PGID: 7"),
                          ("ls", "Output: README.md\nProcess Group PGID: 8")):
        payload = gemini_payload("AfterTool", proj, tool_name="run_shell_command", tool_input={"command": command},
                                 tool_response={"llmContent": text, "returnDisplay": text})
        assert agent_hook("gemini", "AfterTool", payload, proj) == ""
    got = sorted((m["text"], bool(m.get("failed"))) for m in stored(proj))
    assert got == [("$ ls\nREADME.md", False), ("$ pytest -q [failed]\n1 failed: test_round\nExit Code: 1", True)]


def test_gemini_write_todos_is_the_task_list_the_next_briefing_names(proj):
    agent_hook("gemini", "BeforeAgent", gemini_payload("BeforeAgent", proj, prompt="Port the numbat index to sqlite"),
               proj)
    todos = [{"description": "Write the sqlite schema", "status": "completed"},
             {"description": "Move the numbat loader", "status": "in_progress"},
             {"description": "Drop the old index", "status": "cancelled"}]
    payload = gemini_payload("AfterTool", proj, tool_name="write_todos", tool_input={"todos": todos},
                             tool_response={"llmContent": "Successfully updated the todo list.", "returnDisplay": ""})
    assert agent_hook("gemini", "AfterTool", payload, proj) == ""
    out = agent_hook("gemini", "SessionStart", gemini_payload("SessionStart", proj, source="startup",
                                                               session_id="next"), proj)
    text = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "Open tasks: Move the numbat loader" in text and "schema" not in text and "Drop" not in text, text
    assert [m["text"] for m in stored(proj)] == ["Port the numbat index to sqlite"]


def test_gemini_session_fixture_tool_calls_are_captured_only_when_they_worked(proj):
    """The recorded session's tools (../shared/fixtures/other/gemini): a write_file that failed
    and a tool we do not capture leave no memory; its prompt does."""
    session = json.loads(shared_path("fixtures", "other", "gemini",
                                     "session-2026-04-01-5cdd2021_excerpt.json").read_text())
    for msg in session["messages"]:
        if msg["type"] == "user":
            prompt = " ".join(part["text"] for part in msg["content"])
            agent_hook("gemini", "BeforeAgent", gemini_payload("BeforeAgent", proj, prompt=prompt), proj)
        for call in msg.get("toolCalls", []):
            response = call["result"][0]["functionResponse"]["response"]
            tool_response = {"llmContent": response.get("output", ""), "returnDisplay": call.get("resultDisplay", "")}
            if "error" in response:
                tool_response["error"] = {"message": response["error"]}
            agent_hook("gemini", "AfterTool", gemini_payload("AfterTool", proj, tool_name=call["name"],
                                                             tool_input=call["args"], tool_response=tool_response), proj)
    assert [(m["text"], m["agent"]) for m in stored(proj)] == [("create 2 hello world files", "gemini")]


def test_an_unknown_agent_or_event_is_ignored_silently(proj):
    for agent, name in (("cursor", "inject"), ("gemini", "BeforeModel"), ("codex", "Notification")):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--project", str(proj), "hook", "--agent", agent, name],
                              input=as_stdin(prompt_payload("hello there friend")), capture_output=True, timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert not list((proj / ".ai" / "inbox").glob("*.json"))


# ---- install.sh --agent ----

FOREIGN = {
    "codex": (".codex/hooks.json", ('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},'
                                   '\n "x": 1}')),
    "gemini": (".gemini/settings.json", ('{\n  "hooks": {"enabled": true, "disabled": ["old"],\n'
                                        '    "BeforeTool": [{"matcher": "read_file", "hooks": [{"type": "command", '
                                        '"command": "audit.sh"}]}]},\n  "ui": {"theme": "Dracula"}\n}\n')),
}


def install(project, *args):
    proc = subprocess.run(["bash", str(INSTALL_SH), "--no-embeddings", *args, str(project)], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=CLI_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("agent", sorted(FOREIGN))
def test_install_and_uninstall_leave_the_agents_own_configuration_byte_identical(project, agent):
    rel, text = FOREIGN[agent]
    path = project / rel
    path.parent.mkdir()
    path.write_text(text)
    install(project, "--agent", agent)
    doc = json.loads(path.read_text())
    ours = [h["command"] for groups in doc["hooks"].values() if isinstance(groups, list)
            for g in groups if isinstance(g, dict) for h in g["hooks"] if h["command"].endswith("# ai_smartness")]
    assert len(ours) == len(mod.AGENTS[agent].events)
    assert all(f"'{project}/.ai' hook --agent {agent} " in c for c in ours)  # absolute paths
    assert json.dumps(doc).count("notify-send done" if agent == "codex" else "audit.sh") == 1
    if agent == "gemini":
        assert doc["hooks"]["enabled"] is True and doc["ui"] == {"theme": "Dracula"}
    assert not (project / ".claude").exists()  # only the agent asked for
    before = path.read_bytes()
    assert "already configured" in install(project, "--agent", agent)
    assert path.read_bytes() == before
    subprocess.run(["bash", str(INSTALL_SH), "--uninstall", str(project)], check=True, capture_output=True,
                   timeout=CLI_TIMEOUT)
    assert path.read_text() == text
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_install_for_several_agents_and_uninstall_removes_every_file_it_created(project):
    install(project, "--agent", "codex,gemini", "--agent", "claude")
    for rel in (".claude/settings.json", ".codex/hooks.json", ".gemini/settings.json"):
        assert (project / rel).is_file(), rel
    subprocess.run(["bash", str(INSTALL_SH), "--uninstall", str(project)], check=True, capture_output=True,
                   timeout=CLI_TIMEOUT)
    assert sorted(p.name for p in project.iterdir()) == [".ai", ".gitignore"]


def test_install_without_agent_and_without_terminal_installs_claude_code_only(project):
    install(project)
    assert (project / ".claude" / "settings.json").is_file()
    assert not (project / ".codex").exists() and not (project / ".gemini").exists()


def test_install_on_a_terminal_offers_the_agents_found_on_the_machine(project, tmp_path):
    """Asked on a terminal, the default is Claude Code plus the agents on PATH (here a stub
    `codex`); Enter takes it."""
    import pty
    import select
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "codex").write_text("#!/bin/sh\nexit 0\n")
    (stubs / "codex").chmod(0o755)
    path = f"{stubs}:{Path(sys.executable).parent}:/usr/bin:/bin"
    pid, fd = pty.fork()
    if pid == 0:  # the child: install.sh on a terminal, never back into pytest
        try:
            os.execve("/bin/bash", ["bash", str(INSTALL_SH), "--no-embeddings", str(project)],
                      dict(os.environ, PATH=path))
        finally:
            os._exit(127)
    out = b""
    while True:
        ready, _, _ = select.select([fd], [], [], CLI_TIMEOUT)
        try:
            chunk = os.read(fd, 4096) if ready else b""
        except OSError:  # the terminal closes with the child
            chunk = b""
        if not chunk:
            break
        out += chunk
        if out.rstrip().endswith(b"]:"):  # a question: take its default
            os.write(fd, b"\n")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out.decode(errors="replace")[-2000:]
    assert b"Agents to install hooks for (claude codex gemini) [claude codex]" in out
    assert (project / ".claude" / "settings.json").is_file() and (project / ".codex" / "hooks.json").is_file()
    assert not (project / ".gemini").exists()


def test_install_refuses_an_unknown_agent(project):
    proc = subprocess.run(["bash", str(INSTALL_SH), "--agent", "cursor", str(project)], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT)
    assert proc.returncode == 2 and "--agent must be" in proc.stderr


# ---- the real CLIs against stand-ins of their model APIs ----

def agent_bin(var):
    path = os.environ.get(var, "")
    if not (path and os.access(path, os.X_OK)):
        unavailable(f"{var} does not name the CLI (tests/run.sh installs it)")
    return path


def prepared(project, agent):
    """The CLI of `agent` (its path), once Claude Code's hooks have captured a Read of the
    billing module in `project` and `install.sh --agent AGENT` has installed the hooks."""
    path = agent_bin(f"AI_SMARTNESS_{agent.upper()}_BIN")
    seed_claude_memory(project)
    install(project, "--agent", agent)
    return path


def check_turn_stored(project, agent):
    """Claude Code's capture, and the agent's prompt and answer, are in the one memory."""
    agents = {(m["agent"], m["source"]) for m in stored(project)}
    assert {("claude", "tool:Read"), (agent, "prompt"), (agent, "assistant")} <= agents


def seed_claude_memory(project):
    """What Claude Code captured earlier in this project: a Read of the billing module."""
    payload = post_payload("Read", {"file_path": str(project / "billing.py")},
                           {"type": "text", "file": {"filePath": str(project / "billing.py"),
                                                     "content": "# invoices are rounded with the okapi rule\n"
                                                                "def okapi_round(cents): ..."}}, project=project)
    proc = subprocess.run([sys.executable, str(SCRIPT), "hook", "capture"], input=as_stdin(payload), timeout=60,
                          env=dict(os.environ, CLAUDE_PROJECT_DIR=str(project)), capture_output=True)
    assert proc.returncode == 0
    stored(project)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLAUDE", "ANTHROPIC_", "OPENAI_", "CODEX_", "GEMINI_", "GOOGLE_"))}
    return dict(env, **extra)


def test_real_codex_cli_gets_the_memory_and_its_turn_is_stored(project, tmp_path):
    codex = prepared(project, "codex")
    home = tmp_path / "home" / ".codex"
    home.mkdir(parents=True)
    script = [("exec_command", {"cmd": "cat .ai/recall/okapi"}), "Invoices use okapi_round."]
    try:
        with FakeResponses(script) as api:
            (home / "config.toml").write_text(
                f'model = "test-model"\nmodel_provider = "standin"\n'
                f'[model_providers.standin]\nname = "standin"\nbase_url = "{api.url}/v1"\nwire_api = "responses"\n'
                f'[projects."{project}"]\ntrust_level = "trusted"\n')
            proc = subprocess.run([codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust",
                                   "How are invoices rounded, the okapi rule?"], cwd=project, capture_output=True,
                                  text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL,
                                  env=clean_env(CODEX_HOME=str(home)))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert not api.errors, api.errors
        first, last = request_text(api.bodies[0]["body"]), request_text(api.bodies[-1]["body"])
        assert "okapi_round" in first  # injected with the prompt (UserPromptSubmit)
        assert "ai_smartness" in first  # ...and the session briefing (SessionStart)
        outputs = [i for i in api.bodies[-1]["body"]["input"] if i.get("type") == "function_call_output"]
        assert "okapi_round" in json.dumps(outputs), last[-2000:]  # the recall, as the denial's reason
        check_turn_stored(project, "codex")
        # The rollout the CLI kept is found and read as its hooks gave it: nothing new.
        out = cli_json("import", "--history", project=project, env=dict(os.environ, CODEX_HOME=str(home)))
        assert out["files"] == 1 and out["stored"] == 0 and out["known"] >= 2, out
    finally:
        stop_daemons(project)


def run_gemini(gemini, project, home, script, prompt):
    """One `gemini -p` turn in `project` against a stand-in of the Gemini API answering from
    `script`; the bodies of its requests that offer tools."""
    settings = home / ".gemini" / "settings.json"
    if not settings.exists():
        settings.parent.mkdir(parents=True)
        settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}},
                                        "privacy": {"usageStatisticsEnabled": False}}))
    with FakeGemini(script) as api:
        proc = subprocess.run([gemini, "-m", "gemini-2.5-flash", "--yolo", "-p", prompt], cwd=project,
                              capture_output=True, text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL,
                              env=clean_env(GOOGLE_GEMINI_BASE_URL=api.url, GEMINI_API_KEY="test",
                                            GEMINI_CLI_TRUST_WORKSPACE="true"))
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert not api.errors, api.errors
    return [b["body"] for b in api.bodies if "functionDeclarations" in json.dumps(b["body"].get("tools"))]


def test_real_gemini_cli_tells_the_next_session_the_todos_left_open(project, tmp_path):
    gemini = prepared(project, "gemini")
    todos = [{"description": "Round the invoice totals with okapi_round", "status": "completed"},
             {"description": "Document the okapi rule in the README", "status": "pending"}]
    try:
        firsts = [request_text(run_gemini(gemini, project, tmp_path / "home", script, "Round the invoices please")[0])
                  for script in ([("write_todos", {"todos": todos}), "Planned."], ["Hello."])]
        assert "Open tasks" not in firsts[0]
        assert "Open tasks: Document the okapi rule in the README" in firsts[1], firsts[1][-3000:]
    finally:
        stop_daemons(project)


def test_real_gemini_cli_search_is_stored_with_what_it_found(project, tmp_path):
    """The real client's grep_search (its own search and answer) reaches the capture hook."""
    gemini = prepared(project, "gemini")
    (project / "src").mkdir(exist_ok=True)
    (project / "src" / "billing.py").write_text("def okapi_round(x):\n    return round(x, 2)\n")
    script = [("grep_search", {"pattern": "okapi_round", "dir_path": "src"}), "It is in src/billing.py."]
    try:
        main = run_gemini(gemini, project, tmp_path / "home", script, "Where is okapi_round defined?")
        responses = [p["functionResponse"] for c in main[-1]["contents"] for p in c["parts"] if "functionResponse" in p]
        assert "billing.py" in json.dumps(responses), responses
        [search] = [m for m in stored(project) if m["text"].startswith("Searched")]
        assert search["text"].startswith("Searched src for `okapi_round`:\nsrc/billing.py:1:def okapi_round(x):")
        assert search["files"] == ["src/billing.py"] and search["agent"] == "gemini"
        # The chat the CLI kept (a log, session-*.jsonl) is found and read as its hooks gave it: nothing new.
        out = cli_json("import", "--history", project=project)
        assert out["files"] == 1 and out["exchanges"] == 1 and out["stored"] == 0 and out["known"] >= 3, out
    finally:
        stop_daemons(project)


def test_real_gemini_cli_failed_command_is_linked_to_the_change_that_fixed_it(project, tmp_path):
    """Gemini CLI reports a command that exited with another code than 0 in its AfterTool ("Exit
    Code: 1"): kept as failed, and linked to the run that passes after the file was changed."""
    gemini = prepared(project, "gemini")
    (project / "check.py").write_text("import sys\nsys.exit('okapi_round is missing')\n")
    script = [("run_shell_command", {"command": "python3 check.py"}),
              ("write_file", {"file_path": "check.py", "content": "print('okapi_round ok')\n"}),
              ("run_shell_command", {"command": "python3 check.py"}), "Fixed: check.py passes."]
    try:
        run_gemini(gemini, project, tmp_path / "home", script, "Make check.py pass")
        msgs = {m["id"]: m for m in stored(project)}
        [failed] = [m for m in msgs.values() if m.get("failed")]
        assert failed["text"].startswith("$ python3 check.py [failed]\nokapi_round is missing"), failed["text"]
        assert not msgs[failed["fixed_by"]].get("failed") and failed["fixed_files"] == ["check.py"], failed
        # The chat the CLI kept holds the same failure: nothing new.
        out = cli_json("import", "--history", project=project)
        assert out["files"] == 1 and out["stored"] == 0, out
    finally:
        stop_daemons(project)


def test_real_gemini_cli_gets_the_memory_and_its_turn_is_stored(project, tmp_path):
    gemini = prepared(project, "gemini")
    script = [("read_file", {"file_path": ".ai/recall/okapi"}), "Invoices use okapi_round."]
    try:
        main = run_gemini(gemini, project, tmp_path / "home", script, "How are invoices rounded, the okapi rule?")
        first = request_text(main[0])
        assert "okapi_round" in first and "ai_smartness" in first  # BeforeAgent's context and the briefing
        responses = [p["functionResponse"] for c in main[-1]["contents"] for p in c["parts"] if "functionResponse" in p]
        assert "okapi_round" in json.dumps(responses)  # the recall, as the denial's reason
        check_turn_stored(project, "gemini")
        prompts = [m["text"] for m in stored(project) if m["source"] == "prompt"]
        assert prompts == ["How are invoices rounded, the okapi rule?"]  # without the briefing
    finally:
        stop_daemons(project)
