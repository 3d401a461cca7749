"""Section 9 (Hooks) and the daemon's hook side, in-process: the registry, parse_payload,
clean_payload, answer() for every hook on bad and odd input, the recall path rules, the
process shell (run_hook) with a fake daemon, the budget, the journal, transcripts, the
daemon's socket and config upkeep. Process-level contracts live in test_hooks.py and
test_reliability.py."""
import io
import json
import os
import socket
import subprocess
import sys
import time

import pytest

import ai_smartness as ai
from conftest import ROOT

EVENT_OF = {h.name: h.event for h in ai.HOOKS.values()}
TOP_KEYS = {"hookSpecificOutput", "continue", "stopReason", "suppressOutput", "systemMessage", "decision", "reason"}


@pytest.fixture
def store(project):
    return ai.Store(ai.data_dir_of(str(project))).ensure()


def log_records(store):
    try:
        with open(store.log.path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def failures(store):
    return [r for r in log_records(store) if r["msg"] in ("hook failed", "hook over its time budget; answered nothing")]


def inbox_texts(store):
    return [ai.read_json(p)["text"] for p in store.inbox_pending()]


def check_contract(out, event):
    """None, or exactly one JSON object whose hookSpecificOutput names `event`."""
    if out is None:
        return None
    assert isinstance(out, str) and out.startswith("{"), out[:200]
    doc = json.loads(out)
    assert isinstance(doc, dict) and set(doc) <= TOP_KEYS, doc
    spec = doc.get("hookSpecificOutput")
    if spec is not None:
        assert spec.get("hookEventName") == event, (event, doc)
    return doc


# ---- the registry ----

def test_each_hook_is_declared_once_with_its_event_budget_and_route():
    assert sorted(ai.HOOKS) == ["capture", "end", "failure", "inject", "precompact", "pretool", "start", "stop"]
    events = [h.event for h in ai.HOOKS.values()]
    assert len(set(events)) == len(events)
    assert {h.name for h in ai.HOOKS.values() if h.via_daemon} == {"inject", "pretool", "capture", "failure"}
    for h in ai.HOOKS.values():
        assert ai.hook_named(h.name) is h and ai.hook_named(h.event) is h
        assert h.fn.__name__ == "hook_" + h.name and 0 < h.budget <= 20
    assert ai.hook_named("nonsense") is None


@pytest.mark.parametrize("template", ["settings.template.json", "hooks/hooks.json", "codex.template.json",
                                      "gemini.template.json"])
def test_every_installed_hook_ends_its_work_well_before_the_client_kills_it(template):
    """A hook's own budget is at most two thirds of the timeout its client gives it: it answers (or
    gives up, fail open) before the client has to kill it. Gemini counts milliseconds."""
    doc = json.loads((ROOT / template).read_text())
    scale = 1000 if template.startswith("gemini") else 1
    seen = set()
    for entries in doc["hooks"].values():
        for entry in entries:
            for h in entry["hooks"]:
                words = h.get("args") or h["command"].split()
                name = words[-1] if "args" in h else words[words.index("#") - 1]
                seen.add(name)
                assert ai.HOOKS[name].budget * 3 <= 2 * h["timeout"] / scale, (template, name, h["timeout"])
    assert seen <= set(ai.HOOKS) and "stop" in seen


# ---- parse_payload: the bad-input matrix ----

BAD_INPUTS = {
    "malformed": (b'{"hook_event_name": "Stop", "session_id": ', "not JSON"),
    "empty": (b"", "empty"),
    "blank": (b"  \n", "empty"),
    "array": (b'[{"hook_event_name": "Stop"}]', "not an object"),
    "string": (b'"just a string"', "not an object"),
    "binary": (bytes(range(256)) * 4, "not JSON"),
    "nested": (b"[" * 200000, "not JSON"),
    "huge": (b'{"prompt": "' + b"x" * (ai.MAX_HOOK_INPUT + 10) + b'"}', "too large"),
}


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_input_is_refused_with_a_reason(kind):
    data, words = BAD_INPUTS[kind]
    said = []
    assert ai.parse_payload(data, lambda msg, **f: said.append(msg)) is None
    assert len(said) == 1 and words in said[0]


def test_parse_payload_drops_our_own_keys():
    raw = json.dumps({"prompt": "x", ai.CAPTURE_KEY: "c../../x", ai.JOURNALED_KEY: True}).encode()
    assert ai.parse_payload(raw) == {"prompt": "x"}


# ---- answer(): every hook on odd payloads ----

ODD_PAYLOADS = {
    "missing_fields": {},
    "event_only": {"hook_event_name": "PreToolUse"},
    "wrong_types": {"session_id": {"a": 1}, "prompt": 5, "tool_name": ["Read"], "tool_input": "x",
                    "tool_response": 7, "transcript_path": 9, "source": None, "stop_hook_active": "yes",
                    "last_assistant_message": ["x"], "trigger": {}, "custom_instructions": 3, "cwd": []},
    "wrong_inner_types": {"session_id": 12, "tool_name": "Write", "prompt": "a prompt about invoices",
                          "tool_input": {"file_path": {"x": 1}, "content": {"not": "text"}, "edits": "e"},
                          "tool_response": {"content": ["x"], "filePath": 3}, "reason": "r" * 50000},
    "write_list_content": {"tool_name": "Write", "tool_input": {"file_path": "/p/a.py", "content": ["def f(): pass"]},
                           "tool_response": {"content": {"a": 1}}},
    "edit_odd": {"tool_name": "MultiEdit", "tool_input": {"file_path": "/p/a.py", "edits": [1, None, {"old_string": 5}]}},
    "windows_paths": {"session_id": "w", "cwd": "C:\\Users\\dev\\proj", "hook_event_name": "PostToolUse",
                      "transcript_path": "C:\\Users\\dev\\.claude\\projects\\C--Users-dev-proj\\w.jsonl",
                      "tool_name": "Read", "tool_input": {"file_path": "C:\\Users\\dev\\proj\\src\\main.py"},
                      "tool_response": {"type": "text", "file": {"filePath": "C:\\Users\\dev\\proj\\src\\main.py",
                                                                 "content": "def main():\n    run_server()\n"}},
                      "prompt": "look at C:\\Users\\dev\\proj\\src\\main.py and explain run_server"},
    "odd_unicode": {"session_id": "u\u202e\u0000", "hook_event_name": "UserPromptSubmit",
                    "prompt": "r\u00e9sum\u00e9 \U0001F600 \u202eevil\u202c \udcff lone surrogate \u0000 nul \ufeff "
                              "\u65e5\u672c\u8a9e la migraci\u00f3n",
                    "tool_name": "Bash", "tool_input": {"command": "echo \u00e9\U0001F600"},
                    "tool_response": {"stdout": "\u00e9\U0001F600\x1b[31m red \udc80"},
                    "last_assistant_message": "Fini \u2014 \u00e7a marche \U0001F389 avec la migraci\u00f3n",
                    "offset": {"\ud800": 1}},
    "proc_transcript": {"transcript_path": "/proc/self/mem", "session_id": "s", "trigger": "auto"},
}


@pytest.mark.parametrize("name", sorted(ai.HOOKS))
@pytest.mark.parametrize("kind", sorted(ODD_PAYLOADS))
def test_odd_payloads_are_answered_in_process(store, name, kind):
    out = ai.answer(name, json.loads(json.dumps(ODD_PAYLOADS[kind])), store, None)
    check_contract(out, EVENT_OF[name])
    assert not failures(store)


def test_a_stop_whose_heartbeat_cannot_be_read_journals_its_answer_first(store, monkeypatch):
    """The inputs no hook was sent for (their ids seen) and whether the turn answered a greeting
    are read before the answer is journaled: an I/O error there keeps the answer, logged; the
    error the hook meets after the journal is its shell's to log."""
    def unreadable():
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(store, "heartbeat", unreadable)
    with pytest.raises(OSError):
        ai.answer("stop", {"session_id": "s", "last_assistant_message": "The exporter streams rows now."}, store, None)
    assert inbox_texts(store) == ["The exporter streams rows now."]
    assert [r["msg"] for r in log_records(store)] == ["heartbeat unreadable"] * 2  # unhooked inputs, greeting


def test_a_write_whose_content_is_not_text_is_skipped_with_a_log_line(store):
    payload = {"session_id": "s", "tool_name": "Write",
               "tool_input": {"file_path": "/p/notes.md", "content": {"a": 1}}, "tool_response": {"type": "create"}}
    assert ai.answer("capture", payload, store, None) is None  # raised AttributeError before the fix
    ignored = [r for r in log_records(store) if r["msg"] == "hook payload field ignored"]
    assert [r["field"] for r in ignored] == ["tool_input.content"]
    assert inbox_texts(store) == ["Wrote /p/notes.md:"] or all("notes.md" in t for t in inbox_texts(store))


def test_fields_stored_as_they_come_are_typed_and_cut(store):
    ai.answer("end", {"session_id": 42, "reason": "r" * 20000}, store, None)
    hb = store.heartbeat()
    assert hb["last_end_reason"] == "r" * 199 + "…"
    ai.answer("stop", {"session_id": {"nested": 1}, "last_assistant_message": "The exporter streams rows now."},
              store, None)
    assert store.heartbeat()["last_session"] is None
    assert any(r.get("field") == "session_id" for r in log_records(store))


TASK_LIST_NOISE = [
    {"tool_name": "TaskCreate", "tool_input": {"subject": "No id came back"}, "tool_response": {"success": False}},
    {"tool_name": "TaskCreate", "tool_input": {"subject": ["a"]}, "tool_response": {"task": {"id": "1"}}},
    {"tool_name": "TaskCreate", "tool_input": "subject", "tool_response": "Task #1 created successfully: x"},
    {"tool_name": "TaskUpdate", "tool_input": {"taskId": {"a": 1}, "status": "completed"}},
    {"tool_name": "TaskUpdate", "tool_input": {"taskId": "1", "status": "archived"}},
    {"tool_name": "TodoWrite", "tool_input": {"todos": "buy milk"}},
    {"tool_name": "TodoWrite", "tool_input": {"todos": [{"content": "x"}]}, "session_id": None},
]


@pytest.mark.parametrize("payload", TASK_LIST_NOISE)
def test_a_task_list_call_that_says_nothing_usable_changes_nothing(store, payload):
    assert ai.answer("capture", dict({"session_id": "s"}, **payload), store, None) is None
    assert ai.task_lists(store.heartbeat()) == {} and inbox_texts(store) == [] and not failures(store)


def test_task_lists_are_redacted_cut_and_kept_for_the_latest_sessions(store):
    key = "sk-ant-api03-" + "Zq9" * 30
    todos = [{"content": f"Rotate {key} then task {n} " + "x" * 200, "status": "pending"} for n in range(50)]
    for session in "abcdef":
        ai.answer("capture", {"session_id": session, "tool_name": "TodoWrite", "tool_input": {"todos": todos}},
                  store, None)
    plans = ai.task_lists(store.heartbeat())
    assert sorted(plans) == list("cdef")  # PLAN_SESSIONS
    items = plans["f"]["items"]
    assert len(items) == ai.PLAN_ITEMS and items[-1][1].startswith("Rotate [REDACTED")
    assert all(len(x[1]) <= ai.PLAN_ITEM_CHARS for x in items) and key not in json.dumps(store.heartbeat())
    with open(store.heartbeat_file, "w") as fh:  # a list some other writer broke is dropped, not a crash
        json.dump({"plans": {"a": {"at": 1, "items": []}, "b": {"at": "x", "items": [["1", None, "pending"], "z"]}},
                   "prompt_session": "b"}, fh)
    assert ai.open_tasks(store.heartbeat()) == []
    ai.answer("capture", {"session_id": "b", "tool_name": "TaskCreate", "tool_input": {"subject": "Ship it"},
                          "tool_response": "Task #7 created successfully: Ship it"}, store, None)
    assert ai.open_tasks(store.heartbeat()) == ["Ship it"]


# ---- the recall path (F9, F12) ----

def recall(path, cwd=None):
    payload = {"tool_name": "Read", "tool_input": {"file_path": path}}
    if cwd is not None:
        payload["cwd"] = cwd
    return payload


def test_only_this_projects_recall_folder_is_served(tmp_path):
    proj = str(tmp_path / "proj")
    os.makedirs(os.path.join(proj, "sub"))
    q = ai.recall_query
    assert q(recall(".ai/recall/leaderboard", proj), proj) == "leaderboard"
    assert q(recall(".ai/recall/leaderboard"), proj) == "leaderboard"  # no cwd: the project's
    assert q(recall(f"{proj}/.ai/recall/leaderboard%20redis.md"), proj) == "leaderboard redis"
    assert q(recall(".ai\\recall\\a\\b", proj), proj) == "a b"
    assert q(recall("../.ai/recall/x", os.path.join(proj, "sub")), proj) == "x"
    for other in ("vendor/pkg/.ai/recall/x", "sub/.ai/recall/x", "x.ai/recall/y", "/.ai/recall/x",
                  f"{proj}/sub/.ai/recall/x", f"{tmp_path}/.ai/recall/x"):
        assert q(recall(other, proj), proj) is None, other
    assert q(recall(".ai/recall/x", str(tmp_path)), proj) is None  # relative to another folder
    assert q(recall("sub/.ai/recall/x"), proj) is None  # relative to an unknown folder
    assert q(recall(".ai/recall/" + "x" * ai.MAX_RECALL_PATH, proj), proj) is None


def test_a_recall_answer_is_kept_only_until_it_has_been_read(store):
    """A generated answer serves the Read it was made for: older ones go when the next is written
    (no pile of recalled text, no copy of memory left behind)."""
    old = store.write_recall("parser", "old answer")
    recent = store.write_recall("lexer", "recent answer")
    past = time.time() - ai.RECALL_KEEP_SECONDS - 5
    os.utime(old, (past, past))
    new = ai.recall_file(store, "tokens", "new answer")
    assert sorted(os.listdir(store.recall_dir)) == sorted(os.path.basename(p) for p in (recent, new))
    assert ai.clear_recalls(store) == 2 and os.listdir(store.recall_dir) == []


def test_a_long_recall_path_is_refused_at_once(project):
    proj = str(project)
    hostile = recall("/.ai/recall/x" * 20000 + "\nZ", proj)
    benign = recall("/.ai/recall/x" + "\nZ", proj)

    def cost(payload):
        t0 = time.perf_counter()
        for _ in range(20):
            ai.recall_query(payload, proj)
        return time.perf_counter() - t0
    cost(benign)
    # Quadratic before the fix: seconds for this one path, against microseconds.
    assert cost(hostile) < 20 * cost(benign) + 0.02


# ---- the process shell, in-process ----

class FakeDaemon:
    """Stands in for request() and start_daemon(): counts the round trips."""

    def __init__(self, reply=None):
        self.requests, self.starts = [], 0
        self.reply = reply or {"error": "ConnectionRefusedError"}

    def request(self, store, cmd, timeout=2.0, **args):
        self.requests.append((cmd, args))
        return self.reply

    def start(self, store, project):
        self.starts += 1
        return ai.DAEMON_STARTED


@pytest.fixture
def shell(project, monkeypatch):
    """Runs run_hook in this process: stdin and stdout swapped, the daemon faked, the budget
    counted from now (this process started long ago)."""
    import signal
    fake = FakeDaemon()
    monkeypatch.setattr(ai, "request", fake.request)
    monkeypatch.setattr(ai, "start_daemon", fake.start)
    monkeypatch.setattr(ai, "process_age", lambda: 0.0)
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(project))
    previous = signal.getsignal(signal.SIGALRM)

    def run(name, payload):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        monkeypatch.setattr(sys, "stdout", out)
        try:
            assert ai.run_hook(name) == 0
        finally:
            monkeypatch.setattr(sys, "stdout", sys.__stdout__)
        out.flush()
        return out.buffer.getvalue().decode("utf-8")
    run.fake = fake
    run.store = ai.Store(ai.data_dir_of(str(project))).ensure()
    yield run
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_our_own_recall_file_costs_no_daemon_request(shell, project):
    out = shell("pretool", recall(".ai/recall/leaderboard", str(project)))
    answered = json.loads(out)["hookSpecificOutput"]["updatedInput"]["file_path"]
    assert answered.startswith(str(project / ".ai" / "cache" / "recall"))
    shell.fake.requests.clear()
    shell.fake.starts = 0
    # Claude Code now reads that file: its PreToolUse and PostToolUse reach no daemon.
    assert shell("pretool", recall(answered, str(project))) == ""
    read = {"session_id": "s", "tool_name": "Read", "tool_input": {"file_path": answered},
            "tool_response": {"type": "text", "file": {"filePath": answered, "content": "recalled notes"}}}
    assert shell("capture", read) == ""
    assert shell.fake.requests == []
    assert shell.fake.starts == 0
    # The counter counts: any other Read is sent to the daemon.
    assert shell("capture", dict(read, tool_input={"file_path": str(project / "src" / "a.py")})) == ""
    assert len(shell.fake.requests) == 1


