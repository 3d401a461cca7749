"""The memory engine's structure and hot paths, counted: the drain lists and reads the journal
once, a prompt is embedded once, a hook without the daemon parses the digest once and
reactivates as the daemon does."""
import ast
import collections
import json
import os

import pytest

import ai_smartness as ais
import topics_data


def fill(project):
    mem = ais.open_memory(str(project))
    for _, text in topics_data.interleaved():
        mem.capture(text)
    return mem


@pytest.fixture
def embedded(monkeypatch):
    """The texts embedded, counted (patched before the daemon's workers bind the method)."""
    counts = collections.Counter()
    real = ais.FakeEmbedder.embed

    def counting(self, texts):
        counts.update(texts)
        return real(self, texts)
    monkeypatch.setattr(ais.FakeEmbedder, "embed", counting)
    return counts


@pytest.fixture
def daemon(project, embedded):
    d = ais.Daemon(str(project))
    d.socket = d.store.socket_file  # never bound: only the status file names it
    d._warm()
    yield d
    d.stopping.set()


def count_calls(monkeypatch, owner, name):
    """The arguments of each call of a class's method (self left out) or a module's function."""
    calls = []
    real = getattr(owner, name)
    skip = 1 if isinstance(owner, type) else 0

    def counted(*args, **kw):
        calls.append(args[skip:])
        return real(*args, **kw)
    monkeypatch.setattr(owner, name, counted)
    return calls


def test_the_daemon_lists_the_inbox_once_a_pass_and_reads_each_entry_once(daemon, monkeypatch):
    n = 12
    for i in range(n):
        daemon.store.inbox_append(ais.prepare_capture(f"capture {i} about the tokenizer stage {i % 3}", "prompt"))
    listings = count_calls(monkeypatch, ais.Store, "inbox_pending")
    reads = count_calls(monkeypatch, ais.Store, "inbox_read")
    passes = count_calls(monkeypatch, ais.Memory, "drain_entries")
    daemon._drain()
    assert passes and len(listings) <= len(passes) + 1
    assert len(reads) == n and len({path for (path,) in reads}) == n
    assert daemon.processed == n and daemon.store.inbox_pending() == []


def test_a_prompt_is_answered_with_the_work_journaled_before_it(daemon):
    """The last turn's edit, still journaled when the next prompt comes (the background drain
    had not reached it), is in that prompt's context; the prompt itself stays for the drain."""
    project = os.path.dirname(daemon.store.dir)
    edit = ais.tool_capture({"tool_name": "Edit", "session_id": "s1", "cwd": project, "tool_input": {
        "file_path": os.path.join(project, "src/billing/ledger.py"), "old_string": "total = 0",
        "new_string": "total = Decimal(0)"}, "tool_response": {}}, daemon.store.dir)
    daemon.store.inbox_append(ais.prepare_capture(edit["text"], "tool:Edit", session_id="s1", origin=edit["origin"],
                                                  files=edit["files"], op=edit["op"]))
    reply = daemon.cmd_hook("inject", {"prompt": "now round the totals to cents", "session_id": "s1"})
    text = json.loads(reply["stdout"])["hookSpecificOutput"]["additionalContext"]
    assert "src/billing/ledger.py" in text and "Decimal(0)" in text
    pending = [daemon.store.inbox_read(p)["text"] for p in daemon.store.inbox_pending()]
    assert pending == ["now round the totals to cents"] and daemon.processed == 1


def test_a_prompt_is_embedded_once_for_its_retrieval_and_its_capture(daemon, embedded):
    # Cleaning changes this prompt (markup, a secret): its capture stores another text.
    prompt = ("Why does the tokenizer cache miss on the parser module? token=ghp_Q7hZk2LmN8pR4sT6vW1xY3zA5bC9dE0fG2hJ"
              "<system-reminder>internal</system-reminder>")
    stored = ais.prepare_capture(prompt, "prompt")["text"]
    assert stored != prompt
    embedded.clear()  # the warm-up's
    reply = daemon.cmd_hook("inject", {"prompt": prompt, "session_id": "s1"})
    assert reply["ok"] and daemon.store.inbox_pending()
    daemon._drain()
    assert daemon.processed == 1 and daemon.store.inbox_pending() == []
    assert sum(embedded.values()) == embedded[stored] == 1 and embedded[prompt] == 0
    assert any(m["text"] == stored for m in daemon.mem.msgs.values())


