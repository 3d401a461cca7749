"""The engine end to end in-process: threads from interleaved topics, retrieval, lifecycle."""
import collections
import json

import pytest

import ai_smartness as ais
import topics_data

DAY = ais.DAY


def fill(project, embedder="fake"):
    mem = ais.open_memory(str(project), embedder=embedder)
    owner = {}
    for topic, text in topics_data.interleaved():
        owner[mem.capture(text)["message_id"]] = topic
    return mem, owner


def thread_topics(mem, owner):
    return {tid: collections.Counter(owner[m["id"]] for m in t["messages"]) for tid, t in mem.threads.items()}


def check_three_topics(mem, owner):
    """3 threads (plus forks), each holding one topic's messages only; search and recall put
    the topic's thread first."""
    per_thread = thread_topics(mem, owner)
    assert all(len(c) == 1 for c in per_thread.values()), per_thread
    roots = [tid for tid, t in mem.threads.items() if not t.get("parent_id")]
    assert sorted(next(iter(per_thread[t])) for t in roots) == ["css", "jwt", "postgres"]
    for query, topic in (("JWT refresh token", "jwt"), ("Postgres migration", "postgres"),
                         ("CSS layout bug in the sidebar", "css")):
        hits = mem.search(query, 5)
        assert [owner[h["message_id"]] for h in hits] == [topic] * 5
        text = mem.recall(query)
        first = text.split("Thread \"", 1)[1]
        first_tid = first.split("[", 1)[1].split("]", 1)[0]
        assert set(per_thread[first_tid]) == {topic}


def test_interleaved_topics_make_three_clean_threads(project):
    mem, owner = fill(project)
    check_three_topics(mem, owner)
    assert len(mem.msgs) == 20


def test_decisions_are_logged_with_scores(project):
    fill(project)
    lines = [json.loads(l) for l in (project / ".ai" / "logs" / "ai_smartness.log").read_text().splitlines()]
    decisions = [l for l in lines if l["msg"] == "decision"]
    assert len(decisions) == 20
    # Each line says what was decided, for which thread, and the scores behind it.
    assert [d["action"] for d in decisions].count("NEW_THREAD") >= 3
    assert {d["action"] for d in decisions} <= {"NEW_THREAD", "CONTINUE", "FORK", "REACTIVATE"}
    # Under 0 only by the concept term: every thread is of another domain than the content.
    assert all(d["thread"] and -ais.CONCEPT_WEIGHT * ais.CONCEPT_NEUTRAL <= d["score"] <= 1 for d in decisions)
    assert all(d["top"][0]["score"] >= t["score"] for d in decisions for t in d["top"][1:])
    continued = [d for d in decisions if d["action"] == "CONTINUE"]
    assert continued and all(d["score"] == d["top"][0]["score"] for d in continued)


def test_bridges_link_threads_and_never_duplicate(project):
    mem, _ = fill(project)
    joined = mem.capture("The Postgres migration depends on the JWT refresh token table being created first")
    pairs = [ais.pair_key(b["source_id"], b["target_id"]) for b in mem.bridges.values()]
    assert pairs and len(pairs) == len(set(pairs))
    assert all(b["source_id"] != b["target_id"] for b in mem.bridges.values())
    assert all(0 < b["confidence"] <= 1 for b in mem.bridges.values())
    # Bridges join live threads, and the thread of the message naming both topics is one end.
    assert all({b["source_id"], b["target_id"]} <= set(mem.threads) for b in mem.bridges.values())
    assert any(joined["thread_id"] in (b["source_id"], b["target_id"]) for b in mem.bridges.values())


def test_capture_at_keeps_the_content_time_and_noise_is_skipped(project):
    mem = ais.open_memory(str(project))
    result = mem.capture("Imported note about kafka consumer lag", at="2023-05-08T13:56:00")
    msg = mem.msgs[result["message_id"]]
    assert msg["ts"] == "2023-05-08T13:56:00Z"
    for ack in ("ok", "merci", "Thanks!", "sí", '{"type":"text","ok":true}', "<ide_opened_file>x</ide_opened_file>"):
        assert mem.capture(ack)["action"] == "SKIPPED"


def test_secrets_are_redacted_before_storage(project):
    mem = ais.open_memory(str(project))
    mem.capture("deploy with ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123 and "
                "postgres://admin:hunter2secret@db.internal:5432/app")
    raw = "".join(p.read_text() for p in (project / ".ai" / "db" / "threads").iterdir())
    assert "sk-ant-api03" not in raw and "hunter2secret" not in raw
    assert "[REDACTED:" in raw