def test_a_warm_daemon_journals_the_prompt_and_the_shell_journals_only_without_one(shell):
    asked = []
    ai.request = shell.fake.request = lambda store, cmd, timeout=2.0, **args: asked.append(args) or \
        {"ok": True, "stdout": ""}
    shell("inject", {"session_id": "s", "prompt": "Migrate the orders table to monthly partitions"})
    assert len(asked) == 1 and shell.store.inbox_pending() == []  # the daemon's to journal
    ai.request = shell.fake.request = lambda store, cmd, timeout=2.0, **args: asked.append(args) or \
        {"error": "ConnectionRefusedError"}
    shell("inject", {"session_id": "s", "prompt": "Split the invoices job by customer"})
    assert inbox_texts(shell.store) == ["Split the invoices job by customer"]
    # A daemon that journaled but answered too late: the shell's journal has the same id.
    assert os.path.basename(shell.store.inbox_pending()[0]) == asked[-1]["payload"][ai.CAPTURE_KEY] + ".json"


def test_the_daemon_journals_a_prompt_before_embedding_it(store, monkeypatch):
    daemon = ai.Daemon.__new__(ai.Daemon)
    daemon.store, daemon.ready = store, True
    seen = []

    def stop_here(*args, **kw):
        seen.append(inbox_texts(store))
        raise RuntimeError("stop here")
    monkeypatch.setattr(ai.Daemon, "_refresh_config", stop_here)
    payload = {"session_id": "s", "prompt": "Cache the tax rates per region", ai.CAPTURE_KEY: ai.new_id("c")}
    with pytest.raises(RuntimeError):
        daemon.cmd_hook("inject", payload)
    assert seen == [["Cache the tax rates per region"]] and payload[ai.JOURNALED_KEY]


