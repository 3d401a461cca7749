"""End to end: the LLM work (section 7, LLMWork and llm_synthesis) with the real Claude Code CLI as
the backend (llm.backend claude-cli), against the stand-in Messages API scripted to answer the
JSON the prompts ask for. The installed module in the project does it as the daemon and the
PreCompact hook do: thread titles and summaries come from the model, a borderline message moves
where the model says, the synthesis is the model's; what was sent is redacted, no hook ran
inside the product's calls, and the memory holds none of the product's prompts."""

import json
import subprocess
import sys

from e2e_support import CLAUDE_TIMEOUT
from fake_anthropic import LLM_MARKER, FakeAnthropic, request_text
from support import precompact_payload
from test_e2e_llm import box, configure, hook_records  # noqa: F401  (box: the sandbox fixture)

SECRET = "sk-ant-api03-" + "Wv4" * 30
JWT = ["Implement JWT refresh token rotation in auth/tokens.py so each refresh issues a new refresh token",
       "The JWT refresh endpoint must revoke the old refresh token when rotation happens",
       "Store refresh token hashes in the sessions table and check JWT expiry before refreshing"]
CSS = ["CSS layout bug: the sidebar overlaps the main content on narrow screens",
       "Fix the CSS grid layout so the sidebar column collapses below 768px"]
# The installed module doing the daemon's pass, then the PreCompact hook (argv: data dir, transcript).
WORK = """import json, sys
sys.path.insert(0, sys.argv[1])
import ai_smartness as ai
mem = ai.open_memory(ai.os.path.dirname(sys.argv[1]))
mem.llm = ai.LLM(mem.store, mem.store.config())
for text in json.loads(sys.argv[3]):
    mem.capture(text)
jwt = next(t["id"] for t in mem.threads.values() if "JWT" in t["messages"][0]["text"])
css = next(t for t in mem.threads.values() if "CSS" in t["messages"][0]["text"])
mid = css["messages"][-1]["id"]
mem.llm_work.borderline.append({"id": mid, "started": False, "candidates": [jwt]})
calls = mem.llm_work.run(force=True)
ai.answer("precompact", json.loads(sys.argv[2]), mem.store, None)
print(json.dumps({"calls": calls, "jwt": jwt, "mid": mid}))
"""


def answer_for(body):
    """The stand-in model: the JSON each of the product's prompts asks for."""
    data = json.JSONDecoder().raw_decode(request_text(body).split(LLM_MARKER, 1)[1].lstrip())[0]
    if "transcript" in data:
        return json.dumps({"decisions": ["keep the JWT refresh tokens opaque"], "open_questions": [],
                           "state": "refresh token rotation is implemented", "next_steps": ["rotate the key"]})
    items = data["items"]
    if "messages" in items[0]:
        return json.dumps({"threads": [{"id": i["id"], "title": " ".join(i["messages"][0].split()[:4]),
                                        "summary": " ".join(i["messages"][-1].split()[:10]),
                                        "topics": []} for i in items]})
    if "threads" in items[0]:  # the borderline message goes to the JWT thread
        return json.dumps({"items": [{"id": i["id"], "thread": i["threads"][0]["id"], "reason": "same work"}
                                     for i in items]})
    return "{}"


def test_titles_a_borderline_move_and_the_synthesis_come_from_the_cli(box):  # noqa: F811
    configure(box, max_calls_per_capture=0, failure_pause_seconds=0)
    transcript = box.project / "t.jsonl"
    transcript.write_text("\n".join(json.dumps({"type": t, "message": {"role": t, "content": c}}) for t, c in (
        ("user", "We decided to keep the JWT refresh tokens opaque. Deploy key: " + SECRET),
        ("assistant", "Refresh token rotation is implemented in auth/tokens.py."))) + "\n")
    payload = precompact_payload(transcript, project=box.project)
    ai_dir = str(box.project / ".ai")
    with FakeAnthropic(llm=answer_for) as api:
        env = dict(box.env, ANTHROPIC_BASE_URL=api.url, CLAUDE_PROJECT_DIR=str(box.project))
        done = subprocess.run([sys.executable, "-c", WORK, ai_dir, json.dumps(payload), json.dumps(JWT + CSS)],
                              cwd=box.project, env=env, capture_output=True, text=True, timeout=CLAUDE_TIMEOUT * 4)
        bodies = api.bodies("llm")
        others = api.bodies("main") + api.bodies("side")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["calls"] == 2 and len(bodies) == 3 and not others
    sent = json.dumps(bodies)
    assert SECRET not in sent and "[REDACTED" in sent
    threads = [json.loads(p.read_text()) for p in (box.project / ".ai" / "db" / "threads").glob("*.json")]
    jwt = next(t for t in threads if t["id"] == out["jwt"])
    assert jwt["title"] == "Implement JWT refresh token" and jwt["llm"]["llm_used"]
    moved = next(m for m in jwt["messages"] if m["id"] == out["mid"])
    assert moved["llm"] == {"llm_used": True, "reason": "same work", "thread": out["jwt"]}
    syntheses = sorted((box.project / ".ai" / "db" / "synthesis").glob("*.json"))
    doc = json.loads(syntheses[-1].read_text())
    assert doc["llm_used"] and doc["next_steps"] == ["rotate the key"]
    # No hook ran inside the product's calls, and none of its prompts became memory.
    assert not box.user_marker.exists() and not box.marker_lines() and not hook_records(box)
    stored = json.dumps(threads)
    assert LLM_MARKER not in stored and "organise a coding agent" not in stored
    assert len([m for t in threads for m in t["messages"]]) == len(JWT + CSS)