def test_load_partial_sets_the_generation_and_refresh_keeps_to_its_records(project, monkeypatch):
    mem = fill(project)
    store = mem.store
    tid = next(iter(mem.threads))
    part = ais.Memory(store.dir, embedder="lexical")
    part.load_partial([tid], [])
    assert part.generation == store.state()["generation"]
    indexed = count_calls(monkeypatch, ais.Memory, "_index_thread")
    changed = mem.capture("Postgres migration: the invoices table gets a new index on customer id")["thread_id"]
    part.set_status([tid], "suspended")  # refresh() first, then a save
    assert list(part.threads) == [tid] and part.partial
    assert len(indexed) == (changed == tid)  # no replay of the store's history, no other thread
    assert store.read_thread(tid)["status"] == "suspended"


@pytest.mark.parametrize("query", ["JWT refresh token rotation", "CSS layout bug in the sidebar"])
def test_a_recall_without_the_daemon_reactivates_as_the_daemon_does(project, query):
    mem = fill(project)
    store = mem.store
    mem.set_status(list(mem.threads), "suspended")
    mem.write_index()
    before = {tid: t["status"] for tid, t in mem.threads.items()}

    def reactivated():
        now = {t["id"]: t["status"] for t in store.iter_threads()}
        return sorted(tid for tid in now if now[tid] != before[tid])
    mem.recall(query)  # the daemon's route: the whole memory, with the model
    by_daemon = reactivated()
    assert by_daemon
    mem.set_status(by_daemon, "suspended")
    before = {t["id"]: t["status"] for t in store.iter_threads()}
    ais.partial_memory(store, query)[0].recall(query)  # a hook's route: a few threads, no model
    assert reactivated() == by_daemon


def test_partial_memory_parses_the_digest_once_and_returns_it(project, monkeypatch):
    mem = fill(project)
    mem.write_index()
    reads = count_calls(monkeypatch, ais.Store, "read_digest")
    part, digest = ais.partial_memory(mem.store, "JWT refresh token", ["tmissing"])
    assert len(reads) == 1
    assert set(digest) == set(mem.threads) and set(part.threads) <= set(digest)
    assert ais.proactive_suggestion(digest, "JWT refresh token", "en")