def test_a_prompt_survives_a_budget_that_ends_during_retrieval(shell, monkeypatch):
    monkeypatch.setattr(ai.HOOKS["inject"], "budget", 0.3)

    def slow(*args, **kw):
        time.sleep(3)
    monkeypatch.setattr(ai, "lexical_memory", slow)
    assert shell("inject", {"session_id": "s", "prompt": "Index the invoices table by customer id"}) == ""
    assert inbox_texts(shell.store) == ["Index the invoices table by customer id"]
    assert [r["msg"] for r in log_records(shell.store)][-1] == "hook over its time budget; answered nothing"


def test_the_budget_cannot_interrupt_the_journal_write(shell, monkeypatch):
    monkeypatch.setattr(ai.HOOKS["capture"], "budget", 0.2)
    real = ai.Store.inbox_append

    def slow_append(self, entry, name=None):
        time.sleep(0.5)  # the alarm comes now
        return real(self, entry, name)
    monkeypatch.setattr(ai.Store, "inbox_append", slow_append)
    bash = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "make"},
            "tool_response": {"stdout": "build ok for the parser module"}}
    assert shell("capture", bash) == ""
    assert len(shell.store.inbox_pending()) == 1, log_records(shell.store)


def test_a_capture_that_cannot_be_journaled_is_logged_as_dropped(shell, monkeypatch):
    def full(self, entry, name=None):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(ai.Store, "inbox_append", full)
    out = shell("inject", {"session_id": "s", "prompt": "Index the invoices table by customer id"})
    check_contract(out or None, "UserPromptSubmit")
    assert [r for r in log_records(shell.store) if r["msg"] == "capture dropped"]
    assert not failures(shell.store)


