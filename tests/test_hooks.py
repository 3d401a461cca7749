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
from conftest import ROOT, cli, cli_json, fixtures_dir

# Claude Code event -> our hook name; other events go to `capture`, which must ignore them.
HOOK_OF = {h.event: h.name for h in ai.HOOKS.values()}
EVENT_OF = {v: k for k, v in HOOK_OF.items()}
# The command settings.template.json installs, with the module taken from this checkout.
INSTALLED = ["-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import ai_smartness; "
             "ai_smartness.main(sys.argv[2:])", str(ROOT)]
# Top-level keys Claude Code accepts from a command hook.
TOP_KEYS = {"hookSpecificOutput", "continue", "stopReason", "suppressOutput", "systemMessage", "decision", "reason"}
SESSION = "11111111-2222-3333-4444-555555555555"
ITEM_RE = re.compile(r"^\s+- \[\d{1,2} \w+ \d{4}\] ")  # every item dated
HEADER_RE = re.compile(r"^# .+ \((just now|.+ ago)\)$")  # every thread group says how old it is


@pytest.fixture
def proj(project):
    """A project whose daemon (started lazily by the hooks) retires soon and is stopped at the end."""
    data = project / ".ai"
    data.mkdir()
    (data / "config.json").write_text(json.dumps({"daemon_idle_seconds": 30}))
    yield project
    stop_daemon(project)


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


def stop_daemon(project):
    # A hook may have spawned a daemon that has not written daemon.json yet: wait on the
    # run lock (held for the daemon's whole life) rather than on the status file.
    store = ai.Store(str(project / ".ai"))
    deadline = time.monotonic() + 30
    while ai.daemon_alive(store) and time.monotonic() < deadline:
        ai.stop_daemon(store, timeout=2.0)
    assert not ai.daemon_alive(store), "a daemon outlived its test"


def set_config(project, **values):
    path = project / ".ai" / "config.json"
    cfg = json.loads(path.read_text()) if path.exists() else {}
    cfg.update(values)
    path.write_text(json.dumps(cfg))


def hook(name, payload, project, env=None, timeout=60):
    """Run a hook as Claude Code does: the installed command, payload on stdin, project in
    CLAUDE_PROJECT_DIR."""
    data = payload if isinstance(payload, (str, bytes)) else json.dumps(payload)
    if isinstance(data, str):
        data = data.encode()
    full_env = dict(os.environ, CLAUDE_PROJECT_DIR=str(project), **(env or {}))
    return subprocess.run([sys.executable, *INSTALLED, "hook", name], input=data, capture_output=True,
                          env=full_env, timeout=timeout)