def test_suspended_thread_is_reactivated_by_related_content(project):
    mem, owner = fill(project)
    css = next(tid for tid, c in thread_topics(mem, owner).items() if "css" in c)
    mem.set_status([css], "suspended")
    result = mem.capture("CSS layout bug: the sidebar grid breaks the layout again on narrow screens")
    assert result["action"] == "REACTIVATE" and result["thread_id"] == css
    assert mem.threads[css]["status"] == "active"


def test_recall_reactivates_a_suspended_match_and_says_so(project):
    mem, owner = fill(project)
    jwt = next(tid for tid, c in thread_topics(mem, owner).items() if "jwt" in c)
    mem.set_status([jwt], "suspended")
    text = mem.recall("JWT refresh token rotation")
    assert ais.tr("recall_reactivated") in text
    assert mem.threads[jwt]["status"] == "active"
    assert mem.recall(jwt).startswith("Thread \"")  # a thread id returns that thread


def test_active_limit_suspends_the_least_relevant(project):
    (project / ".ai").mkdir(mode=0o700)
    (project / ".ai" / "config.json").write_text(json.dumps({"mode": "light"}))
    mem = ais.open_memory(str(project))
    subjects = ["kafka", "redis", "nginx", "terraform", "graphql", "webpack", "django", "flutter", "rust",
                "golang", "kubernetes", "elastic", "spark", "airflow", "ansible", "grafana", "vault"]
    for s in subjects:
        mem.capture(f"{s} {s}-{s} {s}")  # no word in common: each is its own thread
    statuses = collections.Counter(t["status"] for t in mem.threads.values())
    assert len(mem.threads) >= 16
    assert statuses["active"] == 15 and statuses["suspended"] == len(mem.threads) - 15


def test_idle_threads_are_suspended_and_dormant_ones_archived(project):
    mem = ais.open_memory(str(project))
    mem.capture("Old work on the kafka consumer group rebalancing", at="2020-01-01T00:00:00")
    assert [t["status"] for t in mem.threads.values()] == ["active"]  # idle relative to its own time
    mem.capture("Recent work on the frontend router", at=ais.iso(mem.clock() - 20 * DAY))
    assert sorted(t["status"] for t in mem.threads.values()) == ["active", "archived"]  # idle for years
    mem.capture("Another unrelated topic: invoices in PDF")
    assert sorted(t["status"] for t in mem.threads.values()) == ["active", "archived", "suspended"]


def test_context_fits_the_budget_dates_every_item_and_reports_ids(project):
    mem, owner = fill(project)
    mem.add_rules(["Always use type hints"], mem.clock())
    ctx = mem.context("JWT refresh token rotation", budget=800)
    assert len(ctx["text"]) <= 800
    assert "Always use type hints" in ctx["text"]
    assert ctx["message_ids"] and all(owner[m] == "jwt" for m in ctx["message_ids"][:3])
    assert "recalled notes, not instructions" in ctx["text"]
    item_lines = [l for l in ctx["text"].splitlines() if l.startswith("  - ")]
    today = ais.format_date(mem.clock())
    assert item_lines and all(l.startswith(f"  - [{today}] ") for l in item_lines)


def test_forget_removes_thread_and_its_bridges(project):
    mem, owner = fill(project)
    mem.capture("The Postgres migration depends on the JWT refresh token table")
    tid = next(iter(mem.threads))
    mem.forget(tid)
    fresh = ais.open_memory(str(project))
    fresh.ensure_loaded()
    assert tid not in fresh.threads
    assert all(tid not in (b["source_id"], b["target_id"]) for b in fresh.bridges.values())
    with pytest.raises(ais.NotFound):
        fresh.forget(tid)


def test_model_mixing_is_detected_and_reindex_fixes_it(project):
    fill(project, embedder="fake")
    mem = ais.open_memory(str(project), embedder="hash")
    stats = mem.stats()
    assert stats["mixed_models"] == ["fake-v1"] and stats["embedding_coverage"] == 0
    seen = []
    assert mem.reindex(lambda done, total: seen.append((done, total))) == len(mem.threads)
    assert seen[-1][0] == seen[-1][1]
    stats = ais.open_memory(str(project), embedder="hash").stats()
    assert stats["mixed_models"] == [] and stats["embedding_coverage"] == 1.0


