"""Filesystem security and reliability of the storage layer: the daemon socket (F1), symlinks
planted in the data dir (F2), the project folder, stale temp files and modes (F12), transient
I/O errors and a full disk (F5)."""
import errno
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import ai_smartness as ais
from conftest import ROOT, SCRIPT

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create files owned by another uid")
OTHER_UID = 4242


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def snapshot(folder):
    """Every file below `folder` with its content and mode, and the folder's own mode."""
    out = {".": mode(folder)}
    for base, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, folder)
            out[rel] = (mode(path), None if os.path.isdir(path) else open(path, "rb").read())
    return out


@pytest.fixture
def outside(tmp_path):
    """A folder outside the project, with one file, that nothing may touch."""
    folder = tmp_path / "outside"
    folder.mkdir()
    os.chmod(folder, 0o755)
    (folder / "victim").write_text("export KEEP=1\n")
    os.chmod(folder / "victim", 0o644)
    return folder


@pytest.fixture
def store(project):
    return ais.Store(str(project / ".ai")).ensure()


def long_project(tmp_path, suffix="proj"):
    path = tmp_path / ("long_folder_name_" * 6) / suffix
    path.mkdir(parents=True)
    assert len(str(path / ".ai" / "daemon.sock")) > ais.MAX_SOCKET_PATH
    return path


@pytest.fixture
def no_proc_fd(tmp_path, monkeypatch):
    """A platform without /proc/self/fd and without XDG_RUNTIME_DIR: long socket paths fall back
    to a folder of a private stand-in for /tmp."""
    import tempfile
    shared = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))  # as short as /tmp itself, nearly
    os.chmod(shared, 0o1777)
    monkeypatch.setattr(ais, "PROC_FD_DIR", str(tmp_path / "no-proc"))
    monkeypatch.setattr(ais, "SOCKET_TMP_ROOT", str(shared))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield shared
    shutil.rmtree(shared)


# -- F1: the socket --

@needs_root
def test_a_socket_folder_made_by_another_user_is_refused_and_nothing_is_sent(tmp_path, no_proc_fd):
    store = ais.Store(str(long_project(tmp_path) / ".ai")).ensure()
    folder = no_proc_fd / f"ai_smartness-{os.getuid()}"
    folder.mkdir(mode=0o700)
    os.chown(folder, OTHER_UID, OTHER_UID)  # created first by another local user
    # Whatever listens where our socket would go must get no connection.
    trap = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    trap.bind(str(folder / (__import__("hashlib").sha256(store.dir.encode()).hexdigest() + ".sock")))
    trap.listen(1)
    trap.setblocking(False)
    try:
        reply = ais.request(store, "hook", name="inject", payload={"prompt": "my secret plans"})
        assert "error" in reply
        with pytest.raises(BlockingIOError):
            trap.accept()
    finally:
        trap.close()
    with pytest.raises(ais.DaemonError):
        ais.socket_path(store)
    assert "socket folder refused" in open(store.log.path).read()


def test_a_socket_folder_that_is_a_symlink_or_shared_is_refused(tmp_path, no_proc_fd):
    store = ais.Store(str(long_project(tmp_path) / ".ai")).ensure()
    folder = no_proc_fd / f"ai_smartness-{os.getuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder.symlink_to(elsewhere)
    with pytest.raises(ais.DaemonError):
        ais.socket_path(store)
    folder.unlink()
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(ais.DaemonError):
        ais.socket_path(store)
    assert mode(folder) == 0o777  # refused, not "fixed" by a chmod


def test_the_socket_folder_we_make_is_private(tmp_path, no_proc_fd):
    store = ais.Store(str(long_project(tmp_path) / ".ai")).ensure()
    old = os.umask(0)
    try:
        path = ais.socket_path(store)
    finally:
        os.umask(old)
    assert os.path.dirname(path) == str(no_proc_fd / f"ai_smartness-{os.getuid()}")
    assert mode(os.path.dirname(path)) == 0o700 and len(path) <= ais.MAX_SOCKET_PATH


def test_two_long_paths_never_share_a_socket(tmp_path, no_proc_fd):
    # Equal-length suffixes whose CRC32 collide: they shared one socket when keyed by CRC32.
    import zlib
    a, b = (ais.Store(str(long_project(tmp_path, name) / ".ai")) for name in ("name_p09685295", "name_p12060020"))
    assert zlib.crc32(a.dir.encode()) == zlib.crc32(b.dir.encode())
    assert ais.socket_path(a) != ais.socket_path(b)