def test_the_budget_counts_from_process_start(shell, monkeypatch):
    monkeypatch.setattr(ai, "process_age", lambda: 10.0)  # the budget was spent before main()
    monkeypatch.setattr(ai, "lexical_memory", lambda *a, **k: time.sleep(3))
    t0 = time.monotonic()
    shell("inject", {"session_id": "s", "prompt": "Index the invoices table by customer id"})
    assert time.monotonic() - t0 < 2.0


def test_a_capture_whose_budget_was_spent_starting_is_still_journaled(shell, monkeypatch):
    """Under load, starting the interpreter can eat the whole budget: the capture is still
    journaled, and only then does the budget end the hook."""
    monkeypatch.setattr(ai, "process_age", lambda: 10.0)
    slow = shell.fake.request

    def loaded_request(*args, **kw):  # the daemon round trip of a loaded machine
        time.sleep(0.3)
        return slow(*args, **kw)
    monkeypatch.setattr(ai, "request", loaded_request)
    bash = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "make"},
            "tool_response": {"stdout": "build ok for the parser module"}}
    assert shell("capture", bash) == ""
    shell("inject", {"session_id": "s", "prompt": "Index the invoices table by customer id"})
    real = ai.prepare_capture
    monkeypatch.setattr(ai, "prepare_capture", lambda *a, **k: time.sleep(0.3) or real(*a, **k))
    shell("stop", {"session_id": "s", "last_assistant_message": "The parser now streams invoices."})
    assert sorted(inbox_texts(shell.store)) == ["$ make\nbuild ok for the parser module",
                                                "Index the invoices table by customer id",
                                                "The parser now streams invoices."]