def test_full_thread_continues_in_a_child_instead_of_dropping(project, monkeypatch):
    monkeypatch.setattr(ais, "MAX_THREAD_MESSAGES", 5)
    mem = ais.open_memory(str(project))
    for i in range(12):
        mem.capture(f"kafka consumer lag investigation step {i}", source="prompt" if i == 0 else "tool:Bash",
                    origin=None if i == 0 else "command")
    assert len(mem.msgs) == 12
    assert all(len(t["messages"]) <= 5 for t in mem.threads.values())
    # One chain of continuations (5 + 5 + 2), not a new child for each capture that matched the
    # full thread, each with the title of the work, not of the capture that overflowed it.
    assert sorted(len(t["messages"]) for t in mem.threads.values()) == [2, 5, 5]
    first = next(t for t in mem.threads.values() if not t.get("parent_id"))
    second = mem.threads[first["continued_in"]]
    third = mem.threads[second["continued_in"]]
    assert third["parent_id"] == second["id"] and second["parent_id"] == first["id"]
    assert first["title"] == second["title"] == third["title"] == "kafka consumer lag investigation step 0"
    mem.forget(third["id"])  # a forgotten continuation: the next overflow makes another
    again = ais.open_memory(str(project))
    again.ensure_loaded()
    assert "continued_in" not in again.threads[second["id"]]


def test_a_full_threads_continuation_is_titled_by_the_task_it_goes_on_with(project, monkeypatch):
    """The thread filled while the work was on the last task it was asked, not the first: its
    continuation says that task; a short prompt ("is the lag back?") names none."""
    monkeypatch.setattr(ais, "MAX_THREAD_MESSAGES", 5)
    mem = ais.open_memory(str(project))
    steps = [("prompt", "kafka consumer lag investigation"), ("tool:Bash", "kafka consumer lag investigation step 1"),
             ("prompt", "kafka consumer lag: rebalance the partitions across the brokers"),
             ("prompt", "is the lag back?"), ("tool:Bash", "kafka consumer lag investigation step 4"),
             ("tool:Bash", "kafka consumer lag investigation step 5")]
    for source, text in steps:
        mem.capture(text, source=source, origin="command" if source == "tool:Bash" else None)
    first = next(t for t in mem.threads.values() if not t.get("parent_id"))
    assert len(first["messages"]) == 5 and first["title"] == "kafka consumer lag investigation"
    later = mem.threads[first["continued_in"]]
    assert later["title"] == "kafka consumer lag: rebalance the partitions across the brokers"
    assert later["title_from"] == "prompt"


def test_a_paragraph_that_opens_prompts_word_for_word_is_a_preamble_not_their_task(project):
    """A dictation app's banner (or a routine pasted first) before each request is no task: once a
    second prompt opens with it, both are stored without it, the first one's thread is retitled
    and its vector re-made, a rule in it is still the user's, and the next prompt's query and the
    task the briefing names leave it out, even before a mere "continue". The same prompt sent
    twice, or an opening that introduces what follows, is kept whole."""
    banner = "Your trial has expired. Upgrade to VoiceInk Pro at tryvoiceink.com/buy"
    mem = ais.open_memory(str(project))
    mem.capture(f"{banner}\n\nFix the login redirect on the admin dashboard, it loops back to /login",
                session_id="s1")
    first = next(iter(mem.threads.values()))
    assert first["title"] == "Your trial has expired."
    for text in (f"{banner}\n\nAdd the CSV export button to the players page",  # one drain: a batch
                 "Always use pnpm in this repo.\n\nWrite the players API pagination tests",
                 "Always use pnpm in this repo.\n\nBump the eslint config to the flat format"):
        mem.store.inbox_append(ais.prepare_capture(text, session_id="s1"))
    mem.drain()
    for text in ("The build fails with:\n\nerror TS2307: Cannot find module './auth'",
                 "The build fails with:\n\nerror TS2339: Property 'id' does not exist",
                 "Rename the players table.\n\nIt is called roster everywhere else",
                 "Rename the players table.\n\nIt is called roster everywhere else"):
        mem.capture(text, session_id="s1")
    prompts = sorted((m["text"], m.get("preamble") or "") for t in mem.threads.values() for m in t["messages"]
                     if m["source"] == "prompt")
    assert prompts == sorted([
        ("Fix the login redirect on the admin dashboard, it loops back to /login", banner),
        ("Add the CSV export button to the players page", banner),
        ("Write the players API pagination tests", "Always use pnpm in this repo."),
        ("Bump the eslint config to the flat format", "Always use pnpm in this repo."),
        ("The build fails with:\n\nerror TS2307: Cannot find module './auth'", ""),
        ("The build fails with:\n\nerror TS2339: Property 'id' does not exist", ""),
        ("Rename the players table.\n\nIt is called roster everywhere else", ""),
        ("Rename the players table.\n\nIt is called roster everywhere else", "")])
    assert mem.threads[first["id"]]["title"].startswith("Fix the login redirect")
    opened = mem.threads[first["id"]]["messages"][0]
    unbannered = mem.embedder.embed([opened["text"]])[0]
    assert list(mem.mvec[opened["id"]]) == pytest.approx(list(unbannered), abs=1e-4)
    assert [r["text"] for r in mem.store.rules()] == ["Always use pnpm in this repo"]
    again = ais.open_memory(str(project))
    again.ensure_loaded()
    assert list(again.mvec[opened["id"]]) == pytest.approx(list(unbannered), abs=1e-4)
    again.capture(f"{banner}\n\nShow the roster count on the dashboard header", session_id="s1")
    assert any(m["text"] == "Show the roster count on the dashboard header" and m["preamble"] == banner
               for t in again.threads.values() for m in t["messages"])
    assert again.unprefaced(f"{banner}\n\nwhat was wrong with the redirect loop?") == \
        "what was wrong with the redirect loop?"
    context = again.context(f"{banner}\n\nwhat was wrong with the redirect loop?", session="s1")["text"]
    assert banner not in context and "Upgrade" not in context
    for asked, task in (("what was wrong with the redirect loop?", "what was wrong with the redirect loop?"),
                        ("continue", "what was wrong with the redirect loop?")):  # "continue" sets no task
        ais.answer("inject", {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "cwd": str(project),
                              "prompt": f"{banner}\n\n{asked}"}, again.store, again)
        assert again.store.heartbeat()["last_task"] == task  # what the briefing names
    again.flush()
    assert any(m["text"] == "continue" and m["preamble"] == banner for m in again.msgs.values())


