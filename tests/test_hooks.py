"""Section 9 (Hooks) as Claude Code runs them: real processes started with the installed
command (`python -I -S -c 'import ai_smartness ...'`), the payload on stdin,
CLAUDE_PROJECT_DIR set, the fake embedder. Every hook must exit 0, print nothing or one
contract-valid JSON object, and log what went wrong instead of failing. The bad and odd
input matrix runs in-process in test_hook_units.py."""
import fcntl
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ai_smartness as ai
from conftest import cli, cli_json, fixtures_dir
from support import (INSTALLED, SESSION, as_stdin, check_contract, event_hooks, failures, hook_events,
                     installed_hook, log_records, post_payload, prompt_payload, read_payload, stop_payload, store_of, wait_for)

HOOK_OF = hook_events()  # Claude Code event -> our hook; other events go to `capture`, which ignores them
EVENT_OF = event_hooks()
ITEM_RE = re.compile(r"^\s+- \[\d{1,2} \w+ \d{4}\] ")  # every item dated
HEADER_RE = re.compile(r"^# .+ \((just now|.+ ago)\)$")  # every thread group says how old it is


@pytest.fixture(params=["in-process", "daemon"])
def route(request, proj):
    """Who answers the hooks: a warm daemon, or the hook process itself."""
    if request.param == "daemon":
        assert cli("daemon", "start", project=proj).returncode == 0
        yield request.param
        return
    # Holding the daemon's run lock makes every hook answer in-process: none can start.
    store = ai.Store(str(proj / ".ai"))
    fd = os.open(store.run_lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + 30
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            assert time.monotonic() < deadline, "could not stop the daemon"
            ai.stop_daemon(store, timeout=2.0)
    try:
        yield request.param
    finally:
        os.close(fd)


def set_config(project, **values):
    path = project / ".ai" / "config.json"
    cfg = json.loads(path.read_text()) if path.exists() else {}
    cfg.update(values)
    path.write_text(json.dumps(cfg))


def run(name, payload, project, env=None):
    """Run one hook; return its stdout (str) after checking exit 0 and an empty stderr."""
    proc = installed_hook(name, payload, project, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not proc.stderr.strip(), proc.stderr.decode(errors="replace")
    return proc.stdout.decode("utf-8")


def context(out, event):
    doc = check_contract(out, event)
    assert doc is not None, f"{event}: no output"
    return doc["hookSpecificOutput"]["additionalContext"]


def messages(project):
    """Every stored message text, after the CLI drained the inbox and db/index.json (the
    digest hooks read without the daemon) caught up: a warm daemon rewrites it within seconds."""
    ids = {t["id"] for t in cli_json("threads", "--status", "all", "--limit", "1000", project=project)}
    wait_for(lambda: ids <= set(store_of(project).read_digest()), "db/index.json to list every thread")
    export = json.loads(cli("export", project=project).stdout)
    return [m["text"] for t in export["threads"] for m in t["messages"]]


def write_transcript(path, turns):
    lines = [json.dumps({"type": "summary", "summary": "earlier"}), "{broken line"]
    for role, text in turns:
        lines.append(json.dumps({"type": role, "sessionId": SESSION,
                                 "message": {"role": role, "content": [{"type": "text", "text": text}]
                                             if role == "assistant" else text}}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tree(root, skip):
    """Every path under root except those under `skip`."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == skip:
            dirnames[:] = []
            continue
        out.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return out - {str(skip)}

# ---- every real payload ----


def real_payloads():
    root = fixtures_dir("claude-code")
    found = []
    for path in sorted(root.glob("hook-payloads-real/*/*.json")):
        found += [(f"{path.parent.name}/{path.name}", p) for p in json.loads(path.read_text(encoding="utf-8"))]
    for path in sorted(root.glob("hook-payloads-observed/*.json")):
        if not path.name.startswith("_"):
            found.append((path.name, json.loads(path.read_text(encoding="utf-8"))))
    return found


def test_every_real_payload_is_accepted(proj):
    """The first payload of each event through the installed command, the others in-process
    through the same parse and answer (a process each would prove nothing more)."""
    payloads = real_payloads()
    assert len(payloads) > 50
    store = store_of(proj).ensure()
    events = set()
    for origin, payload in payloads:
        event = payload.get("hook_event_name")
        name = HOOK_OF.get(event, "capture")
        if event in events:
            out = ai.answer(name, ai.parse_payload(json.dumps(payload).encode()), store) or ""
        else:
            out = run(name, payload, proj)
        events.add(event)
        if event in HOOK_OF:
            check_contract(out, event)
        else:
            assert out == "", (origin, event, out)
    assert set(HOOK_OF) <= events
    assert not failures(proj), failures(proj)
    # What the payloads carried was stored and stays readable.
    assert cli("threads", "--json", project=proj).returncode == 0

# ---- the process contract (the full matrix runs in-process in test_hook_units.py) ----


@pytest.mark.parametrize("name", sorted(ai.HOOKS))
def test_bad_and_odd_input_through_the_process(proj, name):
    """Malformed JSON, then a payload of wrong types: exit 0, nothing or one JSON, no stderr."""
    assert run(name, b'{"hook_event_name": "Stop", "session_id": ', proj) == ""
    errors = [r for r in log_records(proj) if r["level"] == "error" and r.get("hook") == name]
    assert errors and "not JSON" in errors[-1]["msg"], log_records(proj)
    odd = {"session_id": {"a": 1}, "prompt": 5, "tool_name": ["Read"], "tool_input": "x", "tool_response": 7,
           "transcript_path": 9, "source": None, "last_assistant_message": ["x"], "trigger": {}, "cwd": 3,
           "custom_instructions": 3, "offset": {"\ud800": 1}}
    check_contract(run(name, odd, proj), EVENT_OF[name])
    assert not failures(proj), failures(proj)


def test_unknown_hook_name_exits_0(proj):
    assert run("nonsense", {"prompt": "x"}, proj) == ""

# ---- SessionStart ----


def test_briefing_first_use_then_since_last_interaction(proj):
    first = context(run("start", {"session_id": "a", "hook_event_name": "SessionStart", "source": "startup"}, proj),
                    "SessionStart")
    assert "ai_smartness" in first and ".ai/recall/" in first
    assert len(first) <= 500
    assert "first use" in first.lower()
    run("inject", prompt_payload("switch the payment webhook to idempotency keys stored in redis"), proj)
    run("stop", stop_payload("Payment webhooks now dedupe on the idempotency key."), proj)
    messages(proj)
    later = context(run("start", {"session_id": "b", "hook_event_name": "SessionStart", "source": "resume"}, proj),
                    "SessionStart")
    assert "ai_smartness" in later and ".ai/recall/" in later and len(later) <= 500
    assert "first use" not in later.lower()
    assert "webhook" in later.lower() and "Where the work stopped" in later  # the thread worked on last, its age


def test_briefing_stays_short_with_a_large_memory(proj):
    mem = ai.open_memory(str(proj))  # stored in-process: only the briefing needs the hook process
    for i in range(12):
        assert mem.capture(f"module{i} " + "lorem ipsum dolor sit amet " * 40)["action"] != "QUEUED"
    text = context(run("start", {"hook_event_name": "SessionStart", "source": "startup"}, proj), "SessionStart")
    assert len(text) <= 500 and ".ai/recall/" in text


def test_briefing_after_compaction_restores_the_synthesis(proj, tmp_path):
    transcript = write_transcript(tmp_path / "s.jsonl", [
        ("user", "Should the export stay synchronous?"),
        ("assistant", "We decided to stream the CSV export through a background job. "
                      "Next step: add a progress endpoint."),
    ])
    run("precompact", {"session_id": SESSION, "transcript_path": str(transcript), "hook_event_name": "PreCompact",
                       "trigger": "auto", "custom_instructions": None}, proj)
    text = context(run("start", {"session_id": SESSION, "hook_event_name": "SessionStart", "source": "compact"}, proj),
                   "SessionStart")
    assert "ai_smartness" in text and ".ai/recall/" in text and len(text) <= 500
    assert "compaction" in text and "background job" in text

# ---- UserPromptSubmit ----


def test_prompts_are_captured_and_acknowledgements_are_not(proj):
    for text in ("Migrate the orders table to a partitioned postgres table by month", "ok", "merci", "gracias",
                 "thanks!"):
        out = run("inject", prompt_payload(text), proj)
        check_contract(out, "UserPromptSubmit")
    stored = messages(proj)
    assert "Migrate the orders table to a partitioned postgres table by month" in stored
    assert not {"ok", "merci", "gracias", "thanks!"} & set(stored)


def test_rule_lands_in_rules_and_in_later_context(proj):
    run("inject", prompt_payload("remember: always use type hints"), proj)
    assert "Always use type hints" in [r["text"] for r in cli_json("rules", project=proj)]
    text = context(run("inject", prompt_payload("write the parser for the invoice files"), proj), "UserPromptSubmit")
    assert "Always use type hints" in text


def test_rules_from_prompts_are_redacted(proj):
    run("inject", prompt_payload("remember: never print the key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345"), proj)
    rules = [r["text"] for r in cli_json("rules", project=proj)]
    assert rules and all("AbCdEfGhIjKlMnOp" not in r for r in rules), rules


@pytest.fixture
def billing(proj):
    """A project whose memory holds a rule and 17 billing prompts, stored in-process as the
    inject hook stores them (a hook process each would prove nothing more); requested before
    `route`, so a daemon starts over the filled memory."""
    set_config(proj, inject_budget=900)
    mem = ai.open_memory(str(proj))
    rule = "remember: always use type hints"
    ai.add_rules_to_store(mem.store, ai.detect_rules(rule), time.time())
    earlier = ["The billing service retries Stripe webhooks with exponential backoff capped at 10 minutes",
               "Billing webhooks must be idempotent: store the Stripe event id in the processed_events table"]
    fillers = [f"Billing note {i}: the stripe webhook handler logs event type and latency for dashboard panel {i} "
               + "with extra detail " * 10 for i in range(15)]
    for text in [rule, *earlier, *fillers]:
        assert mem.capture(text, source="prompt", session_id=SESSION)["action"] != "QUEUED"
    return proj


def test_context_recalls_earlier_prompts_within_budget(billing, route):
    text = context(run("inject", prompt_payload("why do stripe billing webhooks get processed twice?"), billing),
                   "UserPromptSubmit")
    assert heartbeat(billing)["last_served_inject"] == route
    assert len(text) <= 900
    assert text.startswith("ai_smartness") and "recalled notes" in text and "not instructions" in text
    assert "Stripe" in text and "webhook" in text
    assert "Always use type hints" in text
    items = [line for line in text.splitlines() if line.startswith("  - ")]
    assert items and all(ITEM_RE.match(line) for line in items), text
    assert all(HEADER_RE.match(line) for line in text.splitlines() if line.startswith("# ")), text
    # the CLI shows exactly what the hook injects
    assert cli_json("context", "why do stripe billing webhooks get processed twice?", project=billing)["message_ids"]


def test_first_prompt_of_a_session_gets_a_suggestion(proj):
    for text in ("Set up alembic migrations for the inventory database schema",
                 "The inventory alembic migration adds a warehouse_id foreign key"):
        run("inject", prompt_payload(text, session="s1"), proj)
    messages(proj)
    first = context(run("inject", prompt_payload("check the alembic migration for inventory again", session="s2"),
                        proj), "UserPromptSubmit")
    assert "Read .ai/recall/" in first and "Memory has earlier work" in first
    second = context(run("inject", prompt_payload("and the alembic migration downgrade?", session="s2"), proj),
                     "UserPromptSubmit")
    assert "Memory has earlier work" not in second
    unrelated = context(run("inject", prompt_payload("draw a kangaroo in ascii art", session="s3"), proj),
                        "UserPromptSubmit")
    assert "Memory has earlier work" not in unrelated

# ---- PreToolUse: the virtual recall file ----


def recall_answer(out, proj):
    doc = check_contract(out, "PreToolUse")
    assert doc is not None, "recall not answered"
    spec = doc["hookSpecificOutput"]
    assert spec["permissionDecision"] == "allow"
    path = Path(spec["updatedInput"]["file_path"])
    assert path.is_absolute() and path.is_file()
    assert path.resolve().parent == (proj / ".ai" / "cache" / "recall").resolve()
    return path.read_text(encoding="utf-8"), spec


@pytest.fixture
def leaderboard(proj):
    """A project that remembers a redis leaderboard, from a prompt and a test run."""
    run("inject", prompt_payload("Use a redis sorted set as the leaderboard store for the hockey game"), proj)
    run("capture", post_payload("Bash", {"command": "pytest tests/test_leaderboard.py"},
                                {"stdout": "4 passed: leaderboard ranks ties by earliest score", "stderr": ""}), proj)
    messages(proj)
    return proj


def test_a_client_that_stopped_reading_sees_exit_0_and_no_traceback(route, leaderboard):
    """The answer goes to a closed pipe: the hook exits 0 silently (the flush before the hard
    exit fails quietly; a normal interpreter exit would report the error and exit 120)."""
    payload = read_payload(".ai/recall/leaderboard redis", project=leaderboard)
    proc = subprocess.Popen([sys.executable, *INSTALLED, "hook", "pretool"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, CLAUDE_PROJECT_DIR=str(leaderboard)))
    proc.stdout.close()
    _, err = proc.communicate(as_stdin(payload), timeout=60)
    assert proc.returncode == 0 and err == b""


def test_recall_absolute_and_relative(route, leaderboard):
    for path in (f"{leaderboard}/.ai/recall/leaderboard redis", ".ai/recall/leaderboard redis",
                 f"{leaderboard}/.ai/recall/leaderboard%20redis.md", ".ai\\recall\\leaderboard redis"):
        text, _ = recall_answer(run("pretool", read_payload(path, project=leaderboard), leaderboard), leaderboard)
        assert "sorted set" in text and "leaderboard" in text, (path, text)
        assert [r for r in log_records(leaderboard) if r["msg"] == "recall"][-1]["served"] == route
    text, spec = recall_answer(run("pretool", dict(read_payload(".ai/recall/kangaroo ascii", project=leaderboard),
                                                   tool_input={"file_path": ".ai/recall/kangaroo ascii",
                                                               "offset": 1, "limit": 50}), leaderboard), leaderboard)
    assert "ai_smartness" in text and spec["updatedInput"]["offset"] == 1 and spec["updatedInput"]["limit"] == 50
    assert not failures(leaderboard)


def test_recall_by_thread_id(route, leaderboard):
    thread = cli_json("threads", project=leaderboard)[0]
    out = run("pretool", read_payload(f".ai/recall/{thread['id']}", project=leaderboard), leaderboard)
    text, _ = recall_answer(out, leaderboard)
    assert thread["id"] in text and thread["title"][:30] in text


def test_other_tools_pass_untouched(leaderboard):
    assert run("pretool", read_payload(f"{leaderboard}/src/app.py", project=leaderboard), leaderboard) == ""
    assert run("pretool", read_payload(f"{leaderboard}/.ai/config.json", project=leaderboard), leaderboard) == ""
    for path in ("vendor/pkg/.ai/recall/leaderboard", "sub/.ai/recall/leaderboard"):  # other folders' files
        assert run("pretool", read_payload(path, project=leaderboard), leaderboard) == ""
    bash = {"session_id": SESSION, "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "cat .ai/recall/leaderboard"}}
    assert run("pretool", bash, leaderboard) == ""
    write = {"session_id": SESSION, "hook_event_name": "PreToolUse", "tool_name": "Write",
             "tool_input": {"file_path": f"{leaderboard}/.ai/recall/x", "content": "y"}}
    assert run("pretool", write, leaderboard) == ""


def test_recall_paths_never_escape_the_data_dir(leaderboard, tmp_path):
    other = tmp_path / "other"
    (other / ".ai" / "recall").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("TOP-SECRET-CONTENT")
    before = tree(tmp_path, leaderboard / ".ai")
    attempts = [
        ".ai/recall/../../secret.txt", f"{leaderboard}/.ai/recall/../../secret.txt", ".ai/recall/../../../etc/passwd",
        ".ai/recall/%2e%2e/%2e%2e/secret.txt", ".ai/recall/%2e%2e%2fsecret.txt", ".ai/recall/..%5c..%5csecret.txt",
        f".ai/recall/{tmp_path}/secret.txt", ".ai/recall/" + "a/" * 3000 + "leaderboard",
        ".ai/recall/" + "x" * 100000, ".ai/recall/leader\x00board", ".ai/recall/\x00/../../secret.txt",
        ".ai/recall/~/.ssh/id_rsa", ".ai/recall/$(touch pwned)", ".ai/recall/`touch pwned`", ".ai/recall/",
        ".ai/recall//", ".ai/recall/...", ".ai/recall/CON", ".ai/recall/" + "\u00e9" * 500,
    ]
    for path in attempts:
        out = run("pretool", read_payload(path, project=leaderboard), leaderboard)
        if out:
            text, _ = recall_answer(out, leaderboard)
            assert "TOP-SECRET" not in text and "root:x:0:0" not in text
    # Another project's recall path is not ours to answer.
    assert run("pretool", read_payload(f"{other}/.ai/recall/leaderboard", project=leaderboard), leaderboard) == ""
    assert tree(tmp_path, leaderboard / ".ai") == before
    assert not list(other.rglob("*.md"))
    assert not failures(leaderboard), failures(leaderboard)
    for name in os.listdir(leaderboard / ".ai" / "cache" / "recall"):
        assert re.fullmatch(r"[a-z0-9-]{1,80}\.md", name), name

# ---- PostToolUse ----


def task_create(tid, subject, session=SESSION):
    """A PostToolUse of Claude Code 2.1's TaskCreate, shaped like the real client's."""
    return post_payload("TaskCreate", {"subject": subject, "description": subject + ".", "activeForm": subject},
                        {"task": {"id": tid, "subject": subject}}, session=session)


def task_update(tid, session=SESSION, **fields):
    return post_payload("TaskUpdate", dict(fields, taskId=tid),
                        {"success": True, "taskId": tid, "updatedFields": list(fields)}, session=session)


def briefing(proj, session):
    return context(run("start", {"session_id": session, "hook_event_name": "SessionStart", "source": "startup"},
                       proj), "SessionStart")


def test_the_briefing_names_the_tasks_the_agent_left_open(proj, route):
    run("inject", prompt_payload("upgrade the dependencies of the tracker app, one phase at a time"), proj)
    # Hooks of calls made together land in any order: task 3's update comes before its creation.
    for payload in (task_create("1", "Phase 1: remove unused packages"), task_update("3", status="in_progress"),
                    task_create("2", "Phase 2: upgrade Next.js"), task_create("3", "Phase 3: upgrade tRPC to v11"),
                    task_create("4", "Phase 4: swap framer-motion"), task_update("1", status="completed"),
                    task_update("4", status="deleted"), task_update("2", subject="Phase 2: upgrade Next.js and React")):
        assert run("capture", payload, proj) == ""
    run("stop", stop_payload("Phase 1 is done: the unused packages are gone."), proj)
    text = briefing(proj, "b")
    assert "Open tasks: Phase 3: upgrade tRPC to v11; Phase 2: upgrade Next.js and React" in text, text  # doing first
    assert "Phase 1: remove" not in text and "framer-motion" not in text, text  # completed, deleted
    assert "Last: Phase 1 is done" in text, text  # after the conclusion, not instead of it
    assert not any("tRPC" in m for m in messages(proj))  # a task list is no memory of its own
    listed = json.loads(cli("export", project=proj).stdout)["task_lists"][SESSION]["items"]  # but it can be seen
    assert [(x[0], x[2]) for x in listed] == [("1", "completed"), ("2", "pending"), ("3", "in_progress")]
    assert not failures(proj)

    # TodoWrite (Claude Code before 2.1) sends the whole list; a list all done names nothing.
    todos = [{"content": "Add the CSV export", "status": "completed", "activeForm": "Adding"},
             {"content": "Document the export", "status": "pending", "activeForm": "Documenting"}]
    run("inject", prompt_payload("add a csv export to the reports page", session="b"), proj)
    run("capture", post_payload("TodoWrite", {"todos": todos}, {"oldTodos": [], "newTodos": todos}, session="b"), proj)
    assert "Open tasks: Document the export" in briefing(proj, "c")
    todos[1]["status"] = "completed"
    run("capture", post_payload("TodoWrite", {"todos": todos}, {"oldTodos": [], "newTodos": todos}, session="b"), proj)
    assert "Open tasks" not in briefing(proj, "d")


def test_a_task_list_of_another_session_is_not_where_the_work_stopped(proj):
    run("inject", prompt_payload("migrate the billing tables to the new schema", session="a"), proj)
    run("capture", task_create("1", "Write the billing migration", session="a"), proj)
    run("inject", prompt_payload("fix the flaky login test in the auth suite", session="b"), proj)
    run("stop", stop_payload("The login test waits for the session cookie now.", session="b"), proj)
    assert "Open tasks" not in briefing(proj, "c")
    run("inject", prompt_payload("back to the billing migration", session="a"), proj)
    assert "Open tasks: Write the billing migration" in briefing(proj, "d")


def test_tool_results_become_messages(proj):
    payloads = [
        post_payload("Read", {"file_path": f"{proj}/src/pool.py"},
                     {"type": "text", "file": {"filePath": f"{proj}/src/pool.py",
                                               "content": "def make_pool():\n    return asyncpg.create_pool(min_size=2)\n",
                                               "numLines": 3, "startLine": 1, "totalLines": 3}}),
        post_payload("Write", {"file_path": f"{proj}/docs/cache.md", "content": "# Cache\nThe cache uses LRU eviction.\n"},
                     {"type": "create", "filePath": f"{proj}/docs/cache.md", "content": "# Cache\nThe cache uses LRU eviction.\n",
                      "structuredPatch": [], "originalFile": None}),
        post_payload("Edit", {"file_path": f"{proj}/src/pool.py", "old_string": "min_size=2", "new_string": "min_size=4",
                              "replace_all": False},
                     {"filePath": f"{proj}/src/pool.py", "oldString": "min_size=2", "newString": "min_size=4",
                      "originalFile": "...", "structuredPatch": []}),
        post_payload("Bash", {"command": "pytest -q tests/test_pool.py", "description": "pool tests"},
                     {"stdout": "5 passed in 0.31s (pool warmup ok)", "stderr": "", "interrupted": False, "isImage": False}),
        post_payload("Task", {"description": "Audit connection leaks", "prompt": "find leaked connections",
                              "subagent_type": "general-purpose"},
                     {"status": "completed", "content": [{"type": "text", "text": "Found one leak in the report exporter."}]}),
        post_payload("WebFetch", {"url": "https://magicstack.github.io/asyncpg/", "prompt": "pool defaults?"},
                     {"bytes": 100, "code": 200, "codeText": "OK", "result": "The default max_size of a pool is 10.",
                      "url": "https://magicstack.github.io/asyncpg/"}),
    ]
    for payload in payloads:
        assert run("capture", payload, proj) == ""
    stored = "\n".join(messages(proj))
    for expected in ("src/pool.py", "asyncpg.create_pool", "docs/cache.md", "LRU eviction", "min_size=4",
                     "$ pytest -q tests/test_pool.py", "5 passed", "Audit connection leaks", "leak in the report exporter",
                     "https://magicstack.github.io/asyncpg/", "default max_size"):
        assert expected in stored, expected
    assert not failures(proj)


def test_reads_of_our_own_files_are_not_captured(leaderboard):
    out = run("pretool", read_payload(".ai/recall/leaderboard", project=leaderboard), leaderboard)
    answer = json.loads(out)["hookSpecificOutput"]["updatedInput"]["file_path"]
    before = messages(leaderboard)
    for path in (answer, f"{leaderboard}/.ai/config.json", f"{leaderboard}/.ai/db/index.json"):
        run("capture", post_payload("Read", {"file_path": path}, {"type": "text", "file": {
            "filePath": path, "content": "MARK-RECALLED-TEXT recalled notes", "numLines": 1}}), leaderboard)
    after = messages(leaderboard)
    assert len(after) == len(before)
    assert not any("MARK-RECALLED-TEXT" in m for m in after)


def test_large_tool_output_is_captured_cut(proj):
    big = "line of build output\n" * 300000  # about 6 MB: under the hook's input cap
    run("capture", post_payload("Bash", {"command": "make all"}, {"stdout": big, "stderr": ""}), proj)
    stored = [m for m in messages(proj) if m.startswith("$ make all")]
    assert stored and len(stored[0]) <= ai.MAX_MESSAGE_CHARS
    assert not failures(proj)


SECRETS = {
    "anthropic": "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0EdCbA",
    "github": "ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0EdCbAzz",
    "url_password": "Sup3rS3cretPw",
    "private_key": "MIIEpAIBAAKCAQEAzx9yw8vu7ts6rq5po4nm",
}


def test_secrets_in_tool_output_are_redacted_on_disk(proj):
    env_file = (f"ANTHROPIC_API_KEY={SECRETS['anthropic']}\nGITHUB_TOKEN={SECRETS['github']}\n"
                f"DATABASE_URL=postgres://app:{SECRETS['url_password']}@db.internal:5432/shop\n"
                f"-----BEGIN RSA PRIVATE KEY-----\n{SECRETS['private_key']}\nabcdef\n-----END RSA PRIVATE KEY-----\n"
                "The deploy script reads these settings for the shop service.\n")
    run("capture", post_payload("Bash", {"command": "cat .env.production", "description": "show deploy settings"},
                                {"stdout": env_file, "stderr": ""}), proj)
    run("capture", post_payload("Read", {"file_path": f"{proj}/.env.production"},
                                {"type": "text", "file": {"filePath": f"{proj}/.env.production", "content": env_file}}), proj)
    run("capture", post_payload("Write", {"file_path": f"{proj}/deploy.sh",
                                          "content": f"git clone https://deploy:{SECRETS['url_password']}@git.example/shop.git\n"
                                                     f"export TOKEN={SECRETS['github']}\n"}, {"type": "create"}), proj)
    run("inject", prompt_payload(f"the shop deploy fails, the key is {SECRETS['anthropic']}"), proj)
    run("stop", stop_payload(f"I rotated the token {SECRETS['github']} for the shop deploy."), proj)
    stored = "\n".join(messages(proj))
    assert "shop" in stored and "[REDACTED" in stored
    leaks = []
    for path in (proj / ".ai").rglob("*"):
        if path.is_file() and not path.name.endswith((".sock", ".lock")):
            data = path.read_bytes()
            leaks += [(str(path), kind) for kind, value in SECRETS.items() if value.encode() in data]
    assert not leaks, leaks

# ---- Stop ----


def heartbeat(proj):
    path = proj / ".ai" / "heartbeat.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_stop_captures_the_last_message_and_beats(proj):
    assert run("stop", stop_payload("The exporter now streams rows in batches of 500 to cut memory use."), proj) == ""
    assert heartbeat(proj)["beats"] == 1
    assert run("stop", stop_payload("Batches of 500 halve the exporter peak memory."), proj) == ""
    assert heartbeat(proj)["beats"] == 2
    stored = messages(proj)
    assert "The exporter now streams rows in batches of 500 to cut memory use." in stored


def test_a_turn_that_failed_on_the_api_leaves_the_last_conclusion(proj):
    """Claude Code writes "API Error: …" as the assistant's message of a failed turn, "No
    response requested." of a turn that gave nothing: the client's words are neither memory
    nor the state of the work."""
    run("stop", stop_payload("The exporter now streams rows in batches of 500 to cut memory use."), proj)
    for error in ('API Error: 400 {"type":"error","error":{"type":"invalid_request_error"}}',
                  "API Error: Request timed out.", "Prompt is too long", "No response requested."):
        assert run("stop", stop_payload(error), proj) == ""
    assert heartbeat(proj)["beats"] == 5
    assert heartbeat(proj)["last_conclusion"].startswith("The exporter now streams rows")
    assert not [m for m in messages(proj) if "API Error" in m or "too long" in m or "requested" in m]


def test_the_answer_to_a_greeting_is_neither_memory_nor_the_last_conclusion(proj):
    """A session opened with "hi" (seen in replays of real sessions): the briefing after it said
    "Last: I'm Claude Code, your AI assistant for software engineering tasks."."""
    run("stop", stop_payload("The exporter now streams rows in batches of 500 to cut memory use."), proj)
    hello = "Hi! I'm Claude Code, your AI assistant for software engineering tasks. How can I help you today?"
    for greeting in ("hi", "Hello Claude!", "bonjour", "buenos días"):
        run("inject", prompt_payload(greeting), proj)
        run("stop", stop_payload(hello), proj)
        assert heartbeat(proj)["last_conclusion"].startswith("The exporter now streams rows"), greeting
    run("stop", stop_payload(hello, session="another"), proj)  # another session's turn is its own
    assert heartbeat(proj)["last_conclusion"].startswith("I'm Claude Code")
    run("inject", prompt_payload("hi, the export drops the last batch"), proj)
    run("stop", stop_payload("The last batch is flushed now."), proj)
    assert heartbeat(proj)["last_conclusion"] == "The last batch is flushed now."
    stored = messages(proj)
    assert stored.count(hello) == 1 and not {"hi", "Hello Claude!", "bonjour", "buenos días"} & set(stored)


def test_stop_reads_the_transcript_when_the_message_is_absent(proj, tmp_path):
    transcript = write_transcript(tmp_path / "t.jsonl", [
        ("user", "why is the exporter slow?"),
        ("assistant", "Profiling first."),
        ("assistant", "The exporter was slow because of N+1 queries; a single join fixes it."),
    ])
    run("stop", stop_payload(transcript=transcript), proj)
    assert "The exporter was slow because of N+1 queries; a single join fixes it." in messages(proj)


def test_stop_reads_a_real_transcript(proj):
    path = fixtures_dir("claude-code", "transcripts", "cc-v1.0.98_d-kimuson_1af7fc5e.jsonl")
    run("stop", stop_payload(transcript=path), proj)
    assert any("CLAUDE.md" in m for m in messages(proj))
    assert not failures(proj)


def test_stop_hook_active_never_blocks(proj):
    for payload in (stop_payload("again", active=True), stop_payload(active=True), stop_payload("x" * 5000, active=True)):
        out = run("stop", payload, proj)
        doc = check_contract(out, "Stop")
        assert doc is None or doc.get("decision") != "block"

# ---- PreCompact ----


def test_precompact_writes_a_synthesis(proj, tmp_path):
    run("inject", prompt_payload("Plan the move of user sessions from redis to postgres"), proj)
    messages(proj)
    transcript = write_transcript(tmp_path / "t.jsonl", [
        ("user", "Should sessions expire after 30 days or 90 days?"),
        ("assistant", "We decided to keep sessions in postgres instead of redis. "
                      "Open question: the retention period is not yet chosen."),
        ("user", "TODO: benchmark the session table with 1M rows"),
        ("assistant", "The sessions table and its index are created; the migration runs in 2 seconds."),
    ])
    out = run("precompact", {"session_id": SESSION, "transcript_path": str(transcript), "cwd": str(proj),
                             "hook_event_name": "PreCompact", "trigger": "manual",
                             "custom_instructions": "focus on sessions"}, proj)
    assert out == ""
    files = list((proj / ".ai" / "db" / "synthesis").glob("*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert any("postgres instead of redis" in d for d in doc["decisions"])
    assert any("30 days" in q for q in doc["open_questions"]) and any("benchmark" in q for q in doc["open_questions"])
    assert "migration runs" in doc["state"]
    assert doc["threads"] and "sessions" in json.dumps(doc["threads"]).lower()
    assert doc["trigger"] == "manual" and doc["custom_instructions"] == "focus on sessions"


def test_precompact_on_real_transcripts(proj):
    for path in sorted(fixtures_dir("claude-code", "transcripts").glob("*.jsonl")):
        run("precompact", {"session_id": "r", "transcript_path": str(path), "hook_event_name": "PreCompact",
                           "trigger": "auto", "custom_instructions": None}, proj)
    files = list((proj / ".ai" / "db" / "synthesis").glob("*.json"))
    assert len(files) == 7 and all(json.loads(f.read_text())["state"] for f in files)
    assert not failures(proj)

# ---- anti-loop ----


def test_internal_runs_capture_nothing(proj, tmp_path):
    transcript = write_transcript(tmp_path / "t.jsonl", [("assistant", "Summarised the extraction result.")])
    env = {"AI_SMARTNESS_INTERNAL": "1"}
    payloads = {"start": {"hook_event_name": "SessionStart", "source": "startup"},
                "inject": prompt_payload("Extract the topics of this text about kafka consumers"),
                "pretool": read_payload(".ai/recall/kafka", project=proj),
                "capture": post_payload("Bash", {"command": "ls kafka"}, {"stdout": "consumer.py producer.py"}),
                "stop": stop_payload("Kafka consumers now commit offsets manually.", transcript),
                "precompact": {"hook_event_name": "PreCompact", "transcript_path": str(transcript)},
                "end": {"hook_event_name": "SessionEnd", "reason": "other"}}
    for name, payload in payloads.items():
        assert run(name, payload, proj, env=env) == ""
    assert not list((proj / ".ai").rglob("inbox/*.json"))
    assert not list((proj / ".ai").rglob("synthesis/*.json"))
    assert not heartbeat(proj)
    assert not ai.daemon_alive(ai.Store(str(proj / ".ai")))
    assert messages(proj) == []

# ---- SessionEnd ----


def test_session_end_is_recorded(proj):
    assert run("end", {"session_id": SESSION, "hook_event_name": "SessionEnd", "reason": "other"}, proj) == ""
    assert heartbeat(proj)["last_end_reason"] == "other"