def test_process_age_reads_this_process():
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", "import time; time.sleep(0.3); import sys; "
                           f"sys.path.insert(0, {str(ROOT)!r}); import ai_smartness; print(ai_smartness.process_age())"],
                          capture_output=True, text=True, timeout=60)
    assert 0.25 <= float(proc.stdout) < 30


def test_a_late_error_against_the_budget_still_exits_0(project):
    """The REVIEW's F7 reproduction: a logic error right before the budget ends, 20 runs."""
    code = ("import sys, signal; sys.path.insert(0, sys.argv[1]); import ai_smartness as a\n"
            "def f(s, p, m):\n"
            "    while signal.getitimer(signal.ITIMER_REAL)[0] > 0.002: pass\n"
            "    raise ValueError('late')\n"
            "a.HOOKS['end'].fn = f; a.HOOKS['end'].budget = 0.4; sys.modules.pop('traceback', None)\n"
            "a.main(sys.argv[2:])")
    env = dict(os.environ, CLAUDE_PROJECT_DIR=str(project))
    results = []
    for batch in range(5):
        procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", code, str(ROOT), "hook", "end"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
                 for _ in range(4)]
        for p in procs:
            out, err = p.communicate(b'{"session_id": "s"}', timeout=60)
            results.append((p.returncode, out, err))
    assert [r for r in results if r != (0, b"", b"")] == []