def run(name, payload, project, env=None):
    """Run one hook; return its stdout (str) after checking exit 0 and an empty stderr."""
    proc = hook(name, payload, project, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not proc.stderr.strip(), proc.stderr.decode(errors="replace")
    return proc.stdout.decode("utf-8")


def check_contract(out, event):
    """stdout is empty, or exactly one JSON object whose hookSpecificOutput names `event`."""
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


def context(out, event):
    doc = check_contract(out, event)
    assert doc is not None, f"{event}: no output"
    return doc["hookSpecificOutput"]["additionalContext"]


def log_records(project):
    path = project / ".ai" / "logs" / "ai_smartness.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def failures(project):
    return [r for r in log_records(project) if r["msg"] in ("hook failed", "hook over its time budget; answered nothing")]


def prompt(text, session=SESSION):
    return {"session_id": session, "transcript_path": "/nonexistent/t.jsonl", "cwd": "/x",
            "hook_event_name": "UserPromptSubmit", "prompt": text}


def recall_read(path, session=SESSION, cwd=None):
    """A Read of `path`; a relative recall path is the project's when `cwd` is the project."""
    payload = {"session_id": session, "hook_event_name": "PreToolUse", "tool_name": "Read",
               "tool_input": {"file_path": path}, "tool_use_id": "toolu_1"}
    if cwd is not None:
        payload["cwd"] = str(cwd)
    return payload


def post(tool, tool_input, tool_response, session=SESSION):
    return {"session_id": session, "cwd": "/x", "hook_event_name": "PostToolUse", "tool_name": tool,
            "tool_input": tool_input, "tool_response": tool_response, "tool_use_id": "toolu_2", "duration_ms": 5}


def stop_payload(message=None, transcript=None, active=False):
    payload = {"session_id": SESSION, "transcript_path": str(transcript or "/nonexistent/t.jsonl"), "cwd": "/x",
               "hook_event_name": "Stop", "stop_hook_active": active}
    if message is not None:
        payload["last_assistant_message"] = message
    return payload


def messages(project):
    """Every stored message text, after the CLI drained the inbox and db/index.json (the
    digest hooks read without the daemon) caught up: a warm daemon rewrites it within seconds."""
    ids = {t["id"] for t in cli_json("threads", "--status", "all", "--limit", "1000", project=project)}
    deadline = time.monotonic() + 15
    while ids and time.monotonic() < deadline and not ids <= set(ai.Store(str(project / ".ai")).read_digest()):
        time.sleep(0.2)
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
    payloads = real_payloads()
    assert len(payloads) > 50
    events = set()
    for origin, payload in payloads:
        event = payload.get("hook_event_name")
        events.add(event)
        name = HOOK_OF.get(event, "capture")
        out = run(name, payload, proj)
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
    run("inject", prompt("switch the payment webhook to idempotency keys stored in redis"), proj)
    run("stop", stop_payload("Payment webhooks now dedupe on the idempotency key."), proj)
    messages(proj)
    later = context(run("start", {"session_id": "b", "hook_event_name": "SessionStart", "source": "resume"}, proj),
                    "SessionStart")
    assert "ai_smartness" in later and ".ai/recall/" in later and len(later) <= 500
    assert "since the last interaction" in later and "first use" not in later.lower()
    assert "webhook" in later.lower()  # the thread worked on last


def test_briefing_stays_short_with_a_large_memory(proj):
    for i in range(12):
        ai_text = f"module{i} " + "lorem ipsum dolor sit amet " * 40
        assert cli("capture", ai_text, project=proj).returncode == 0
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
        out = run("inject", prompt(text), proj)
        check_contract(out, "UserPromptSubmit")
    stored = messages(proj)
    assert "Migrate the orders table to a partitioned postgres table by month" in stored
    assert not {"ok", "merci", "gracias", "thanks!"} & set(stored)


def test_rule_lands_in_rules_and_in_later_context(proj):
    run("inject", prompt("remember: always use type hints"), proj)
    assert "Always use type hints" in [r["text"] for r in cli_json("rules", project=proj)]
    text = context(run("inject", prompt("write the parser for the invoice files"), proj), "UserPromptSubmit")
    assert "Always use type hints" in text


def test_rules_from_prompts_are_redacted(proj):
    run("inject", prompt("remember: never print the key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345"), proj)
    rules = [r["text"] for r in cli_json("rules", project=proj)]
    assert rules and all("AbCdEfGhIjKlMnOp" not in r for r in rules), rules


def test_context_recalls_earlier_prompts_within_budget(proj, route):
    set_config(proj, inject_budget=900)
    run("inject", prompt("remember: always use type hints"), proj)
    earlier = ["The billing service retries Stripe webhooks with exponential backoff capped at 10 minutes",
               "Billing webhooks must be idempotent: store the Stripe event id in the processed_events table"]
    for text in earlier:
        run("inject", prompt(text), proj)
    for i in range(15):
        run("inject", prompt(f"Billing note {i}: the stripe webhook handler logs event type and latency "
                             f"for dashboard panel {i} " + "with extra detail " * 10), proj)
    messages(proj)
    text = context(run("inject", prompt("why do stripe billing webhooks get processed twice?"), proj),
                   "UserPromptSubmit")
    assert heartbeat(proj)["last_served_inject"] == route
    assert len(text) <= 900
    assert text.startswith("ai_smartness") and "recalled notes" in text and "not instructions" in text
    assert "Stripe" in text and "webhook" in text
    assert "Always use type hints" in text
    items = [line for line in text.splitlines() if line.startswith("  - ")]
    assert items and all(ITEM_RE.match(line) for line in items), text
    assert all(HEADER_RE.match(line) for line in text.splitlines() if line.startswith("# ")), text
    # the CLI shows exactly what the hook injects
    assert cli_json("context", "why do stripe billing webhooks get processed twice?", project=proj)["message_ids"]


def test_first_prompt_of_a_session_gets_a_suggestion(proj):
    for text in ("Set up alembic migrations for the inventory database schema",
                 "The inventory alembic migration adds a warehouse_id foreign key"):
        run("inject", prompt(text, session="s1"), proj)
    messages(proj)
    first = context(run("inject", prompt("check the alembic migration for inventory again", session="s2"), proj),
                    "UserPromptSubmit")
    assert "Read .ai/recall/" in first and "Memory has earlier work" in first
    second = context(run("inject", prompt("and the alembic migration downgrade?", session="s2"), proj),
                     "UserPromptSubmit")
    assert "Memory has earlier work" not in second
    unrelated = context(run("inject", prompt("draw a kangaroo in ascii art", session="s3"), proj),
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
def filled(proj):
    run("inject", prompt("Use a redis sorted set as the leaderboard store for the hockey game"), proj)
    run("capture", post("Bash", {"command": "pytest tests/test_leaderboard.py"},
                        {"stdout": "4 passed: leaderboard ranks ties by earliest score", "stderr": ""}), proj)
    messages(proj)
    return proj


def test_recall_absolute_and_relative(route, filled):
    for path in (f"{filled}/.ai/recall/leaderboard redis", ".ai/recall/leaderboard redis",
                 f"{filled}/.ai/recall/leaderboard%20redis.md", ".ai\\recall\\leaderboard redis"):
        text, _ = recall_answer(run("pretool", recall_read(path, cwd=filled), filled), filled)
        assert "sorted set" in text and "leaderboard" in text, (path, text)
        assert [r for r in log_records(filled) if r["msg"] == "recall"][-1]["served"] == route
    text, spec = recall_answer(run("pretool", dict(recall_read(".ai/recall/kangaroo ascii"),
                                                   tool_input={"file_path": ".ai/recall/kangaroo ascii",
                                                               "offset": 1, "limit": 50}), filled), filled)
    assert "ai_smartness" in text and spec["updatedInput"]["offset"] == 1 and spec["updatedInput"]["limit"] == 50
    assert not failures(filled)


def test_recall_by_thread_id(route, filled):
    thread = cli_json("threads", project=filled)[0]
    text, _ = recall_answer(run("pretool", recall_read(f".ai/recall/{thread['id']}"), filled), filled)
    assert thread["id"] in text and thread["title"][:30] in text


def test_other_tools_pass_untouched(filled):
    assert run("pretool", recall_read(f"{filled}/src/app.py"), filled) == ""
    assert run("pretool", recall_read(f"{filled}/.ai/config.json"), filled) == ""
    for path in ("vendor/pkg/.ai/recall/leaderboard", "sub/.ai/recall/leaderboard"):  # other folders' files
        assert run("pretool", recall_read(path, cwd=filled), filled) == ""
    bash = {"session_id": SESSION, "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "cat .ai/recall/leaderboard"}}
    assert run("pretool", bash, filled) == ""
    write = {"session_id": SESSION, "hook_event_name": "PreToolUse", "tool_name": "Write",
             "tool_input": {"file_path": f"{filled}/.ai/recall/x", "content": "y"}}
    assert run("pretool", write, filled) == ""


def test_recall_paths_never_escape_the_data_dir(filled, tmp_path):
    other = tmp_path / "other"
    (other / ".ai" / "recall").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("TOP-SECRET-CONTENT")
    before = tree(tmp_path, filled / ".ai")
    attempts = [
        ".ai/recall/../../secret.txt", f"{filled}/.ai/recall/../../secret.txt", ".ai/recall/../../../etc/passwd",
        ".ai/recall/%2e%2e/%2e%2e/secret.txt", ".ai/recall/%2e%2e%2fsecret.txt", ".ai/recall/..%5c..%5csecret.txt",
        f".ai/recall/{tmp_path}/secret.txt", ".ai/recall/" + "a/" * 3000 + "leaderboard",
        ".ai/recall/" + "x" * 100000, ".ai/recall/leader\x00board", ".ai/recall/\x00/../../secret.txt",
        ".ai/recall/~/.ssh/id_rsa", ".ai/recall/$(touch pwned)", ".ai/recall/`touch pwned`", ".ai/recall/",
        ".ai/recall//", ".ai/recall/...", ".ai/recall/CON", ".ai/recall/" + "\u00e9" * 500,
    ]
    for path in attempts:
        out = run("pretool", recall_read(path), filled)
        if out:
            text, _ = recall_answer(out, filled)
            assert "TOP-SECRET" not in text and "root:x:0:0" not in text
    # Another project's recall path is not ours to answer.
    assert run("pretool", recall_read(f"{other}/.ai/recall/leaderboard"), filled) == ""
    assert tree(tmp_path, filled / ".ai") == before
    assert not list(other.rglob("*.md"))
    assert not failures(filled), failures(filled)
    for name in os.listdir(filled / ".ai" / "cache" / "recall"):
        assert re.fullmatch(r"[a-z0-9-]{1,80}\.md", name), name

# ---- PostToolUse ----


def test_tool_results_become_messages(proj):
    payloads = [
        post("Read", {"file_path": f"{proj}/src/pool.py"},
             {"type": "text", "file": {"filePath": f"{proj}/src/pool.py",
                                       "content": "def make_pool():\n    return asyncpg.create_pool(min_size=2)\n",
                                       "numLines": 3, "startLine": 1, "totalLines": 3}}),
        post("Write", {"file_path": f"{proj}/docs/cache.md", "content": "# Cache\nThe cache uses LRU eviction.\n"},
             {"type": "create", "filePath": f"{proj}/docs/cache.md", "content": "# Cache\nThe cache uses LRU eviction.\n",
              "structuredPatch": [], "originalFile": None}),
        post("Edit", {"file_path": f"{proj}/src/pool.py", "old_string": "min_size=2", "new_string": "min_size=4",
                      "replace_all": False},
             {"filePath": f"{proj}/src/pool.py", "oldString": "min_size=2", "newString": "min_size=4",
              "originalFile": "...", "structuredPatch": []}),
        post("Bash", {"command": "pytest -q tests/test_pool.py", "description": "pool tests"},
             {"stdout": "5 passed in 0.31s (pool warmup ok)", "stderr": "", "interrupted": False, "isImage": False}),
        post("Task", {"description": "Audit connection leaks", "prompt": "find leaked connections",
                      "subagent_type": "general-purpose"},
             {"status": "completed", "content": [{"type": "text", "text": "Found one leak in the report exporter."}]}),
        post("WebFetch", {"url": "https://magicstack.github.io/asyncpg/", "prompt": "pool defaults?"},
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


def test_reads_of_our_own_files_are_not_captured(filled):
    out = run("pretool", recall_read(".ai/recall/leaderboard"), filled)
    answer = json.loads(out)["hookSpecificOutput"]["updatedInput"]["file_path"]
    before = messages(filled)
    for path in (answer, f"{filled}/.ai/config.json", f"{filled}/.ai/db/index.json"):
        run("capture", post("Read", {"file_path": path}, {"type": "text", "file": {
            "filePath": path, "content": "MARK-RECALLED-TEXT recalled notes", "numLines": 1}}), filled)
    after = messages(filled)
    assert len(after) == len(before)
    assert not any("MARK-RECALLED-TEXT" in m for m in after)


def test_large_tool_output_is_captured_cut(proj):
    big = "line of build output\n" * 300000  # about 6 MB: under the hook's input cap
    run("capture", post("Bash", {"command": "make all"}, {"stdout": big, "stderr": ""}), proj)
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
    run("capture", post("Bash", {"command": "cat .env.production", "description": "show deploy settings"},
                        {"stdout": env_file, "stderr": ""}), proj)
    run("capture", post("Read", {"file_path": f"{proj}/.env.production"},
                        {"type": "text", "file": {"filePath": f"{proj}/.env.production", "content": env_file}}), proj)
    run("capture", post("Write", {"file_path": f"{proj}/deploy.sh",
                                  "content": f"git clone https://deploy:{SECRETS['url_password']}@git.example/shop.git\n"
                                             f"export TOKEN={SECRETS['github']}\n"}, {"type": "create"}), proj)
    run("inject", prompt(f"the shop deploy fails, the key is {SECRETS['anthropic']}"), proj)
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
    run("inject", prompt("Plan the move of user sessions from redis to postgres"), proj)
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
                "inject": prompt("Extract the topics of this text about kafka consumers"),
                "pretool": recall_read(".ai/recall/kafka"),
                "capture": post("Bash", {"command": "ls kafka"}, {"stdout": "consumer.py producer.py"}),
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