def test_daemon_reload_sees_changes_made_by_another_process(project):
    reader, _ = fill(project)
    writer = ais.open_memory(str(project))
    writer.capture("A new topic: Terraform state locking in S3 with DynamoDB")
    hits = reader.search("terraform state locking", 1)
    assert "Terraform" in hits[0]["text"]


def test_hot_thread_after_each_save_is_the_one_a_full_scan_finds(project):
    """save() compares only the threads it touched with the previous hot thread; ties (same
    second) go to the first in thread order, as a scan of every thread gives."""
    mem = ais.open_memory(str(project))
    for i, (_, text) in enumerate(topics_data.interleaved()):
        mem.capture(text, at="2024-03-01T10:00:00" if i < 10 else "2024-03-01T11:00:00")
        full = max(mem.threads.values(), key=lambda t: ais.ts_of(t, "last_active"))
        assert mem.store.state()["hot_thread"] == full["id"]


def test_digest_kept_encoded_is_the_one_a_fresh_load_writes(project):
    """write_index() reuses each thread's encoded entry until the thread or one of its bridges
    changes: after every kind of change, a long-lived memory writes what a fresh load writes."""
    index = project / ".ai" / "db" / "index.json"

    def check(mem):
        mem.write_index()
        kept = json.loads(index.read_text())
        fresh = ais.open_memory(str(project))
        fresh.ensure_loaded()
        fresh.write_index()
        assert kept == json.loads(index.read_text())
        return kept["threads"]

    mem, owner = fill(project)
    css = next(tid for tid, c in thread_topics(mem, owner).items() if "css" in c)
    before = check(mem)
    mem.capture("The Postgres migration depends on the JWT refresh token table being created first")
    check(mem)
    mem.set_status([css], "suspended")
    assert check(mem)[css]["status"] == "suspended" != before[css]["status"]
    mem.recall("CSS layout bug in the sidebar")  # reactivates it and adds weight
    now = check(mem)
    assert now[css]["status"] == "active"
    other = ais.open_memory(str(project))  # another process: continues a thread, starts one
    jwt = other.capture("JWT refresh token rotation: the refresh token is single use")["thread_id"]
    # Of another domain than every thread: "Terraform state locking in S3 with DynamoDB" joins
    # the Postgres thread on its database concept (CONCEPTS).
    other.capture("Terraform plan for the VPC peering")
    mem.search("terraform vpc peering", 1)  # picks both up
    after = check(mem)
    assert len(after) == len(now) + 1 and after[jwt]["n"] == now[jwt]["n"] + 1
    mem.capture("A long idle kafka consumer rebalancing", at=ais.iso(mem.clock() + 40 * DAY))  # lifecycle
    assert {t["status"] for t in check(mem).values()} >= {"suspended"}
    linked = next(b["source_id"] for b in mem.bridges.values())
    mem.forget(linked)
    after = check(mem)
    assert linked not in after and all(not set(t["bridges"].split()) - set(mem.bridges) for t in after.values())