@pytest.mark.parametrize("query", ["JWT refresh token rotation", "CSS layout bug in the sidebar"])
def test_a_digest_of_lists_from_an_older_version_loads_the_same_threads_and_bridges(project, query):
    """The digest lists terms and bridge ids as space-separated strings (they parse faster);
    one an older daemon wrote, with lists, gives a hook the same partial memory."""
    mem = fill(project)
    ids = sorted(mem.threads)
    bridges = [ais.make_bridge(a, b, "extends", 0.9, "", 0, mem.clock()) for a, b in zip(ids, ids[1:])]
    for bridge in bridges:
        mem._add_bridge(bridge)
    mem.save(bridge_ids=[b["id"] for b in bridges])
    mem.write_index()
    index = mem.store.index_file
    doc = json.loads(open(index, encoding="utf-8").read())
    assert all(isinstance(t["terms"], str) and isinstance(t["bridges"], str) for t in doc["threads"].values())
    assert any(t["bridges"] for t in doc["threads"].values())
    now = ais.partial_memory(mem.store, query)[0]
    for t in doc["threads"].values():
        t["terms"], t["bridges"] = t["terms"].split(), t["bridges"].split()
    with open(index, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    before = ais.partial_memory(mem.store, query)[0]
    assert now.threads and set(now.threads) == set(before.threads)
    assert now.bridges and set(now.bridges) == set(before.bridges)


def test_context_leaves_out_a_journaled_and_drained_prompt_by_its_capture_id(project):
    mem = fill(project)
    prompt = "How do we rotate the JWT refresh token for the mobile client app?"
    cid = mem.store.inbox_append(ais.prepare_capture(prompt, "prompt"))
    mem.drain()
    mid = ais.message_id(cid)
    assert mid in mem.msgs and mid in mem.context(prompt)["message_ids"]
    assert mid not in mem.context(prompt, exclude=[cid])["message_ids"]
    assert mid not in mem.context(prompt, exclude=[mid])["message_ids"]


def test_memory_state_is_declared_in_init(project):
    """Whatever capture, drain, retrieval and recall do, they add no attribute."""
    fresh = set(vars(ais.Memory(ais.data_dir_of(str(project)))))
    mem = fill(project)
    mem.context("JWT refresh token")
    mem.recall("CSS layout")
    mem.flush_index(force=True)
    mem.forget(next(iter(mem.threads)))
    assert set(vars(mem)) == fresh


def test_memory_engine_classes_stay_small_and_read_no_state_by_getattr():
    tree = ast.parse(open(ais.__file__, encoding="utf-8").read())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for name in ("MemoryIndex", "MemoryWriter", "Memory", "_DictScoring", "_ArrayScoring"):
        node = classes[name]
        assert node.end_lineno - node.lineno < 420, name
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "getattr":
                assert not (isinstance(call.args[0], ast.Name) and call.args[0].id == "self"), name


def test_a_drain_batch_starts_from_the_active_threads_the_last_one_saved(project, monkeypatch):
    """The active threads are scanned for only when a status may have changed outside the drain."""
    import random
    rng = random.Random(3)
    mem = ais.open_memory(str(project))
    mem.cfg = dict(mem.cfg, mode="light")  # 15 active at most: captures suspend threads
    scans = count_calls(monkeypatch, ais, "active_ids")
    merges, consolidate = [], ais.MemoryWriter._consolidate

    def spy(self, *args):
        merged = consolidate(self, *args)
        merges.append(bool(merged[0]))
        return merged
    monkeypatch.setattr(ais.MemoryWriter, "_consolidate", spy)

    def fresh():
        return {tid: None for tid, t in mem.threads.items() if t["status"] == "active"}
    for i in range(40):
        mem.capture(" ".join(f"w{rng.randrange(10 ** 6)}x" for _ in range(8)), source="tool:Bash")
        assert list(mem._active_ids()) == list(fresh())
    assert sum(t["status"] == "suspended" for t in mem.threads.values()) > 0
    # The first batch, then a lifecycle pass or a merge: the check above and the next batch scan.
    assert len(scans) <= 3 + 2 * sum(merges)
    mem.set_status(list(mem.threads)[:5], "suspended")  # another route: a new generation
    assert list(mem._active_ids()) == list(fresh())
    mem.set_status(list(mem.threads)[:2], "active")
    mem.capture("kalion morark a new topic of its own", source="tool:Bash")
    assert list(mem._active_ids()) == list(fresh())


def test_prompts_of_a_new_session_find_the_hot_thread_without_scanning_every_thread(project, monkeypatch):
    mem = fill(project)
    fresh = ais.Memory(mem.store.dir)
    scans = count_calls(monkeypatch, ais, "worked_on_last")

    def hot():  # what a scan finds
        return max(fresh.threads.values(), key=lambda t: ais.ts_of(t, "last_active"))["id"]
    for prompt in ("where were we with the tokenizer?", "and the JWT refresh?", "what about the CSS grid?"):
        fresh.context(prompt, session="a-new-session")
        assert fresh.hot_id() == hot()
    assert len(scans) == 1  # the first prompt after the load
    mem.capture("JWT refresh token rotation: the refresh endpoint now rotates keys", session_id="s2")
    fresh.refresh()  # another process saved: the hot thread may have changed
    assert fresh.hot_id() == hot()
    assert len(scans) == 2