# ---- transcripts (F10) ----

def test_a_transcript_line_that_cannot_parse_skips_only_that_line(tmp_path):
    good = [json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": f"Answer {i}."}]}})
            for i in range(2)]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join([good[0].encode(), b"[" * 200000, b"\xff\xfe{", good[1].encode()]) + b"\n")
    assert ai.transcript_texts(str(path)) == [("assistant", "Answer 0."), ("assistant", "Answer 1.")]
    assert ai.transcript_texts("/proc/self/mem") == []
    assert ai.transcript_texts("/nonexistent\x00x") == []


def test_stop_with_an_unreadable_transcript_still_beats(store):
    ai.answer("stop", {"session_id": "s", "transcript_path": "/proc/self/mem"}, store, None)
    assert store.heartbeat()["beats"] == 1
    assert not failures(store)


# ---- the daemon's side: framing, socket upkeep, config ----

def test_one_framing_pair_carries_any_string():
    a, b = socket.socketpair()
    try:
        ai.send_msg(a, {"cmd": "hook", "args": {"\ud800": "x\udcff\n", "p": "\u00e9" * 10}})
        assert ai.recv_msg(b) == {"cmd": "hook", "args": {"\ud800": "x\udcff\n", "p": "\u00e9" * 10}}
        ai.send_msg(a, {"x": "y" * 5000})
        with pytest.raises(ValueError):
            ai.recv_msg(b, limit=1000)
    finally:
        a.close()
        b.close()


