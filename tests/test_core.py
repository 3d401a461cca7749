"""Pure logic: decisions, thresholds, decay, suspension, lifecycle, bridges, gossip. Rule detection: test_text.py."""
import math

import pytest

import ai_smartness as ais

CFG = ais.DEFAULT_CONFIG
DAY = ais.DAY


def thread(tid, status="active", topics=(), messages=1, last_active=0.0, weight=0.5):
    return {"id": tid, "status": status, "topics": list(topics), "title": tid,
            "messages": [{"id": f"m{tid}{i}", "text": "x"} for i in range(messages)],
            "last_active": ais.iso(last_active), "weight": weight, "weight_at": last_active}


def test_similarity_is_the_specified_blend():
    assert ais.similarity(0.5, ["jwt", "token"], ["jwt", "auth"]) == pytest.approx(0.7 * 0.5 + 0.3 * 0.5 + 0.15)
    assert ais.similarity(0.5, ["alpha"], ["beta"]) == pytest.approx(0.35)
    assert ais.similarity(0.9, ["a"], ["a"]) == 1.0  # capped
    assert ais.similarity(-0.4, [], []) == 0.0


def test_topic_overlap_matches_stems_but_exact_bonus_needs_equal_words():
    overlap, exact = ais.topic_overlap(["migrations"], ["migration"])
    assert overlap == 1.0 and not exact


@pytest.mark.parametrize("cos,action", [(0.51, "CONTINUE"), (0.49, "NEW_THREAD")])
def test_continue_threshold(cos, action):
    # 0.7 * cos alone (no topics): 0.357 continues, 0.343 does not when other threads are as close.
    result = ais.decide([], [(thread("t1"), cos), (thread("t2"), cos - 0.01), (thread("t3"), cos - 0.02)], CFG)
    assert result["action"] == action
    assert result["score"] == pytest.approx(0.7 * cos)
    assert result["thread_id"] == ("t1" if action == "CONTINUE" else None)
    assert result["top"][0] == {"thread_id": "t1", "score": round(0.7 * cos, 4), "cosine": cos, "status": "active"}


def test_below_continue_the_best_thread_continues_only_when_clearly_ahead():
    # 0.21 against 0.105: ahead by more than the margin (0.08)
    ahead = ais.decide([], [(thread("t1"), 0.3), (thread("t2"), 0.15)], CFG)
    assert ahead["action"] == "CONTINUE" and ahead["thread_id"] == "t1" and ahead["reason"] == "ahead"
    # 0.21 against 0.175: too close to tell, a new thread (recorded as borderline)
    close = ais.decide([], [(thread("t1"), 0.3), (thread("t2"), 0.25)], CFG)
    assert close["action"] == "NEW_THREAD" and close["borderline"] and close["thread_id"] is None
    # the lead is over the mean of the next two: 0.21 against (0.175 + 0) / 2
    assert ais.decide([], [(thread("t1"), 0.3), (thread("t2"), 0.25), (thread("t3"), 0.0)], CFG)["action"] == "CONTINUE"
    assert ais.decide([], [(thread("t1"), 0.3), (thread("t2"), 0.25), (thread("t3"), 0.2)], CFG)["action"] == "NEW_THREAD"
    # a rival memory does not hold yet counts at the floor: with one thread or two, a weak
    # match is not ahead of nothing (0.105 against 0.10; 0.105 against (0.035 + 0.10) / 2)
    assert ais.decide([], [(thread("t1"), 0.15)], CFG)["action"] == "NEW_THREAD"
    assert ais.decide([], [(thread("t1"), 0.15), (thread("t2"), 0.05)], CFG)["action"] == "NEW_THREAD"
    assert ais.decide([], [(thread("t1"), 0.3)], CFG)["action"] == "CONTINUE"
    # alone but under the floor (0.07 < 0.10): nothing is close
    far = ais.decide([], [(thread("t1"), 0.1)], CFG)
    assert far["action"] == "NEW_THREAD" and not far["borderline"]
    # a dormant thread is a rival too
    dormant = ais.decide([], [(thread("t1"), 0.3), (thread("s", status="suspended"), 0.28)], CFG)
    assert dormant["action"] == "NEW_THREAD"


def test_a_turn_stays_in_its_thread_unless_another_is_strong_and_clearly_ahead():
    turn = thread("turn")
    weak = ais.decide([], [(thread("other"), 0.6), (turn, 0.45)], CFG, follow=turn)  # 0.42 vs 0.315
    assert weak["action"] == "CONTINUE" and weak["thread_id"] == "turn" and weak["reason"] == "turn"
    # not among the candidates at all: still its turn's thread
    assert ais.decide([], [(thread("other"), 0.4)], CFG, follow=turn)["thread_id"] == "turn"
    strong = ais.decide([], [(thread("other"), 0.8), (turn, 0.1)], CFG, follow=turn)
    assert strong["action"] == "CONTINUE" and strong["thread_id"] == "other"
    asleep = thread("turn", status="suspended")
    assert ais.decide([], [], CFG, follow=asleep)["action"] == "REACTIVATE"


