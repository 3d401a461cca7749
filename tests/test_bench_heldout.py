"""bench/codemem_heldout.py: a codemem-1 data file from a repository's committed transcripts;
bench/memorycode_heldout.py: the MemoryCode dialogues the dev file does not hold."""
import json
import subprocess
import sys

from support import ROOT

ROOT_DIR = "/Users/dev/shop"


def rec(uid, kind, t, message=None, **extra):
    return {"uuid": uid, "sessionId": "s1", "type": kind, "timestamp": f"2025-09-01T10:{t}Z", "cwd": ROOT_DIR,
            "message": message or {}, **extra}


def commit(repo, records, msg):
    (repo / "logs" / "chat.json").write_text(json.dumps(records))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", msg],
                   check=True)


def test_every_version_of_the_transcript_makes_one_replayable_session(tmp_path):
    repo = tmp_path / "shop"
    (repo / "logs").mkdir(parents=True)
    (repo / "src").mkdir()
    (repo / "src" / "cart.py").write_text("TOTAL = 0\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    first = [
        rec("u1", "user", "00:00", {"content": "fix the cart total"}),
        rec("a1", "assistant", "00:05", {"content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                                      "input": {"file_path": ROOT_DIR + "/src/cart.py"}}]}),
        rec("u2", "user", "00:06", {"content": [{"type": "tool_result", "tool_use_id": "t1",
                                                 "content": "     1\tTOTAL = 0"}]}, toolUseResult={"type": "text"}),
        rec("a2", "assistant", "00:09", {"content": [{"type": "text", "text": "The total starts at 0."}]}),
    ]
    commit(repo, first, "first")
    # The next version holds the same records again and more: a hook's feedback and a slash command.
    later = first + [
        rec("u3", "user", "01:00", {"content": "Stop hook feedback:\n- run the tests"}),
        rec("u4", "user", "01:10", {"content": "<command-message>review</command-message>\n"
                                               "<command-name>/review</command-name>\n"
                                               "<command-args>src/cart.py</command-args>"}),
        rec("u5", "user", "01:11", {"content": "expanded command text"}, isMeta=True),
        rec("a3", "assistant", "01:20", {"content": [{"type": "text", "text": "Reviewed: fine."}]}),
    ]
    commit(repo, later, "second")
    out = tmp_path / "held.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "codemem_heldout.py"), "--repo",
                          f"dev/shop={repo / '.git'}", "--out", str(out), "--quiet"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    assert data["format"] == "codemem-1"
    [project] = data["projects"]
    assert project["id"] == "dev/shop" and project["root"] == ROOT_DIR
    assert "src/cart.py" in project["known_files"] and len(project["source"]["files"]) == 2
    [session] = project["sessions"]
    kinds = [(e["type"], e.get("text") or e.get("name")) for e in session["events"]]
    assert kinds == [("user_prompt", "fix the cart total"), ("tool_use", "Read"),
                     ("assistant_final", "The total starts at 0."), ("user_prompt", "/review src/cart.py"),
                     ("assistant_final", "Reviewed: fine.")], kinds
    read = session["events"][1]
    assert read["output"] == "     1\tTOTAL = 0" and read["started"].endswith("00:05Z") and not read["is_error"]


def dialogue(n):
    return {"context": {"mentor": "Emma", "mentee": "Oliver"}, "instructions": [[[n, 0]]], "fillers": [],
            "sessions": [{"text": f"Emma: always start function names with 'x{n}_'."}]}


def test_the_memorycode_dialogues_the_dev_file_does_not_hold_are_written_in_its_shape(tmp_path):
    repo = tmp_path / "MemoryCode"
    (repo / "dataset").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for n in (1, 2, 10):
        (repo / "dataset" / f"dialogue_{n}.json").write_text(json.dumps(dialogue(n)))
    (repo / "README.md").write_text("MemoryCode\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data"],
                   check=True)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    # A later commit changes a dialogue: the dev file's commit is the one read.
    (repo / "dataset" / "dialogue_2.json").write_text(json.dumps(dialogue(99)))
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "edit"],
                   check=True)
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps({"source": "https://example.org/MemoryCode", "commit": sha, "license": "Apache-2.0",
                               "paper": "arXiv:2502.13791", "split": "dev", "dialogues": {"dialogue_1": dialogue(1)}}))
    out = tmp_path / "held.json"
    script = str(ROOT / "bench" / "memorycode_heldout.py")
    run = subprocess.run([sys.executable, script, "--repo", str(repo / ".git"), "--dev", str(dev), "--out", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    assert list(data["dialogues"]) == ["dialogue_2", "dialogue_10"]
    assert data["dialogues"]["dialogue_2"] == dialogue(2)
    assert data["commit"] == sha and data["license"] == "Apache-2.0" and "held out" in data["split"]
    # A dev dialogue that is not the repository's: another source, so nothing is written.
    dev.write_text(json.dumps({"commit": sha, "dialogues": {"dialogue_1": dialogue(5)}}))
    out.unlink()
    run = subprocess.run([sys.executable, script, "--repo", str(repo / ".git"), "--dev", str(dev), "--out", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "differs" in run.stderr and not out.exists()