@pytest.fixture
def daemon(project):
    """A Daemon object serving its socket, without the model or the work loop."""
    d = ai.Daemon(str(project))
    d._bind()
    yield d
    d.stopping.set()
    d.server.close()
    ai.Store._unlink(d.socket)


def test_a_deleted_socket_is_bound_again(daemon):
    assert ai.request(daemon.store, "ping").get("ok")
    os.unlink(daemon.socket)
    assert "error" in ai.request(daemon.store, "ping")
    daemon._check_socket()
    assert ai.request(daemon.store, "ping").get("ok")
    assert not daemon.stopping.is_set()


def test_a_foreign_file_at_the_socket_path_retires_the_daemon(daemon):
    os.unlink(daemon.socket)
    with open(daemon.socket, "w") as fh:
        fh.write("not ours")
    daemon._check_socket()
    assert daemon.stopping.is_set()
    assert open(daemon.socket).read() == "not ours"  # left where it is


def test_the_daemon_follows_a_config_edit(daemon, project):
    daemon.mem = ai.Memory(daemon.store.dir)
    daemon.mem.ensure_loaded()
    daemon.ready = True
    daemon._refresh_config()
    assert daemon.mem.cfg["inject_budget"] == ai.DEFAULT_CONFIG["inject_budget"]
    (project / ".ai" / "config.json").write_text(json.dumps({"inject_budget": 777, "language": "fr"}))
    reply = daemon.cmd_hook("inject", {"session_id": "s", "prompt": "Index the invoices table by customer id"})
    assert reply["ok"] and daemon.mem.cfg["inject_budget"] == 777 and daemon.mem.lang == "fr"
    text = json.loads(reply["stdout"])["hookSpecificOutput"]["additionalContext"]
    assert text.startswith(ai.tr("memory_header", "fr")[:20])


def test_a_warming_daemon_says_so_by_name(daemon):
    reply = daemon.cmd_hook("inject", {"prompt": "hello there friend"})
    assert reply == {"error": ai.DAEMON_WARMING}
    assert daemon.cmd_hook("capture", {"tool_name": "Bash", "tool_input": {"command": "make"},
                                       "tool_response": {"stdout": "build ok"}})["ok"]


def test_a_bare_connection_does_not_retire_the_daemon(daemon):
    for data in (b"", b"garbage\n", b'{"cmd": "stop"}\n'):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)  # a retired daemon accepts no more: the recv would wait forever
        sock.connect(daemon.socket)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1000)  # the reply: the request was handled
        sock.close()
    assert not daemon.stopping.is_set()
    assert ai.request(daemon.store, "ping").get("ok")
