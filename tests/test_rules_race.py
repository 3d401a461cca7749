"""user_rules.json has one lock: a drain adding rules races `rules remove` and neither the
removal nor the addition is lost."""
import threading

import ai_smartness as ais


def test_rules_removed_while_drains_add_rules_stay_removed_and_added_ones_stay(project, monkeypatch):
    mem = ais.open_memory(str(project))
    store = mem.store
    n = 30
    ais.add_rules_to_store(store, [f"Never drop table {k} in prod" for k in range(n)], mem.clock())
    real_rules = ais.Store.rules

    def slow_rules(self):
        # Widen the read-modify-write window so that a writer outside the lock loses the race.
        out = real_rules(self)
        ais.time.sleep(0.003)
        return out
    monkeypatch.setattr(ais.Store, "rules", slow_rules)
    done = threading.Event()

    def remover():
        # `rules remove` of each seeded rule in turn, while the drains below add rules.
        try:
            for k in range(n):
                store.update_rules(lambda rules: rules.remove(next(r for r in rules if r["text"] == f"Never drop table {k} in prod")))
                ais.time.sleep(0.002)
        finally:
            done.set()
    thread = threading.Thread(target=remover)
    thread.start()
    added = 0
    try:
        while not done.is_set() or added < n:
            mem.capture(f"Always keep rule number {added} in the config module, please.")
            added += 1
    finally:
        thread.join()
    texts = [r["text"] for r in store.rules()]
    assert [t for t in texts if t.startswith("Never drop")] == []  # nothing removed came back
    assert sorted(texts) == sorted(f"Always keep rule number {i} in the config module, please" for i in range(added))


def test_every_rules_writer_goes_through_the_rules_lock(project, monkeypatch):
    """`rules add`, `rules remove` and a drain write user_rules.json only inside update_rules."""
    mem = ais.open_memory(str(project))
    inside, outside = [0], []
    real_update, real_save = ais.Store.update_rules, ais.Store.save_rules

    def update(self, fn):
        inside[0] += 1
        try:
            return real_update(self, fn)
        finally:
            inside[0] -= 1
    monkeypatch.setattr(ais.Store, "update_rules", update)
    monkeypatch.setattr(ais.Store, "save_rules", lambda self, rules: outside.append(not inside[0]) or real_save(self, rules))
    assert ais.main(["--project", str(project), "rules", "add", "Always write tests first"]) == 0
    assert ais.main(["--project", str(project), "rules", "remove", "1"]) == 0
    mem.capture("Never push on a Friday afternoon please.")
    assert outside == [False, False, False]
    assert [r["text"] for r in mem.store.rules()] == ["Never push on a Friday afternoon please"]


def test_a_prompt_s_rules_are_found_once_when_it_is_drained_and_a_removed_rule_stays_removed(project, monkeypatch):
    """The inject hook only journals the prompt: its rules are found by the drain (which `rules`
    runs first), once, so a rule removed after that never comes back from the same prompt."""
    store = ais.open_memory(str(project)).store
    detected = []
    real = ais.detect_rules
    monkeypatch.setattr(ais, "detect_rules", lambda text: detected.append(text) or real(text))
    prompt = "From now on, always run the linter before a commit."
    ais.answer("inject", {"session_id": "s1", "prompt": prompt}, store, None)
    assert detected == []  # the hook process does not pay for the rule grammar
    assert ais.main(["--project", str(project), "rules"]) == 0
    assert detected == [prompt]
    assert [r["text"] for r in store.rules()] == ["Always run the linter before a commit"]
    assert ais.main(["--project", str(project), "rules", "remove", "1"]) == 0
    ais.answer("inject", {"session_id": "s1", "prompt": "Now fix the flaky login test."}, store, None)
    assert ais.main(["--project", str(project), "rules"]) == 0
    assert detected == [prompt, "Now fix the flaky login test."]
    assert store.rules() == []