def test_a_long_path_socket_stays_in_the_data_dir_where_proc_fd_exists(tmp_path):
    if not os.path.isdir(ais.PROC_FD_DIR):
        pytest.skip("no /proc/self/fd on this platform")
    store = ais.Store(str(long_project(tmp_path) / ".ai")).ensure()
    assert ais.socket_path(store) == store.socket_file
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ais._at_socket(store.socket_file, server.bind)
    server.listen(1)
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ais._at_socket(store.socket_file, client.connect)
        client.close()
    finally:
        server.close()
    assert stat.S_ISSOCK(os.lstat(store.socket_file).st_mode)


@needs_root
def test_a_socket_peer_of_another_uid_gets_nothing(store):
    """A process of another uid listening at our socket path (it took it over somehow) is
    recognised by SO_PEERCRED before any payload leaves."""
    if not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("no SO_PEERCRED on this platform")
    server = textwrap.dedent(f"""
        import os, socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind({store.socket_file!r})
        os.setgid({OTHER_UID}); os.setuid({OTHER_UID})  # the peer's credentials are taken at listen()
        s.listen(1)
        print("ready", flush=True)
        conn, _ = s.accept()
        conn.settimeout(3)
        data = b""
        try:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        print(len(data), flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", server], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        reply = ais.request(store, "hook", name="inject", payload={"prompt": "my secret plans"})
        assert "error" in reply and str(OTHER_UID) in reply["error"]
        assert proc.stdout.readline().strip() == "0"  # not one byte sent
    finally:
        proc.kill()
        proc.wait()
    assert "another user; nothing sent" in open(store.log.path).read()


# -- F2: symlinks planted in the data dir --

def _recall(store):
    return store.write_recall("notes about the parser", "the answer\n")


def _capture(store):
    mem = ais.Memory(store.dir)
    mem.capture("a note about the tokenizer stages of the parser", source="prompt")


def _heartbeat(store):
    store.update_heartbeat(last="x")
    assert store.heartbeat()["last"] == "x"


PLANTS = {
    # where a symlink is planted (relative to .ai): the operation that writes there
    "logs/ai_smartness.log": lambda store: store.log.error("a line", query="$(touch pwned)"),
    "logs": lambda store: store.log.error("a line"),
    "logs/daemon.log": lambda store: os.close(store.open_daemon_log()),
    "cache/recall": _recall,
    "cache": _recall,
    "inbox": lambda store: store.inbox_append({"text": "a capture", "source": "prompt", "ts": 1.0}),
    "db/threads": _capture,
    "db": _capture,
    "heartbeat.json": _heartbeat,
    "db/synthesis": lambda store: store.write_synthesis({"text": "s"}, time.time()),
    "db/.lock": lambda store: store.lock().__enter__().__exit__(),
}


@pytest.mark.parametrize("where", sorted(PLANTS))
def test_a_planted_symlink_is_never_followed(store, outside, where):
    target = outside if where in ("logs", "cache/recall", "cache", "inbox", "db/threads", "db", "db/synthesis") \
        else outside / "victim"
    link = os.path.join(store.dir, where)
    if os.path.isdir(link) and not os.path.islink(link):
        shutil.rmtree(link)
    elif os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)
    before = snapshot(outside)
    PLANTS[where](store)
    assert snapshot(outside) == before
    assert not os.path.islink(link) or where == "heartbeat.json" and not os.path.lexists(link)


def test_a_symlink_replaced_by_a_folder_is_logged(store, outside):
    link = store.recall_dir
    os.rmdir(link)
    os.symlink(outside, link)
    path = store.write_recall("parser", "x")
    assert os.path.dirname(path) == link and os.path.isdir(link) and not os.path.islink(link)
    assert mode(link) == 0o700
    assert "symlink in the data dir replaced by a folder" in open(store.log.path).read()


def test_a_symlink_at_a_temp_name_is_never_followed(store, outside, monkeypatch):
    """Even a temp name guessed right: it is created exclusively, so a planted link makes the
    writer pick another name, never write through it."""
    names = iter(["planted"])
    real = ais._temp_suffix
    monkeypatch.setattr(ais, "_temp_suffix", lambda: next(names, None) or real())
    os.symlink(outside / "victim", os.path.join(store.dir, "heartbeat.json.tmpplanted"))
    before = snapshot(outside)
    store.update_heartbeat(last="y")
    assert snapshot(outside) == before
    assert store.heartbeat()["last"] == "y"


def test_temp_names_are_unguessable():
    """64 random bits each: not the pid, not a counter."""
    names = [ais._temp_suffix() for _ in range(100)]
    assert len(set(names)) == 100 and all(len(n) == 16 for n in names)


def test_a_symlinked_record_is_quarantined_not_read(store, outside):
    (outside / "t1.json").write_text(json.dumps({"id": "t1", "status": "active", "messages": []}))
    os.symlink(outside / "t1.json", store.thread_file("t1"))
    assert list(store.iter_threads()) == []
    assert store.quarantined() and (outside / "t1.json").exists()


def test_reading_a_record_never_follows_a_symlink(store, outside):
    (outside / "config.json").write_text(json.dumps({"language": "fr"}))
    os.symlink(outside / "config.json", store.config_file)
    with pytest.raises(ais.CorruptRecord):
        ais.read_json(store.config_file)


def test_make_private_dir_never_chmods_through_a_link(store, outside):
    link = os.path.join(store.dir, "cache", "recall")
    os.rmdir(link)
    os.symlink(outside, link)
    ais.make_private_dir(link)
    assert mode(outside) == 0o755 and not os.path.islink(link)


# -- F12: project folder, stale temp files, modes --

def test_a_nonexistent_project_is_not_created(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "no" / "such" / "project"
    assert ais.main(["--project", str(missing), "status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not found" in err
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(missing))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"session_id": "s", "prompt": "hello there"}')))
    assert ais.main(["hook", "inject"]) == 0
    assert capsys.readouterr().out == ""
    assert not (tmp_path / "no").exists()


def test_stale_temp_files_are_listed_and_removed(store):
    old = time.time() - ais.STALE_TEMP_SECONDS - 60
    stale = [os.path.join(store.threads_dir, "t1.json.tmp1234abcdef.3"),  # an older naming
             os.path.join(store.recall_dir, "q-1.md.tmp4321"),
             os.path.join(store.dir, "heartbeat.json.tmp" + "ab" * 8)]
    fresh = os.path.join(store.inbox_dir, "c1.json.tmp" + "cd" * 8)  # a writer at work now
    keep = os.path.join(store.threads_dir, "t2.json")
    for path in stale + [fresh, keep]:
        open(path, "w").close()
    for path in stale + [keep]:
        os.utime(path, (old, old))
    assert store.stale_temp_files() == sorted(stale)
    assert store.remove_stale_temp_files() == 3
    assert store.stale_temp_files() == [] and os.path.exists(fresh) and os.path.exists(keep)


def test_everything_created_is_private_under_umask_000(project):
    old = os.umask(0)
    try:
        store = ais.Store(str(project / ".ai")).ensure()
        store.log.info("a line")
        os.close(store.open_daemon_log())
        store.write_recall("parser", "text")
        store.update_heartbeat(x=1)
        store.write_synthesis({"text": "s"}, time.time())
        ais.Memory(store.dir).capture("a note about the tokenizer stages of the parser", source="prompt")
        with store.lock():
            pass
    finally:
        os.umask(old)
    for base, dirs, files in os.walk(store.dir):
        for name in dirs:
            assert mode(os.path.join(base, name)) == 0o700, name
        for name in files:
            assert mode(os.path.join(base, name)) == 0o600, name
    assert mode(store.dir) == 0o700


def test_main_sets_a_private_umask(project, capsys):
    old = os.umask(0)
    try:
        ais.main(["--project", str(project), "status"])
        assert os.umask(0) == 0o077
    finally:
        os.umask(old)


# -- F5: transient I/O errors --

def _entry(store, text):
    return store.inbox_append(ais.prepare_capture(text, source="prompt"))


def test_a_transient_read_error_is_raised_not_quarantined(store, monkeypatch):
    _entry(store, "a note about the tokenizer stages")
    path = store.inbox_pending()[0]

    def failing(*args, **kw):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(ais, "open_data_file", failing)
    with pytest.raises(OSError) as info:
        store.inbox_read(path)
    assert ais.is_transient(info.value)
    monkeypatch.undo()
    assert store.quarantined() == [] and store.inbox_pending() == [path]


def test_a_bad_record_is_still_quarantined(store):
    with open(os.path.join(store.inbox_dir, "cbad.json"), "w") as fh:
        fh.write("{not json")
    assert store.inbox_read(os.path.join(store.inbox_dir, "cbad.json")) is None
    assert len(store.quarantined()) == 1


def test_a_daemon_drain_on_a_full_disk_keeps_the_journal_and_backs_off(project, monkeypatch):
    daemon = ais.Daemon(str(project))
    daemon.mem = ais.Memory(daemon.store.dir)
    for i in range(3):
        _entry(daemon.store, f"capture number {i} about the tokenizer stages")
    pending = daemon.store.inbox_pending()

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(daemon.mem, "drain", full)
    assert daemon._drain_failed(OSError(errno.ENOSPC, "No space left on device")) is None
    first = daemon.retry_delay
    assert daemon._drain_failed(OSError(errno.ENOSPC, "No space left on device")) is None
    assert daemon.retry_delay == 2 * first and daemon.retry_at > time.monotonic()
    assert daemon.store.inbox_pending() == pending and daemon.store.quarantined() == []
    assert "drain postponed: transient I/O error" in open(daemon.store.log.path).read()
    # A deterministic failure on the retry still quarantines the one bad capture.
    monkeypatch.setattr(daemon.mem, "drain", lambda **kw: (_ for _ in ()).throw(ValueError("bad record")))
    assert daemon._drain_failed(ValueError("bad record")) == {}
    assert len(daemon.store.quarantined()) == 1


FULL_DISK = """
import errno, json, os, subprocess, sys
sys.path.insert(0, {root!r})
import ai_smartness as ais
disk = sys.argv[1]
project = os.path.join(disk, "proj")
os.mkdir(project)
mem = ais.open_memory(project)
store = mem.store
for i in range(10):
    store.inbox_append(ais.prepare_capture(f"marker{{i}} captured about the parser stages", source="prompt"))
import fcntl
lock = os.open(store.run_lock_file, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(lock, fcntl.LOCK_EX)  # a daemon "alive": the hook below starts no real one
filler = os.path.join(disk, "filler")
with open(filler, "wb") as fh:
    try:
        while True:
            fh.write(b"x" * 65536)
            fh.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
for name in ("x1", "x2", "x3", "x4"):  # the last blocks as well
    try:
        with open(os.path.join(disk, name), "wb") as fh:
            fh.write(b"x" * 4096)
    except OSError:
        pass
daemon = ais.Daemon(project)
daemon.mem = mem
failures = 0
for attempt in range(3):
    try:
        mem.drain(batch=4, once=True)
    except Exception as exc:
        failures += 1
        assert ais.is_transient(exc), repr(exc)
        assert daemon._drain_failed(exc) is None
hook = subprocess.run([sys.executable, {script!r}, "hook", "capture"], capture_output=True,
                      input=json.dumps({{"session_id": "s", "tool_name": "Bash", "tool_input": {{"command": "ls"}},
                                        "tool_response": {{"stdout": "marker-hook output of the listing"}}}}).encode(),
                      env=dict(os.environ, CLAUDE_PROJECT_DIR=project), timeout=60)
pending_full = len(store.inbox_pending())
quarantined_full = len(store.quarantined())
os.unlink(filler)
mem.loaded = False
mem.drain()
texts = [m["text"] for t in mem.store.iter_threads() for m in t["messages"]]
print(json.dumps({{"failures": failures, "pending_full": pending_full, "quarantined_full": quarantined_full,
                  "quarantined": store.quarantined(), "pending": len(store.inbox_pending()),
                  "counts": [sum(f"marker{{i}} " in t for t in texts) for i in range(10)],
                  "hook_rc": hook.returncode, "hook_out": hook.stdout.decode()}}))
"""


def test_a_full_disk_loses_nothing_and_quarantines_nothing(tmp_path):
    """Captures journaled, the disk filled, a drain tried (it fails), the space freed, a drain
    again: every capture stored exactly once, nothing quarantined; a hook on the full disk
    exits 0 and prints nothing. Runs in a child in a private mount namespace on a small tmpfs."""
    if not shutil.which("unshare"):
        pytest.skip("unshare is not installed")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {tmp_path}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace with tmpfs here: {probe.stderr.strip()}")
    disk = tmp_path / "disk"
    disk.mkdir()
    child = tmp_path / "child.py"
    child.write_text(FULL_DISK.format(root=str(ROOT), script=str(SCRIPT)))
    proc = subprocess.run(["unshare", "-m", "sh", "-c",
                           'mount --make-rprivate / && mount -t tmpfs -o size=2m,mode=0700 tmpfs "$1" '
                           '&& exec "$2" "$3" "$1"', "sh", str(disk), sys.executable, str(child)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["failures"] >= 1  # the drain did meet the full disk
    assert out["pending_full"] >= 10 and out["quarantined_full"] == 0
    assert out["hook_rc"] == 0 and out["hook_out"] == ""
    assert out["quarantined"] == [] and out["pending"] == 0
    assert out["counts"] == [1] * 10


@needs_root
def test_a_refused_socket_folder_starts_no_daemon_and_hooks_still_work(tmp_path, no_proc_fd, monkeypatch, capsys):
    project = long_project(tmp_path)
    folder = no_proc_fd / f"ai_smartness-{os.getuid()}"
    folder.mkdir(mode=0o700)
    os.chown(folder, OTHER_UID, OTHER_UID)
    store = ais.Store(str(project / ".ai")).ensure()
    assert ais.start_daemon(store, str(project)) == ais.DAEMON_REFUSED
    assert not ais.daemon_alive(store)
    # The hook falls back to its in-process work: the prompt is journaled all the same.
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(project))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        json.dumps({"session_id": "s", "prompt": "the tokenizer stages of the parser"}).encode())))
    assert ais.main(["hook", "inject"]) == 0
    assert len(store.inbox_pending()) == 1 and not ais.daemon_alive(store)
    assert ais.main(["--project", str(project), "daemon", "start"]) == 4
    assert "no private folder" in capsys.readouterr().err