def test_a_prompt_no_thread_clearly_matches_continues_its_sittings_work():
    """Mid-sitting, "still around 2 secs" is close to nothing: the session's current work, when it
    is the closest of all, takes it."""
    work, other = thread("work"), thread("other")
    close = [(work, 0.2), (other, 0.19)]  # 0.14 against 0.133: neither clearly ahead
    assert ais.decide([], close, CFG)["action"] == "NEW_THREAD"
    follow_up = ais.decide([], close, CFG, sitting=work)
    assert follow_up["action"] == "CONTINUE" and follow_up["thread_id"] == "work" and follow_up["reason"] == "sitting"
    # Another thread closer, or nothing near at all (0.07 under the borderline): a new task.
    assert ais.decide([], [(other, 0.2), (work, 0.19)], CFG, sitting=work)["action"] == "NEW_THREAD"
    assert ais.decide([], [(work, 0.1)], CFG, sitting=work)["action"] == "NEW_THREAD"
    # A clear match elsewhere is the work it is about.
    assert ais.decide([], [(other, 0.6), (work, 0.2)], CFG, sitting=work)["thread_id"] == "other"


def test_reactivation_needs_0_50_and_beats_a_weaker_active_thread():
    sleeping = thread("s", status="suspended")
    assert ais.decide([], [(sleeping, 0.75)], CFG)["action"] == "REACTIVATE"  # 0.525
    assert ais.decide([], [(sleeping, 0.70)], CFG)["action"] == "NEW_THREAD"  # 0.49
    both = ais.decide([], [(sleeping, 0.8), (thread("a"), 0.55)], CFG)
    assert both["action"] == "REACTIVATE" and both["thread_id"] == "s"
    archived = thread("old", status="archived")
    assert ais.decide([], [(archived, 0.9)], CFG)["action"] == "REACTIVATE"


def test_fork_only_from_the_sessions_current_thread_when_most_topics_are_new():
    parent = thread("p", topics=["postgres", "migration", "orders"], messages=5)
    subtask = ["postgres", "replication", "lag", "replica", "monitoring"]
    result = ais.decide(subtask, [(parent, 0.3)], CFG, current=parent)  # 0.21 + 0.3 * 1 + 0.15
    assert result["action"] == "FORK" and result["parent_id"] == "p"
    # not the session's current work (a note, a tool result, another session's thread): continue
    assert ais.decide(subtask, [(parent, 0.3)], CFG)["action"] == "CONTINUE"
    assert ais.decide(subtask, [(parent, 0.3)], CFG, current=thread("q"))["action"] == "CONTINUE"
    # the first prompt of a session may fork from the thread it resumes
    assert ais.decide(subtask, [(parent, 0.3)], CFG, current=True)["action"] == "FORK"
    # mostly known topics: the same work
    same = ["postgres", "migration", "orders", "lock"]
    assert ais.decide(same, [(parent, 0.3)], CFG, current=parent)["action"] == "CONTINUE"
    young = thread("y", topics=["postgres", "migration"], messages=1)
    assert ais.decide(subtask, [(young, 0.3)], CFG, current=young)["action"] == "CONTINUE"


def test_weight_halves_each_half_life_and_rises_with_use():
    t = thread("t", weight=0.8, last_active=0.0)
    assert ais.effective_weight(t, 7 * DAY, 7.0) == pytest.approx(0.4)
    ais.use_thread(t, 7 * DAY, 7.0, 0.1)
    assert t["weight"] == pytest.approx(0.5)
    ais.use_thread(t, 7 * DAY, 7.0, 5)
    assert t["weight"] == 1.0


def test_suspension_picks_the_least_related_lightest_oldest():
    now = 100 * DAY
    active = [thread("keep", last_active=now), thread("related", last_active=now - 50 * DAY, weight=0.1),
              thread("stale", last_active=now - 50 * DAY, weight=0.1), thread("fresh", last_active=now, weight=0.9)]
    victims = ais.suspension_victims(active, 3, {"keep"}, {"related": 0.9}, now, 7.0)
    assert victims == ["stale"]
    assert ais.suspension_victims(active, 4, set(), {}, now, 7.0) == []


def test_lifecycle_suspends_idle_and_archives_dormant():
    now = 200 * DAY
    threads = [thread("a", last_active=now - 20 * DAY), thread("b", status="suspended", last_active=now - 60 * DAY),
               thread("c", last_active=now - DAY), thread("d", last_active=now - 60 * DAY)]
    assert ais.lifecycle_changes(threads, now, CFG) == [("a", "suspended"), ("b", "archived"), ("d", "archived")]


@pytest.mark.parametrize("text,kind", [
    ("Replace the session cookie with JWT instead of server sessions", "replaces"),
    ("That approach was wrong, revert it", "contradicts"),
    ("This depends on the migration being merged", "depends"),
    ("Add more tests to the parser", "extends"),
    ("On remplace le cache par Redis", "replaces"),
    ("Esto depende de la migración", "depends"),
])
def test_bridge_type_from_wording(text, kind):
    assert ais.bridge_type(text) == kind


