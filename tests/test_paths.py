"""Paths and the data dir: Store owns every path, a data dir that is a symlink or not a
private folder of this user is refused everywhere (hooks, CLI, install.sh), daemon.json is
untrusted input, and partial loads quarantine what a full load quarantines."""
import fcntl
import json
import os
import re
import subprocess

import pytest

import ai_smartness as ais
from conftest import ROOT, cli, hook
from support import bash_payload, prompt_payload, start_payload, store_of

OTHER_UID = 4242
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a folder owned by another uid")


def tree(folder):
    """Every path below `folder` with its mode and bytes: equal trees mean nothing changed."""
    out = {}
    for base, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(base, name)
            st = os.lstat(path)
            out[os.path.relpath(path, folder)] = (st.st_mode, None if os.path.isdir(path) else open(path, "rb").read())
    return out


def log_text(store):
    try:
        return open(store.log_file).read()
    except FileNotFoundError:
        return ""


# ---- Store owns every path ----

def section(source, number):
    start = source.index(f"# ==== {number}.")
    end = source.find("# ==== ", start + 1)
    return source[start:end if end > 0 else len(source)]


def test_no_data_dir_path_is_built_outside_store():
    source = (ROOT / "ai_smartness.py").read_text()
    outside = source.replace(section(source, 3), "")
    built = re.findall(r"os\.path\.join\((?:self\.)?(?:mem\.)?store\.[^)]*\)", outside)
    assert built == []
    assert re.findall(r"\bstore\.path\(|\.thread_path\(|\.bridge_path\(", outside) == []
    assert not hasattr(ais.Store, "thread_path") and not hasattr(ais.Store, "path")


# ---- the data dir itself ----

@pytest.fixture
def outside(tmp_path):
    """A folder outside the project laid out like a data dir, that nothing may touch."""
    folder = tmp_path / "outside"
    ais.Store(str(folder)).ensure()
    (folder / "user_rules.json").write_text(json.dumps({"schema": 1, "rules": [{"text": "planted rule"}]}))
    return folder


def refused_everywhere(project, watched):
    """Hooks exit 0 and print nothing, the CLI prints one line and exits 1, and nothing under
    `watched` changed."""
    before = tree(watched)
    for name, payload in (("inject", prompt_payload("how do we rotate the signing keys?", project=project)),
                          ("capture", bash_payload("refusedmarker", project=project)),
                          ("start", start_payload(project=project))):
        proc = hook(name, payload, project)
        assert proc.returncode == 0 and proc.stdout == b"", (name, proc.stdout, proc.stderr)
    for args in (("status",), ("rules", "add", "always test"), ("capture", "a note about the parser")):
        proc = cli(*args, project=project)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and "data dir refused" in lines[0], proc.stderr
    assert tree(watched) == before


def test_a_symlinked_data_dir_is_refused(project, outside):
    os.symlink(outside, project / ".ai")
    with pytest.raises(ais.UnsafeDataDir, match="symlink"):
        ais.Store(str(project / ".ai")).ensure()
    refused_everywhere(project, outside)
    assert sorted(os.listdir(project)) == [".ai"] and os.path.islink(project / ".ai")


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_data_dir_others_may_write_is_refused(project, mode):
    ais.Store(str(project / ".ai")).ensure()
    os.chmod(project / ".ai", mode)
    with pytest.raises(ais.UnsafeDataDir, match="writable"):
        ais.Store(str(project / ".ai")).rules()  # refused on read too: a planted file is not read
    refused_everywhere(project, project)


@needs_root
def test_a_data_dir_of_another_user_is_refused(project):
    data = project / ".ai"
    data.mkdir(mode=0o700)
    os.chown(data, OTHER_UID, OTHER_UID)
    with pytest.raises(ais.UnsafeDataDir, match=f"uid {OTHER_UID}"):
        ais.Store(str(data)).ensure()
    refused_everywhere(project, project)
    assert os.listdir(data) == []


def test_our_own_private_data_dir_is_accepted_and_tightened(project):
    data = project / ".ai"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    store = ais.Store(str(data)).ensure()
    assert os.stat(data).st_mode & 0o777 == 0o700 and store.rules() == []


def test_a_socket_in_a_refused_data_dir_is_never_reached(project, outside):
    """request() connects through the folder open_dir accepted, never through the link."""
    os.symlink(outside, project / ".ai")
    store = ais.Store(str(project / ".ai"))
    import socket
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(outside / "daemon.sock"))
    listener.listen(1)
    listener.settimeout(0.2)
    try:
        reply = ais.request(store, "ping", timeout=0.5)
        assert "data dir refused" in reply["error"]
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


