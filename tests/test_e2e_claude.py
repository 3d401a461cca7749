"""End to end: the real Claude Code CLI, ai_smartness installed by install.sh, a scripted model.

Each test gets a temporary project (with a foreign hook and setting already in
.claude/settings.json) and a temporary HOME, installs ai_smartness there, and runs `claude -p`
against tests/fake_anthropic.py. What the product did is read from the request bodies the model
would have received. The CLI comes from AI_SMARTNESS_CLAUDE_BIN (tests/run.sh installs it); without
it these tests skip, or fail when CI is set.
"""

import json
import re
import subprocess
import urllib.request

import pytest

from e2e_support import Sandbox, claude_bin, json_strings
from support import event_hooks, unavailable, wait_for
from fake_anthropic import (FakeAnthropic, request_text, system_entries, tool_results, tool_use,
                            user_prompt)

# Distinctive tokens: found in the model's input only if memory carried them there.
FILE_TOKEN = "zebracorn7731"
PROMPT_TOKEN = "quokka5150"
AUTH_PY = '''"""Auth service, JWT refresh token rotation ({token})."""
import hmac
import secrets

REFRESH_TOKEN_TTL = 14 * 24 * 3600  # refresh tokens live two weeks


def rotate_refresh_token(store, old_token):
    """Rotate a JWT refresh token: revoke the old one, issue and remember a new one."""
    if not store.is_valid(old_token):
        raise PermissionError("refresh token reuse detected, revoking the family")
    store.revoke(old_token)
    new_token = secrets.token_urlsafe(32)
    store.save(new_token, ttl=REFRESH_TOKEN_TTL)
    return new_token
'''.format(token=FILE_TOKEN)
SESSION1_PROMPT = "Please refactor the JWT refresh token rotation in auth.py (ticket %s)" % PROMPT_TOKEN
SESSION2_PROMPT = "Continue the JWT refresh token rotation refactoring in auth.py"
BRIEFING_MARK = "SessionStart hook additional context:"
MEMORY_MARK = "UserPromptSubmit hook additional context:"
FINAL = "All done."


@pytest.fixture
def sandbox(tmp_path):
    claude = claude_bin()
    if not claude:
        unavailable("real Claude Code CLI not found: set AI_SMARTNESS_CLAUDE_BIN to its binary "
                    "(tests/run.sh installs @anthropic-ai/claude-code@2.1.197 and sets it)")
    box = Sandbox(tmp_path, claude)
    try:
        done = box.install()
        assert done.returncode == 0, "install.sh failed:\n%s\n%s" % (done.stdout, done.stderr)
        yield box
    finally:
        box.stop_daemon()


def run_ok(box, api, prompt, *args):
    """Run one session and check the scripted conversation ran to its end."""
    run = box.run_claude(api, prompt, *args)
    assert run.returncode == 0 and run.result, run
    assert not run.result.get("is_error") and run.result.get("result") == FINAL, run
    assert not api.errors, api.errors
    return api.bodies()


def assert_hooks_fired(first_body):
    """Our SessionStart hook reached the model. An invalid settings field silently disables
    every hook while claude still exits 0, so every run checks this."""
    briefings = [s for s in system_entries(first_body) if BRIEFING_MARK in s]
    assert briefings, ("no SessionStart hook context reached the model: hooks did not fire "
                       "(invalid settings.json?). System entries: %r" % system_entries(first_body))
    briefing = briefings[0].split(BRIEFING_MARK, 1)[1]
    assert "ai_smartness" in briefing and ".ai/recall/" in briefing, briefing


def memory_context(body):
    """The text after 'UserPromptSubmit hook additional context:' in the system entries."""
    return "\n".join(s.split(MEMORY_MARK, 1)[1] for s in system_entries(body) if MEMORY_MARK in s)