def links_of(bridges):
    return lambda tid: [b for b in bridges if tid in (b["source_id"], b["target_id"])]


def test_bridges_direct_then_gossip_with_decay_depth_and_no_duplicates():
    now = 1000.0
    existing = [ais.make_bridge("b", "c", "extends", 0.9, "", 0, now),
                ais.make_bridge("c", "d", "extends", 0.9, "", 0, now),
                ais.make_bridge("d", "e", "extends", 0.9, "", 0, now)]
    new = ais.plan_bridges("a", [("b", 0.8), ("a", 0.9), ("z", 0.1)], links_of(existing), CFG, now)
    pairs = {(b["target_id"], b["propagation_depth"]): b["confidence"] for b in new}
    assert pairs[("b", 0)] == pytest.approx(0.8)  # confidence = similarity
    assert pairs[("c", 1)] == pytest.approx(0.8 * 0.9 * 0.8, abs=1e-3)
    assert pairs[("d", 2)] == pytest.approx(0.8 * 0.9 * 0.8 * 0.9 * 0.8, abs=1e-3)
    assert ("e", 3) not in pairs  # depth limit 2
    assert all(b["target_id"] not in ("a", "z") for b in new)  # no self bridge, none under threshold
    again = ais.plan_bridges("a", [("b", 0.8)], links_of(existing + new), CFG, now)
    assert again == []  # no duplicate pair


def test_prune_drops_dangling_decayed_and_over_cap():
    now = 400 * DAY
    fresh = [ais.make_bridge("hub", f"n{i}", "extends", 0.5 + i / 100, "", 0, now) for i in range(15)]
    old = ais.make_bridge("hub", "n0", "extends", 0.3, "", 0, 0.0)  # 400 days at a 30-day half-life
    dangling = ais.make_bridge("hub", "gone", "extends", 0.9, "", 0, now)
    live = {"hub"} | {f"n{i}" for i in range(15)}
    drop = ais.bridges_to_prune(fresh + [old, dangling], live, CFG, now)
    assert old["id"] in drop and dangling["id"] in drop
    kept = [b for b in fresh if b["id"] not in drop]
    assert len(kept) == CFG["bridge_cap"]
    assert min(b["confidence"] for b in kept) > max(b["confidence"] for b in fresh if b["id"] in drop)


def test_bm25_matches_the_okapi_formula():
    index = ais.LexicalIndex()
    index.add("d1", ["jwt", "token", "token"])
    index.add("d2", ["postgres", "migration"])
    index.add("d3", ["css"])
    scores = index.scores(["token"])
    n, df, avg = 3, 1, 2.0
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = idf * 2 * 2.2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 3 / avg))
    assert scores == {"d1": pytest.approx(expected)}
    index.remove("d1")
    assert index.scores(["token"]) == {}


def test_packing_respects_budget_dedupes_and_skips_what_mostly_would_not_fit():
    items = [{"text": t, "line": t} for t in ["a" * 300, "a" * 300, "b" * 500, "c" * 900, "d " * 100]]
    packed = ais.pack_items(items, 1000, max_item=360)
    assert sum(len(i["line"]) + 1 for i in packed) <= 1000
    assert [i["line"][0] for i in packed] == ["a", "b", "d"]  # less than half of c would fit
    assert packed[1]["line"].endswith("…")  # b over max_item is shortened


def test_packing_shortens_an_item_when_most_of_it_fits():
    items = [{"text": t, "line": t} for t in ["e" * 300, "f " * 200]]
    packed = ais.pack_items(items, 600, max_item=420)
    assert [i["line"][0] for i in packed] == ["e", "f"]
    assert packed[1]["line"].endswith("…") and len(packed[1]["line"]) >= 200


def test_packing_renders_lazily_and_packs_the_same_as_eager_lines():
    texts = ["g" * 120, "h " * 300, "i" * 90, "j " * 400, "k" * 60, "l" * 200]
    rendered = []

    def render(item, previous):
        rendered.append(item["text"][0])
        return "> " + item["text"]
    eager = ais.pack_items([{"text": t, "line": "> " + t} for t in texts], 500, max_item=360)
    lazy = ais.pack_items([{"text": t, "min_len": len(t) // 2} for t in texts], 500, max_item=360, render=render)
    assert [i["line"] for i in lazy] == [i["line"] for i in eager]
    assert "j" not in rendered  # cannot fit whatever its rendering: never rendered


def test_focus_keeps_the_sentences_about_the_query_in_order():
    text = ("We met at the park. The weather was nice and sunny all day long. Later I adopted a puppy "
            "named Rex from the shelter. We had pizza for dinner with friends. Then we watched a movie.")
    out = ais.focus(text, ais.terms("When did she adopt the puppy?"), keep=0.5)
    assert "adopted a puppy" in out and "…" in out and len(out) >= 0.5 * len(text)
    assert ais.focus("short text", ["x"]) == "short text"