def install(project, home):
    env = dict(os.environ, HOME=str(home), AI_SMARTNESS_HOME=str(home / "ais_home"))
    return subprocess.run(["bash", str(ROOT / "install.sh"), "--no-embeddings", str(project)], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def test_install_refuses_a_symlinked_or_shared_data_dir(project, outside, tmp_path):
    home = tmp_path / "home"
    os.symlink(outside, project / ".ai")
    before = tree(outside)
    proc = install(project, home)
    assert proc.returncode == 1 and "is a symlink: refused" in proc.stderr, proc.stderr
    assert tree(outside) == before and not (project / ".claude").exists()
    os.unlink(project / ".ai")
    (project / ".ai").mkdir()
    os.chmod(project / ".ai", 0o775)
    proc = install(project, home)
    assert proc.returncode == 1 and "writable by group or others" in proc.stderr, proc.stderr
    assert os.listdir(project / ".ai") == []


# ---- daemon.json is untrusted input ----

@pytest.mark.parametrize("doc", [{"socket": 5}, {"pid": "x"}, {"pid": [1]}, {"pid": True}, {"pid": 0},
                                 {"version": 3}, {"ready": "yes"}, ["not", "an", "object"]])
def test_a_mistyped_daemon_status_means_no_daemon(project, doc):
    store = store_of(project).ensure()
    status = dict(pid=os.getpid(), socket=store.socket_file, version=ais.VERSION, ready=True)
    with open(store.daemon_file, "w") as fh:
        json.dump(dict(status, **doc) if isinstance(doc, dict) else doc, fh)
    assert ais.daemon_info(store) == {}
    fd = os.open(store.run_lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # "alive", but nothing listens: the hook answers in-process
    try:
        assert ais.stop_daemon(store, timeout=0.1) is False  # nothing signalled, no TypeError
        assert ais.daemon_unreachable(store, patience=0.1) is True
        assert ais.start_daemon(store, str(project)) == ais.DAEMON_RUNNING
        proc = hook("capture", bash_payload("statusmarker", project=project), project)
        assert proc.returncode == 0 and proc.stdout == b""
        entries = [ais.read_json(p) for p in store.inbox_pending()]
        assert len(entries) == 1 and "statusmarker" in entries[0]["text"]
        assert "hook failed" not in log_text(store)
    finally:
        os.close(fd)


def test_start_daemon_states_are_named(project):
    store = store_of(project).ensure()
    fd = os.open(store.run_lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert ais.start_daemon(store, str(project)) == ais.DAEMON_RUNNING
        with open(store.daemon_file, "w") as fh:
            json.dump({"pid": os.getpid(), "version": "0.0.0-older"}, fh)
        assert ais.start_daemon(store, str(project)) == ais.DAEMON_RETIRING
    finally:
        os.close(fd)
    assert len({ais.DAEMON_RUNNING, ais.DAEMON_STARTED, ais.DAEMON_RETIRING, ais.DAEMON_REFUSED}) == 4


# ---- partial loads quarantine a corrupt record ----

def seeded(project):
    mem = ais.open_memory(str(project))
    mem.capture("the tokenizer cache keeps stale merges after an upgrade", source="prompt")
    mem.drain()
    return mem, next(iter(mem.threads))


def test_load_partial_quarantines_a_corrupt_thread(project):
    mem, tid = seeded(project)
    with open(mem.store.thread_file(tid), "w") as fh:
        fh.write('{"id": "%s", "messages": "broken"}' % tid)
    part = ais.Memory(mem.store.dir, embedder="lexical")
    part.load_partial([tid])
    assert part.threads == {}
    assert [n.split(".json.")[0] for n in mem.store.quarantined()] == [tid]
    assert not os.path.exists(mem.store.thread_file(tid))


def test_refresh_quarantines_a_corrupt_thread_and_bridge(project):
    mem, tid = seeded(project)
    part = ais.Memory(mem.store.dir, embedder="lexical")
    part.load_partial([tid])
    assert tid in part.threads
    bid = "b0000corrupt"
    part.bridges[bid] = {"id": bid, "source_id": tid, "target_id": tid}  # held, so refreshed
    for path in (mem.store.thread_file(tid), mem.store.bridge_file(bid)):
        with open(path, "w") as fh:
            fh.write("{not json")
    with mem.store.lock():
        mem.store.bump([tid, bid])
    part.refresh()
    assert tid not in part.threads and bid not in part.bridges
    assert sorted(n.split(".json.")[0] for n in mem.store.quarantined()) == sorted([tid, bid])


# ---- rules typed on the command line ----

def test_rules_add_is_redacted_before_it_is_stored(project, capsys):
    secret = "ghp_" + "Zq8Lm2Xv7Rt4Nw9Ks3Hd6Jf1Pb5Yc0Ga2Te8"
    assert ais.main(["--project", str(project), "rules", "add", f"always push with token {secret}"]) == 0
    stored = open(store_of(project).rules_file).read()
    assert secret not in stored and "[REDACTED:" in stored
    assert secret not in log_text(store_of(project))
