"""Storage: atomic writes, private permissions, concurrent writers, crashes, quarantine."""
import collections
import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

import ai_smartness as ais
import topics_data
from conftest import ROOT, cli, cli_json

WRITER = """
import sys; sys.path.insert(0, {root!r})
import ai_smartness as ais
mem = ais.open_memory({project!r})
for i in range({n}):
    mem.capture(f"{tag} capture number {{i}} about subject {tag}{{i % 7}} with some words", source="prompt")
"""


def test_atomic_write_is_private_and_leaves_no_temp(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    path = folder / "rec.json"
    ais.write_json_atomic(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(folder) == ["rec.json"]


def test_writing_many_records_is_all_or_nothing_per_group_and_leaves_no_temp(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    ais.write_json_many([(str(folder / f"r{i}.json"), {"i": i}) for i in range(5)], group=2)
    assert sorted(os.listdir(folder)) == [f"r{i}.json" for i in range(5)]
    assert json.loads((folder / "r3.json").read_text()) == {"i": 3}
    assert stat.S_IMODE((folder / "r3.json").stat().st_mode) == 0o600
    with pytest.raises(FileNotFoundError):  # the second record cannot be created
        ais.write_json_many([(str(folder / "new.json"), {}), (str(tmp_path / "missing" / "x.json"), {})])
    assert sorted(os.listdir(folder)) == [f"r{i}.json" for i in range(5)]  # no temp file, nothing renamed


def test_data_dir_is_private(project):
    store = ais.Store(str(project / ".ai")).ensure()
    for folder in (store.dir, store.db, store.threads_dir, store.inbox_dir):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


def test_two_processes_capturing_200_texts_at_once_lose_none(project):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), project=str(project),
                                                                   n=200, tag=tag)])
             for tag in ("alpha", "beta")]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    mem = ais.open_memory(str(project))
    mem.ensure_loaded()
    texts = [m["text"] for t in mem.threads.values() for m in t["messages"]]
    assert len(texts) == 400 and len(set(texts)) == 400
    assert mem.store.inbox_pending() == []