def stored_messages(box, keep, enough=bool):
    """The stored messages `keep(message)` selects, once `enough` of them are there (the hooks'
    captures reach the store through the daemon; `export` drains what is still journaled)."""
    def found():
        done = box.cli("export")
        threads = json.loads(done.stdout)["threads"] if done.returncode == 0 else []
        return [m for t in threads for m in t["messages"] if keep(m)]
    assert wait_for(lambda: enough(found()), timeout=90), found()
    return found()


def threads_mentioning(box, token):
    """Ids of threads whose listing or full record mentions token (the CLI drains the inbox)."""
    listing = box.cli_json("threads")
    if listing is None:
        return []
    threads = listing.get("threads", listing) if isinstance(listing, dict) else listing
    found = []
    for thread in threads if isinstance(threads, list) else []:
        tid = thread.get("id") if isinstance(thread, dict) else None
        if not tid:
            continue
        texts = json_strings(thread) + json_strings(box.cli_json("thread", tid))
        if any(token in s.lower() for s in texts):
            found.append(tid)
    return found


@pytest.mark.parametrize("recall_path", ["absolute", "relative"])
def test_memory_flows_from_one_session_to_the_next(sandbox, recall_path):
    box = sandbox
    auth_py = box.write("auth.py", AUTH_PY)

    # Session 1: the model reads auth.py and runs a command; the hooks capture both.
    session1 = [tool_use("Read", {"file_path": str(auth_py)}, id="toolu_read_auth"),
                tool_use("Bash", {"command": "echo rotation-check-ok",
                                  "description": "Check the shell"}, id="toolu_echo"),
                FINAL]
    with FakeAnthropic(session1) as api:
        bodies = run_ok(box, api, SESSION1_PROMPT)
    assert_hooks_fired(bodies[0])
    read = [r for r in tool_results(bodies[1]) if r["tool_use_id"] == "toolu_read_auth"]
    assert read and not read[0]["is_error"] and FILE_TOKEN in read[0]["text"], read
    assert any(line.startswith("Read\t") for line in box.marker_lines()), box.marker_lines()

    # The Read result became (part of) a thread; captures are processed asynchronously.
    threads = wait_for(lambda: threads_mentioning(box, FILE_TOKEN), timeout=90)
    assert threads, "no thread holds the Read content: %s %s" % (
        box.cli("threads", "--json").stdout, box.cli("status", "--json").stdout)

    # Session 2, same topic: memory arrives with the prompt, and a recall Read answers in-turn.
    query = "jwt refresh token"
    recall = (str(box.project / ".ai" / "recall" / query) if recall_path == "absolute"
              else ".ai/recall/" + query)
    session2 = [tool_use("Read", {"file_path": recall}, id="toolu_recall"), FINAL]
    marker_before = len(box.marker_lines())
    with FakeAnthropic(session2) as api:
        bodies = run_ok(box, api, SESSION2_PROMPT)
    assert_hooks_fired(bodies[0])
    memory = memory_context(bodies[0])
    assert "ai_smartness" in memory, "no memory context with the prompt: %r" % system_entries(bodies[0])
    assert FILE_TOKEN in memory.lower() or PROMPT_TOKEN in memory.lower(), memory

    results = [r for r in tool_results(bodies[1]) if r["tool_use_id"] == "toolu_recall"]
    assert results, tool_results(bodies[1])
    assert not results[0]["is_error"], "recall Read came back as an error: %r" % results[0]
    assert FILE_TOKEN in results[0]["text"].lower(), results[0]
    # The foreign PostToolUse hook still ran, on the Read that our PreToolUse redirected.
    new_lines = box.marker_lines()[marker_before:]
    assert any(re.match(r"Read\t.*/\.ai/cache/recall/", line) for line in new_lines), new_lines

    # The transcripts the client kept hold nothing the hooks did not store live, the recall included.
    done = box.cli("import", "--history", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["files"] == 2 and out["stored"] == 0 and out["known"] >= 4, out


def test_a_cd_the_client_keeps_places_each_command_file_once(sandbox):
    """Claude Code keeps a command's `cd` for the next commands and reports the folder it moved
    to as the PostToolUse cwd: `cd web && cat src/a.txt`, then `cat src/b.txt`, both under web/."""
    box = sandbox
    box.write("web/src/a.txt", "alpha\n")
    box.write("web/src/b.txt", "beta\n")
    turns = [tool_use("Bash", {"command": "cd web && cat src/a.txt", "description": "first"}, id="toolu_cd"),
             tool_use("Bash", {"command": "cat src/b.txt", "description": "second"}, id="toolu_after"),
             FINAL]
    with FakeAnthropic(turns) as api:
        bodies = run_ok(box, api, "show me the two files under web")
    assert [r["text"].strip() for r in tool_results(bodies[-1])] == ["alpha", "beta"]  # the cd was kept

    files = lambda msgs: sorted(f for m in msgs for f in m.get("files", ()))  # noqa: E731
    commands = stored_messages(box, lambda m: m["text"].startswith("$ "), lambda msgs: len(files(msgs)) == 2)
    assert files(commands) == ["web/src/a.txt", "web/src/b.txt"]


def test_a_search_the_client_runs_is_kept_with_what_it_found(sandbox):
    """The real client's Grep (its own search, its own result shape) reaches the capture hook:
    the memory keeps where it searched, for what and the lines found, by project path."""
    box = sandbox
    box.write("src/billing.py", "def invoice_total(rows):\n    return sum(r.amount for r in rows)\n")
    turns = [tool_use("Grep", {"pattern": "invoice_total", "path": str(box.project / "src" / "billing.py"),
                               "output_mode": "content", "-n": True}, id="toolu_grep"), FINAL]
    with FakeAnthropic(turns) as api:
        # 2.1.197 searches through Bash unless Grep is asked for by name (older clients: always Grep).
        bodies = run_ok(box, api, "where is the invoice total computed?", "--allowedTools", "Grep")
    found = [r for r in tool_results(bodies[-1]) if r["tool_use_id"] == "toolu_grep"]
    assert found and not found[0]["is_error"] and "invoice_total" in found[0]["text"], found

    [search] = stored_messages(box, lambda m: m["text"].startswith("Searched"))
    assert search["text"].startswith("Searched src/billing.py for `invoice_total`:\n") and "def invoice_total" in search["text"]
    assert search["files"] == ["src/billing.py"] and search["op"] == "search"


def test_an_edit_the_client_makes_is_kept_as_what_it_changed_and_comes_back(sandbox):
    """The real client's Edit (it must Read the file first; its result is a patch of the file):
    the memory keeps the changed lines as they are now with the two before them, not the
    unchanged lines old_string repeated, and the next session's prompt on that file gets them."""
    box = sandbox
    lines = ["CONFIG = {", "    'region': 'eu-west-1',", "    'retries': 3,", "    'timeout_s': 5,", "}"]
    box.write("src/settings.py", "\n".join(lines) + "\n")
    path = str(box.project / "src" / "settings.py")
    old, new = "\n".join(lines[:4]), "\n".join(lines[:3] + ["    'timeout_s': 30,  # the wombat export is slow"])
    turns = [tool_use("Read", {"file_path": path}, id="toolu_read"),
             tool_use("Edit", {"file_path": path, "old_string": old, "new_string": new}, id="toolu_edit"), FINAL]
    with FakeAnthropic(turns) as api:
        bodies = run_ok(box, api, "raise the export timeout in src/settings.py", "--allowedTools", "Read Edit")
    edited = [r for r in tool_results(bodies[-1]) if r["tool_use_id"] == "toolu_edit"]
    assert edited and not edited[0]["is_error"], edited
    assert "'timeout_s': 30" in (box.project / "src" / "settings.py").read_text()

    [edit] = stored_messages(box, lambda m: m.get("source") == "tool:Edit")
    assert edit["text"] == ("Edited src/settings.py:\n+ 'region': 'eu-west-1',\n'retries': 3,\n"
                            "'timeout_s': 30,  # the wombat export is slow\n- 'timeout_s': 5,"), edit
    assert edit["files"] == ["src/settings.py"] and edit["op"] == "edit"
    with FakeAnthropic([FINAL]) as api:
        bodies = run_ok(box, api, "is the timeout in src/settings.py enough for the wombat export?")
    assert "'timeout_s': 30, # the wombat export is slow - 'timeout_s': 5," in memory_context(bodies[0])


def test_a_background_commands_crash_read_with_task_output_is_kept_as_that_commands_failure(sandbox):
    """2.1.197 polls a background command with TaskOutput, whose result names the task (its id and
    description), not the command: the capture finds the command in the client's own transcript,
    so the crash is that command's failure, for its next passing run to fix. The agent may also
    Read the task's output file, as the client's result suggests, or tail it in the shell: that
    is the command's output."""
    box = sandbox
    command = "sleep 1; echo 'Error: listen EADDRINUSE: address already in use :::4000' >&2; exit 1"

    def started(body):
        return [r for r in tool_results(body) if r["tool_use_id"] == "toolu_bg"][0]["text"]

    def poll(body):
        task = re.search(r"with ID: (\w+)", started(body)).group(1)
        return tool_use("TaskOutput", {"task_id": task, "block": True, "timeout": 30000}, id="toolu_poll")

    def output(body):
        return re.search(r"written to: (\S+\.output)", started(body)).group(1)
    turns = [tool_use("Bash", {"command": command, "description": "Start the API server", "run_in_background": True},
                      id="toolu_bg"), poll, lambda body: tool_use("Read", {"file_path": output(body)}, id="toolu_look"),
             lambda body: tool_use("Bash", {"command": f"tail -5 {output(body)}"}, id="toolu_tail"), FINAL]
    with FakeAnthropic(turns) as api:
        bodies = run_ok(box, api, "start the API server in the background", "--allowedTools", "TaskOutput")
    results = {r["tool_use_id"]: r["text"] for r in tool_results(bodies[-1])}
    assert all("EADDRINUSE" in results.get(t, "") for t in ("toolu_poll", "toolu_look", "toolu_tail")), results

    [crash] = stored_messages(box, lambda m: m.get("source") == "tool:TaskOutput")
    assert crash["text"].startswith(f"$ {command} (background, failed, exit 1) [failed]\n"), crash
    assert "EADDRINUSE" in crash["text"] and crash["failed"] and crash["command"] == command
    looks = stored_messages(box, lambda m: m["text"].startswith(f"$ {command} (background, output so far)\n"),
                            lambda msgs: len(msgs) == 2)
    assert sorted(m["source"] for m in looks) == ["tool:Bash", "tool:Read"]
    assert all("EADDRINUSE" in m["text"] for m in looks)


def test_in_a_terminal_a_background_crash_the_client_notifies_is_kept_as_that_commands_failure(sandbox):
    """In an interactive session 2.1.197 tells the agent that a background command ended with a
    notification sent as the next prompt (UserPromptSubmit): the crash is kept as that command's
    failure, with the end of its output file, though the agent never looked at it."""
    box = sandbox
    command = "sleep 1; echo 'Error: listen EADDRINUSE: address already in use :::4000' >&2; exit 1"
    turns = [tool_use("Bash", {"command": command, "description": "Start the API server", "run_in_background": True},
                      id="toolu_bg"), FINAL, FINAL]
    with FakeAnthropic(turns) as api:
        def notified():
            return any("<task-notification>" in json.dumps(b["messages"]) for b in api.bodies())
        box.run_interactive(api, "start the API server in the background", notified)
        assert notified(), api.bodies()
    [crash] = stored_messages(box, lambda m: m.get("source") == "tool:TaskNotification")
    assert crash["text"] == (f"$ {command} (background, failed, exit 1) [failed]\n"
                             "Error: listen EADDRINUSE: address already in use :::4000"), crash
    assert crash["failed"] and crash["command"] == command


def test_a_background_crash_while_the_agent_works_is_kept_as_that_commands_failure(sandbox):
    """A background command that ends while the agent is still at work: 2.1.197 attaches its
    notification to the running turn, and no hook is sent for it. The turn's end keeps it as
    that command's failure, with the end of its output file."""
    box = sandbox
    command = "sleep 1; echo 'Error: listen EADDRINUSE: address already in use :::4000' >&2; exit 1"
    turns = [tool_use("Bash", {"command": command, "description": "Start the API server", "run_in_background": True},
                      id="toolu_bg"), tool_use("Bash", {"command": "sleep 4"}, id="toolu_wait"), FINAL]
    with FakeAnthropic(turns) as api:
        bodies = run_ok(box, api, "start the API server in the background, then wait a little", "--allowedTools", "Bash")
    assert "<task-notification>" in json.dumps(bodies[-1]["messages"][-3:]), bodies[-1]["messages"][-3:]
    assert not any("<task-notification>" in json.dumps(b["messages"][:1]) for b in bodies)  # no prompt of its own
    [crash] = stored_messages(box, lambda m: m.get("source") == "tool:TaskNotification")
    assert crash["text"] == (f"$ {command} (background, failed, exit 1) [failed]\n"
                             "Error: listen EADDRINUSE: address already in use :::4000"), crash
    assert crash["failed"] and crash["command"] == command


def test_in_a_terminal_what_the_user_types_while_the_agent_works_is_kept(sandbox):
    """In a terminal the user types while the agent works: 2.1.197 queues it and hands it to the
    running turn, and no UserPromptSubmit is sent for it. It is kept as the user's prompt, its
    instruction a rule that the next session's prompts get."""
    box = sandbox
    typed = "from now on, always use tabs for indentation in this repo"
    turns = [tool_use("Bash", {"command": "sleep 6", "description": "Wait for the build"}, id="toolu_wait"), FINAL,
             FINAL]
    with FakeAnthropic(turns) as api:
        def answered():
            return len(api.bodies()) >= 2 and typed in json.dumps(api.bodies()[-1]["messages"]) and \
                in_transcript(box, '"queued_command"')
        box.run_interactive(api, "wait for the build", answered, meanwhile=(lambda: len(api.bodies()) >= 1, typed))
        assert answered(), api.bodies()
    handed = next(b for b in api.bodies() if typed in json.dumps(b["messages"]))
    said = json.dumps([m for m in handed["messages"] if m["role"] == "assistant"])
    assert "toolu_wait" in said and FINAL not in said, handed["messages"]  # in the turn, before its answer
    [kept] = stored_messages(box, lambda m: m["text"] == typed)
    assert kept["source"] == "prompt", kept
    with FakeAnthropic([FINAL]) as api:
        bodies = run_ok(box, api, "indent the new parser module")
    assert "Always use tabs for indentation in this repo" in memory_context(bodies[0]), memory_context(bodies[0])


def test_in_a_terminal_a_command_the_user_runs_is_kept_as_that_commands_run(sandbox):
    """At the prompt of a terminal session the user runs a command with "!": 2.1.197 hands the
    command and its output to the model, and no hook is sent for it. It is kept as a run of
    that command, a failure when it failed, not as the user's words."""
    box = sandbox
    command = "echo 'FAIL src/parser.test.ts: expected 3 tokens, got 2'; exit 1"
    with FakeAnthropic([FINAL, FINAL]) as api:
        box.run_interactive(api, "!" + command, lambda: bool(api.bodies()) and in_transcript(box, "<bash-stdout>"))
    assert "<bash-input>" in json.dumps(api.bodies()[0]["messages"]), api.bodies()
    [run] = stored_messages(box, lambda m: m["text"].startswith(f"$ {command}"))
    assert run["text"] == f"$ {command} (run by the user) [failed]\nFAIL src/parser.test.ts: expected 3 tokens, got 2", run
    assert run["failed"] and run["source"] == "tool:Bash", run
    assert not stored_messages(box, lambda m: "bash-" in m["text"] or m["source"] == "prompt", lambda found: True)


def in_transcript(box, text):
    """Whether the client has written `text` to a session's transcript: a terminal session
    quit before it has loses what it had not written yet."""
    return any(text in path.read_text(errors="replace")
               for path in (box.home / ".claude" / "projects").glob("*/*.jsonl"))


def launch_then_poll(launch, task_id, report):
    """A scripted model that makes the `launch` call (id toolu_launch) of a background run, whose
    subagents (a prompt with SUBTASK) answer `report`, then reads the run with TaskOutput (id
    toolu_poll; the task id is the `task_id` pattern's group in the launch's result)."""
    def script(body):
        if "SUBTASK" in json.dumps(body["messages"][0]["content"]):
            return report  # a subagent's own conversation
        said = [m for m in body["messages"] if m["role"] == "assistant"]
        if not said:
            return launch
        if len(said) == 1:
            launched = [r for r in tool_results(body) if r["tool_use_id"] == "toolu_launch"]
            task = re.search(task_id, launched[0]["text"]).group(1)
            return tool_use("TaskOutput", {"task_id": task, "block": True, "timeout": 30000}, id="toolu_poll")
        return FINAL
    return script


def test_a_background_subagents_report_read_with_task_output_is_kept(sandbox):
    """2.1.197 launches a background subagent (its Agent result only says it started) and the
    agent reads its report with TaskOutput: the report is kept as a Task result is."""
    box = sandbox
    report = "The parser has two unicode bugs: lexer.py drops combining marks, tokens.py splits emoji."

    launch = tool_use("Agent", {"description": "audit the parser", "prompt": "SUBTASK: audit the parser",
                                "subagent_type": "general-purpose", "run_in_background": True}, id="toolu_launch")
    with FakeAnthropic(launch_then_poll(launch, r"agentId: (\w+)", report)) as api:
        bodies = run_ok(box, api, "audit the parser in the background", "--allowedTools", "Agent TaskOutput")
    polled = [r for r in tool_results(bodies[-1]) if r["tool_use_id"] == "toolu_poll"]
    assert polled and report in polled[0]["text"], polled

    [kept] = stored_messages(box, lambda m: m.get("source") == "tool:TaskOutput")
    assert kept["text"] == "Task audit the parser (background): SUBTASK: audit the parser\n" + report, kept


def test_a_workflows_result_read_with_task_output_is_kept(sandbox):
    """2.1.197's Workflow runs a script of subagents in the background (its result only says it
    launched); the agent reads the outcome with TaskOutput: what the script returned is kept, not
    the run's progress (phases, agents, tokens)."""
    box = sandbox
    report = "The parser has two unicode bugs: lexer.py drops combining marks, tokens.py splits emoji."
    workflow = ("export const meta = { name: 'audit-parser', description: 'Audit the parser', phases: [{ title: 'Audit' }] }\n"
                "phase('Audit')\nconst found = await agent('SUBTASK: audit the parser')\nreturn found\n")

    launch = tool_use("Workflow", {"script": workflow}, id="toolu_launch")
    with FakeAnthropic(launch_then_poll(launch, r"Task ID: (\w+)", report)) as api:
        bodies = run_ok(box, api, "use a workflow to audit the parser", "--allowedTools", "Workflow TaskOutput")
    polled = [r for r in tool_results(bodies[-1]) if r["tool_use_id"] == "toolu_poll"]
    assert polled and report in polled[0]["text"] and "workflowProgress" in polled[0]["text"], polled

    [kept] = stored_messages(box, lambda m: m.get("source") == "tool:TaskOutput")
    assert kept["text"] == "Workflow Audit the parser:\n" + report, kept


def test_a_code_reviews_findings_the_client_reports_are_kept_with_their_files(sandbox):
    """2.1.197's ReportFindings (a review's verified findings) reaches the capture hook: each finding
    is kept with its place and its project file is recorded."""
    box = sandbox
    box.write("src/billing.py", "def invoice_total(rows):\n    return sum(rows) / len(rows)\n")
    finding = {"file": "src/billing.py", "line": 2, "summary": "invoice_total divides by zero on an empty invoice",
               "failure_scenario": "invoice_total([]) raises ZeroDivisionError", "verdict": "CONFIRMED"}
    turns = [tool_use("ReportFindings", {"level": "high", "findings": [finding]}, id="toolu_review"), FINAL]
    with FakeAnthropic(turns) as api:
        bodies = run_ok(box, api, "review src/billing.py", "--allowedTools", "ReportFindings")
    reported = [r for r in tool_results(bodies[-1]) if r["tool_use_id"] == "toolu_review"]
    assert reported and not reported[0]["is_error"], reported

    [review] = stored_messages(box, lambda m: m.get("source") == "tool:ReportFindings")
    assert review["text"].startswith("Review findings (high):\n- src/billing.py:2: invoice_total divides by zero"), review
    assert review["files"] == ["src/billing.py"]


def test_a_session_in_a_git_worktree_shares_the_projects_memory(sandbox):
    """`claude --worktree` works in .claude/worktrees/<name>/ and gives the hooks that folder as
    CLAUDE_PROJECT_DIR and cwd; with the settings committed the hooks fire there. Its files are
    the project's files, in the project's memory."""
    box = sandbox
    box.write("src/a.txt", "alpha\n")
    git = lambda *a: subprocess.run(["git", "-C", str(box.project), *a], capture_output=True, text=True)
    if git("--version").returncode:
        unavailable("git not found")
    (box.project / ".gitignore").write_text(".ai/\n")
    git("init", "-q")
    git("add", "-A")
    assert git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start").returncode == 0
    turns = [tool_use("Bash", {"command": "cat src/a.txt", "description": "show"}, id="toolu_wt"), FINAL]
    with FakeAnthropic(turns) as api:
        bodies = run_ok(box, api, "show me a", "--worktree", "feat")
    assert [r["text"].strip() for r in tool_results(bodies[-1])] == ["alpha"]
    worktree = box.project / ".claude" / "worktrees" / "feat"
    assert worktree.is_dir() and not (worktree / ".ai").exists()

    commands = stored_messages(box, lambda m: m["text"].startswith("$ cat"),
                               lambda msgs: any(m.get("files") for m in msgs))
    assert [f for m in commands for f in m.get("files", ())] == ["src/a.txt"]


def test_the_next_session_is_told_the_tasks_the_agent_left_open(sandbox):
    """Claude Code 2.1 keeps the agent's task list with TaskCreate and TaskUpdate (TodoWrite is
    off): what the client sends the hooks for them makes the next briefing name the open ones."""
    box = sandbox
    turns = [tool_use("TaskCreate", {"subject": "Port the invoice exporter to streams",
                                     "description": "Rows one at a time.", "activeForm": "Porting"}, id="toolu_t1"),
             tool_use("TaskCreate", {"subject": "Document the streaming export",
                                     "description": "README section.", "activeForm": "Documenting"}, id="toolu_t2"),
             tool_use("TaskUpdate", {"taskId": "1", "status": "completed"}, id="toolu_t3"),
             FINAL]
    with FakeAnthropic(turns) as api:
        bodies = run_ok(box, api, "Make the invoice exporter stream its rows, then document it")
    assert not any(r["is_error"] for b in bodies for r in tool_results(b)), [tool_results(b) for b in bodies]
    with FakeAnthropic([FINAL]) as api:
        bodies = run_ok(box, api, "where were we?")
    briefing = "\n".join(s for s in system_entries(bodies[0]) if BRIEFING_MARK in s)
    assert "Open tasks: Document the streaming export" in briefing, briefing
    assert "Port the invoice exporter to streams" not in briefing, briefing  # done


def test_install_keeps_foreign_settings_and_uninstall_restores_them(sandbox):
    box = sandbox
    settings = box.settings()
    for key, value in box.foreign_settings.items():
        if key != "hooks":
            assert settings.get(key) == value, (key, settings)
    assert box.foreign_entry in settings["hooks"]["PostToolUse"], settings["hooks"]
    ai_dir = str(box.project / ".ai")
    for name, event in event_hooks().items():
        commands = [h.get("command", "") for entry in settings["hooks"].get(event, [])
                    for h in entry.get("hooks", [])]
        ours = [c for c in commands if c.endswith(" hook %s # ai_smartness" % name)]
        assert len(ours) == 1 and ai_dir in ours[0], (event, commands)

    # Installed, both hook sets fire.
    box.write("README.md", "hello from the readme\n")
    script = [tool_use("Read", {"file_path": str(box.project / "README.md")}), FINAL]
    with FakeAnthropic(script) as api:
        bodies = run_ok(box, api, "what is in the readme")
    assert_hooks_fired(bodies[0])
    assert len(box.marker_lines()) == 1, box.marker_lines()

    box.stop_daemon()
    done = box.install("--uninstall")
    assert done.returncode == 0, "install.sh --uninstall failed:\n%s\n%s" % (done.stdout, done.stderr)
    assert box.settings_path.read_bytes() == box.original_settings

    # Uninstalled, only the foreign hook is left.
    with FakeAnthropic(script) as api:
        bodies = run_ok(box, api, "what is in the readme")
    assert not any(BRIEFING_MARK in s for s in system_entries(bodies[0])), system_entries(bodies[0])
    assert len(box.marker_lines()) == 2, box.marker_lines()


def test_fake_anthropic_streams_the_scripted_turns():
    """The stand-in alone (runs without the CLI): SSE shape, turn counting, side requests."""
    def post(url, body):
        request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read().decode()

    first = {"tools": [{"name": "Read"}], "stream": True,
             "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]},
                          {"role": "system", "content": [{"type": "text", "text": "CTX"}]}]}
    with FakeAnthropic([tool_use("Read", {"file_path": "/x"}, id="toolu_1"), FINAL]) as api:
        stream = post(api.url + "/v1/messages?beta=true", first)
        events = re.findall(r"^event: (\w+)$", stream, re.M)
        assert events == ["message_start", "content_block_start", "content_block_delta",
                          "content_block_stop", "message_delta", "message_stop"]
        assert '"stop_reason": "tool_use"' in stream and "input_json_delta" in stream
        second = dict(first, messages=first["messages"] + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                                               "input": {"file_path": "/x"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": "1\tRESULT"}]}])
        assert '"text_delta", "text": "%s"' % FINAL in post(api.url + "/v1/messages", second)
        assert "OK" in post(api.url + "/v1/messages", {"messages": first["messages"]})
        assert [r.kind for r in api.requests] == ["main", "main", "side"]
        assert system_entries(api.bodies()[1]) == ["CTX"]
        assert tool_results(api.bodies()[1]) == [
            {"tool_use_id": "toolu_1", "is_error": False, "text": "1\tRESULT"}]
        assert "RESULT" in request_text(api.bodies()[1]) and not api.errors

    with FakeAnthropic(lambda body: "you said " + user_prompt(body)) as api:
        assert "you said go" in post(api.url + "/v1/messages", dict(first, stream=False))
