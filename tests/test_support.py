"""The shared test support itself: what a missing prerequisite does, the hook map, payloads."""
import json
import re

import pytest

import support


def test_missing_shared_fixtures_skip_here_with_the_path(monkeypatch, tmp_path):
    monkeypatch.setattr(support, "SHARED", tmp_path / "no-shared")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="shared fixtures absent: .*no-shared/fixtures/x"):
        support.shared_path("fixtures", "x")


def test_missing_shared_fixtures_fail_under_ci(monkeypatch, tmp_path):
    monkeypatch.setattr(support, "SHARED", tmp_path / "no-shared")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="shared fixtures absent.*CI is set"):
        support.shared_path("fixtures", "x")


def test_present_shared_path_is_returned(monkeypatch, tmp_path):
    (tmp_path / "fixtures").mkdir()
    monkeypatch.setattr(support, "SHARED", tmp_path)
    monkeypatch.setenv("CI", "1")
    assert support.shared_path("fixtures") == tmp_path / "fixtures"


def test_the_hook_map_is_the_installed_one_and_every_event_has_a_payload():
    events = support.hook_events()
    template = json.loads((support.ROOT / "settings.template.json").read_text())["hooks"]
    installed = {event: re.search(r" hook (\w+) ", groups[0]["hooks"][0]["command"]).group(1)
                 for event, groups in template.items()}
    assert events == installed and len(events) == 8
    assert support.event_hooks() == {name: event for event, name in events.items()}
    for event, name in events.items():
        for key in (event, name):
            payload = support.payload_for(key)
            assert payload["hook_event_name"] == event and payload["session_id"]


def test_wait_for_returns_the_value_or_fails_naming_what(monkeypatch):
    values = iter([0, None, "ready"])
    assert support.wait_for(lambda: next(values), "a value", timeout=5, interval=0) == "ready"
    assert support.wait_for(lambda: 0, timeout=0) == 0
    with pytest.raises(pytest.fail.Exception, match="timed out waiting for the moon"):
        support.wait_for(lambda: None, "the moon", timeout=0)


def test_an_empty_prompt_answer_passes_only_when_the_budget_ran_out(tmp_path):
    (tmp_path / ".ai" / "logs").mkdir(parents=True)
    answer = json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "x"}})
    assert support.check_prompt_answer(answer.encode(), tmp_path)["hookSpecificOutput"]["additionalContext"] == "x"
    with pytest.raises(AssertionError, match="not for lack of time"):
        support.check_prompt_answer(b"", tmp_path)
    late = {"msg": "hook over its time budget; answered nothing", "hook": "inject", "level": "error"}
    (tmp_path / ".ai" / "logs" / "ai_smartness.log").write_text(json.dumps(late) + "\n")
    assert support.check_prompt_answer(b"", tmp_path) is None