def test_a_writer_killed_mid_write_never_leaves_a_half_record(tmp_path):
    target = tmp_path / "big.json"
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import ai_smartness as ais\n"
              f"i = 0\nwhile True:\n    i += 1\n"
              f"    ais.write_json_atomic({str(target)!r}, {{'i': i, 'pad': 'x' * 2_000_000}})\n")
    for delay in (0.05, 0.13, 0.21, 0.3):
        proc = subprocess.Popen([sys.executable, "-c", script])
        time.sleep(delay + 0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if target.exists():
            doc = json.loads(target.read_text())  # whole, or the previous whole version
            assert len(doc["pad"]) == 2_000_000


def test_capture_killed_mid_drain_is_replayed_without_loss_or_duplicate(project):
    store = ais.Store(str(project / ".ai")).ensure()
    for i in range(30):
        store.inbox_append(ais.prepare_capture(f"journal entry {i} about kernels and schedulers", "prompt"))
    script = (f"import sys, os; sys.path.insert(0, {str(ROOT)!r}); import ai_smartness as ais\n"
              f"mem = ais.open_memory({str(project)!r})\n"
              "orig = mem.save\n"
              "def save(*a, **k):\n    orig(*a, **k); os._exit(9)\n"  # dies after the first batch is on disk
              "mem.save = save\nmem.drain(batch=10)\n")
    proc = subprocess.run([sys.executable, "-c", script])
    assert proc.returncode == 9
    assert len(store.inbox_pending()) == 30  # journal files go only after their batch is saved
    mem = ais.open_memory(str(project))
    mem.drain()
    texts = [m["text"] for t in mem.threads.values() for m in t["messages"]]
    assert sorted(texts) == sorted(f"journal entry {i} about kernels and schedulers" for i in range(30))


def test_corrupt_thread_is_quarantined_reported_and_commands_keep_working(project):
    for text in ("JWT refresh token rotation in the auth service", "Postgres migration adds tenant_id"):
        assert cli("capture", text, project=project).returncode == 0
    threads = cli_json("threads", project=project)
    victim = project / ".ai" / "db" / "threads" / f"{threads[0]['id']}.json"
    victim.write_text('{"id": "broken", "messages": [')
    for args in (["status"], ["threads"], ["search", "postgres"], ["recall", "jwt"], ["bridges"], ["export"]):
        proc = cli(*args, project=project)
        assert proc.returncode == 0, (args, proc.stderr)
    health = cli_json("health", project=project)
    assert len(health["quarantined"]) == 1
    assert any("quarantine" in w for w in health["warnings"])
    assert not victim.exists()
    assert len(os.listdir(project / ".ai" / "db" / "quarantine")) == 1
    log = (project / ".ai" / "logs" / "ai_smartness.log").read_text()
    assert "record quarantined" in log


def test_corrupt_inbox_entry_is_quarantined_not_lost(project):
    store = ais.Store(str(project / ".ai")).ensure()
    (project / ".ai" / "inbox" / "c0000bad.json").write_text("{not json")
    store.inbox_append(ais.prepare_capture("a valid capture about docker images", "prompt"))
    mem = ais.open_memory(str(project))
    mem.drain()
    assert store.inbox_pending() == []
    assert any(n.startswith("c0000bad.json") for n in store.quarantined())
    assert len(mem.msgs) == 1


def journal_topics(store, rounds):
    """`rounds` x 20 captures on three interleaved topics, each text distinct."""
    texts = [f"{text} (round {r})" for r in range(rounds) for _, text in topics_data.interleaved()]
    for text in texts:
        store.inbox_append(ais.prepare_capture(text, "prompt"))
    return texts


def test_a_backlog_drained_in_one_batch_writes_each_record_once(project, monkeypatch):
    store = ais.Store(str(project / ".ai")).ensure()
    texts = journal_topics(store, 3)
    mem = ais.open_memory(str(project))
    writes = collections.Counter()
    write_many = ais.write_json_many
    monkeypatch.setattr(ais, "write_json_many", lambda items: write_many(writes.update(p for p, _ in items) or items))
    done = mem.drain(batch=64, once=True)
    assert len(done) == 60 and store.inbox_pending() == []
    assert set(writes.values()) == {1}  # every record the batch touched, written once
    assert sum(1 for p in writes if "threads" in p) == len(mem.threads)
    assert store.state()["generation"] == 1
    stored = [m["text"] for t in ais.open_memory(str(project)).store.load_threads().values() for m in t["messages"]]
    assert sorted(stored) == sorted(texts)


def test_a_crash_halfway_through_saving_a_batch_is_replayed_without_loss_or_duplicate(project):
    store = ais.Store(str(project / ".ai")).ensure()
    texts = journal_topics(store, 2)
    script = (f"import sys, os; sys.path.insert(0, {str(ROOT)!r}); import ai_smartness as ais\n"
              "orig = ais.write_json_many\n"
              "def write_many(items):\n"
              "    orig(items[:2])\n"  # two thread files of the batch are on disk, then a crash
              "    os._exit(9)\n"
              "ais.write_json_many = write_many\n"
              f"ais.open_memory({str(project)!r}).drain(batch=64, once=True)\n")
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    assert len(store.inbox_pending()) == 40  # nothing is unjournaled before the whole batch is saved
    mem = ais.open_memory(str(project))
    mem.drain()
    stored = [m["text"] for t in mem.threads.values() for m in t["messages"]]
    assert sorted(stored) == sorted(texts)
    assert store.inbox_pending() == []


def test_a_paused_drain_saves_what_it_applied_and_keeps_the_rest_journaled(project):
    store = ais.Store(str(project / ".ai")).ensure()
    texts = journal_topics(store, 1)
    mem = ais.open_memory(str(project))
    first = mem.drain(batch=64, once=True, pause=lambda: True)
    assert len(first) == 1 and len(store.inbox_pending()) == 19
    assert [m["text"] for t in ais.open_memory(str(project)).store.load_threads().values()
            for m in t["messages"]] == [texts[0]]
    rest = mem.drain()
    assert len(rest) == 19 and not set(rest) & set(first)
    assert sorted(m["text"] for t in mem.threads.values() for m in t["messages"]) == sorted(texts)


def test_the_generation_state_stays_small_whatever_a_change_touches(tmp_path):
    """F12: a change of thousands of records is recorded as a full reload, not as its ids, so
    hooks that read state.json never parse megabytes; a small change still lists its ids."""
    store = ais.Store(str(tmp_path / ".ai")).ensure()
    for _ in range(ais.STATE_CHANGES + 5):
        store.bump([f"t{i:06d}" for i in range(ais.STATE_CHANGE_IDS + 1)])
    store.bump(["tsmall"])
    state = store.state()
    assert len(state["changes"]) <= ais.STATE_CHANGES + 1
    assert [c[1] for c in state["changes"][:-1]] == ["*"] * (len(state["changes"]) - 1)
    assert state["changes"][-1][1] == ["tsmall"]
    assert os.path.getsize(store.state_file) < 16 * 1024
