"""F3: no secret on disk, in logs or in file names. A corpus of realistic FAKE secrets (made-up
shapes of each family, no real credential) goes through every path a hook stores, then every
file and file name of the data dir is searched for any 8-character piece of each secret."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ai_smartness as ai
from conftest import SCRIPT

A36 = "Q7hZk2LmN8pR4sT6vW1xY3zA5bC9dE0fG2hJ"  # 36 mixed characters: fake secret cores below
B40 = "wJ4lrXUtnFEMIK7MDENGbPxRfiCYzq81Kd0aPq2v"

# (family, text as it appears in a session, the secret's distinctive core), one row a line: a
# data file, since a table of same-shape rows is data, not code.
CORPUS = [tuple(row) for row in json.loads((Path(__file__).parent / "secret_corpus.json").read_text(encoding="utf-8"))]
# Ordinary text, code and identifiers that must come out unchanged.
ORDINARY = [
    "commit 7c31fb9e2d4f608e1a9c3b5d7f0e2a4c6b8d0f1e\nAuthor: dev <dev@localhost>\n\n    Fix the login",
    "request 123e4567-e89b-12d3-a456-426614174000 failed; retry with id 9b2f6a1e-1d3c-4b8e-9f7a-2c5d8e1b4a6f",
    "/home/bob/.ssh/id_ed25519 and /usr/lib/python3.11/site-packages/numpy/core/_methods.py",
    "x = tokens[i+1]\ntoken = self.tokenizer.encode_batch(texts)\nsecret = os.environ.get('APP_SECRET')",
    "password = getpass.getpass()\napi_key: Optional[str] = None\nPWD=/home/bob/project OLDPWD=/tmp",
    "def get_secret_key(self):\n    return self.config.SECRET_KEY\nmax_tokens=4096\nsort_key=lambda t: t[1]",
    "The password field must be validated; first pass: compile everything; bypass: true",
    "Use basic authentication over TLS; see https://example.com:8443/docs?page=2#auth",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 matches",
    "ssh -p 2222 deploy@host && mkdir -p build/out && curl -s https://example.com/api\nPWD=/tmp OLDPWD=/home/bob",
    "the monkey=banana test and keyboard layout; authors: alice, bob",
    "passwd = None\nself.passwd = password_mgr\nusername = password = None\npasswd = passwd or ''",
    "registry_key = cls.REGISTRY_KEY_DEBUG\nkey = element.namespaceURI, element.localName\n_SIGNATURE = 0x08074b50",
    "items.sort(key=pytree.Base.get_lineno)\nERRORTOKEN = token.ERRORTOKEN\nauth = base64.b64encode(raw)",
    'authorization = self.headers.get("authorization")\nauthorization = authorization.split()',
    # Prose near a secret's name: a duration, a date, a path, an identifier, a commit.
    "the session token expires in 3600 seconds; password changed on 2025-01-01T10:00:00Z",
    "the token file is /home/bob/.config/abc123def456/token.json and the key is user_id_2024_03_15_index_v2",
    "the key fix is in commit 36e3962 (git show 36e3962a5f0c4d1b2e3f4a5b6c7d8e9f0a1b2c3d)",
    # Long identifiers with digits and capitals are no generated key; a random name in a path is a file.
    "class K8sClusterAutoscalerV2Config(useAudioPlayerForPage2Test): MAX_HEADERS_2024_V2_FINAL = 2",
    "ReactDOMServerRenderingStream2 Base64EncodedSHA256Digest cp311-cp311-manylinux_2_17_x86_64",
    "mcp__playwright__browser_click ERR_OSSL_EVP_UNSUPPORTED_2 Ensure-Proper-Through-MCAO",
    "saved to uploads/Vb7Kq2XzL9mP4nR8sT1wY6cD3fG5hJ0a.png and ./cache/Vb7Kq2XzL9mP4nR8sT1wY6cD3fG5hJ0a",
]


def windows(core, n=8):
    return {core[i:i + n] for i in range(len(core) - n + 1)}


def leaks_in(text, corpus=CORPUS):
    return [fam for fam, _, core in corpus if any(w in text for w in windows(core))]


def test_corpus_is_large_and_distinct():
    assert len(CORPUS) >= 63 and len({f for f, _, _ in CORPUS}) == len(CORPUS)
    for fam, text, core in CORPUS:
        assert core in text or fam == "json_password_words", fam


@pytest.mark.parametrize("fam,text,core", CORPUS, ids=[c[0] for c in CORPUS])
def test_each_family_is_redacted(fam, text, core):
    out = ai.redact(text)
    assert "[REDACTED" in out and not leaks_in(out, [(fam, text, core)]), out
    assert ai.redact(out) == out  # idempotent: already-redacted text passes through unchanged


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_code_paths_shas_and_uuids_survive(text):
    assert ai.redact(text) == text


HOSTILE_UNITS = ["password=", "a.", "x://a:", "token: ", "-----BEGIN ", "ghp_", "Basic ", "mysql -u x ", "eyJ",
                 "curl -u a", "AAAA", "key=" + "a" * 30 + " ", "@", "::::", "dp.", "1234567890:",
                 "PuTTY-User-Key-File-1:", "[REDACTED:x]\n", "vault login -x ", "<password>", "--token ",
                 "Q7hZk2LmN8pR4sT6vW1xY3zA5bC9 ", "aB3-"]


def redact_cost(text, runs=3):
    """Best CPU time of a few runs: CPU time, not wall time, so other processes do not count."""
    best = float("inf")
    for _ in range(runs):
        vars(ai).get("_REDACTED", {}).clear()  # no memo: measure the scan
        start = time.process_time()
        ai.redact(text)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_redact_is_linear_on_hostile_runs(unit):
    """A run built to make a backtracking pattern go quadratic: ten times longer must cost about
    ten times more (a linear baseline in the same run), not a hundred times."""
    small, big = redact_cost(unit * (10_000 // len(unit)), 5), redact_cost(unit * (100_000 // len(unit)))
    assert big < 40 * small + 0.05, (small, big)


def test_redact_of_a_hostile_megabyte_is_linear():
    def hostile(size):
        return "".join(unit * (size // len(HOSTILE_UNITS) // len(unit)) for unit in HOSTILE_UNITS)
    small, big = redact_cost(hostile(100_000)), redact_cost(hostile(1_000_000), 2)
    assert big < 30 * small + 0.1, (small, big)


# ---- cuts: redaction comes first, so no cut leaves a piece of a secret ----

TOKEN = f"ghp_{A36}"
ENV_SECRET = f"AWS_SECRET_ACCESS_KEY={B40}"


def place(total, at, secret, filler="lorem ipsum dolor sit amet "):
    """`total` characters of prose with `secret` starting at `at`."""
    prose = (filler * (total // len(filler) + 2))
    return prose[:at] + " " + secret + " " + prose[at:total]


def boundary_offsets(boundary, secret):
    return range(max(0, boundary - len(secret) - 2), boundary + 3)


def check_cutter(cut, boundaries, total):
    for secret, core in ((TOKEN, A36), (ENV_SECRET, B40)):
        for boundary in boundaries:
            for at in boundary_offsets(boundary, secret):
                out = cut(place(total, at, secret))
                found = [w for w in windows(core) if w in out]
                assert not found, (boundary, at, found[:3], out[max(0, boundary - 80):boundary + 80])


def test_head_tail_cut_leaves_no_piece():
    total = 4000
    check_cutter(lambda t: ai.head_tail(t, 900, 600), [900, total + 2 - 600], total)


def test_code_outline_cut_leaves_no_piece():
    check_cutter(lambda t: ai.code_outline(t, 1200), [1200], 3000)


def test_shorten_cut_leaves_no_piece():
    check_cutter(lambda t: ai.shorten(t, 200), [199], 400)


def test_capture_cut_leaves_no_piece():
    check_cutter(lambda t: ai.clean_for_storage(t, limit=10 ** 6), [ai.MAX_CAPTURE_CHARS], ai.MAX_CAPTURE_CHARS + 200)
    check_cutter(lambda t: ai.clean_for_storage(t), [ai.MAX_MESSAGE_CHARS - 1], ai.MAX_MESSAGE_CHARS + 200)


@pytest.mark.parametrize("fam,text,core", [row for row in CORPUS if "\n" in row[1]], ids=lambda v: str(v)[:16])
def test_an_edit_of_some_lines_of_a_secret_leaves_no_piece(fam, text, core):
    # An edit is kept as the lines it changed, without the unchanged ones around them: a key's
    # short last line, changed alone, is a secret only beside its BEGIN line.
    lines = text.split("\n")
    hidden = [x.strip() for x in lines if len(x.strip()) >= 5 and x.strip() not in ai.redact(text)]
    for k in range(len(lines)):
        changed = "\n".join(lines[:k] + [lines[k] + "Z"] + lines[k + 1:])
        for old, new in ((text, changed), (changed, text)):
            out = ai.edit_change(f"head\n{old}\ntail", f"head\n{new}\ntail")
            assert not [x for x in hidden if x in out] and not [w for w in windows(core) if w in out], (fam, k, out)


def test_trim_strings_cut_leaves_no_piece():
    check_cutter(lambda t: ai.trim_strings({"x": t}, limit=5000)["x"], [5000], 5200)
    # A long payload string: the generous first cut still never leaves a piece.
    check_cutter(lambda t: ai.trim_strings([t], limit=5000)[0], [5000], 5000 + ai.SECRET_SPAN + 500)


def test_recall_query_cut_leaves_no_piece():
    def query(text):
        return ai.recall_query({"tool_name": "Read", "tool_input": {"file_path": ".ai/recall/" + text}}, "/p")
    check_cutter(query, [300], 500)


def test_clean_field_cut_leaves_no_piece():
    check_cutter(lambda t: ai.clean_field(t, 100), [99], 300)


def test_trim_strings_sanitises_keys_and_raw_fields_are_cleaned_where_stored():
    out = ai.trim_strings({"tool_input": {"\ud800": 1, TOKEN: "x"}, "session_id": {"a": [1]}, "reason": 7})
    json.dumps(out, ensure_ascii=False).encode("utf-8")  # keys included: encodable
    assert "?" in out["tool_input"] and not leaks_in(json.dumps(out))
    typed = ai.clean_payload(out)
    assert "session_id" not in typed and typed["reason"] == "7"
    kept = ai.clean_field("keep " + TOKEN + "\x00\x07", ai.INSTRUCTIONS_CHARS)
    assert kept.startswith("keep [REDACTED") and "\x00" not in kept
    assert ai.clean_field({"a": [1]}) == '{"a": [1]}' and ai.clean_field(None) is None
    assert ai.clean_field("r" * 5000) == "r" * (ai.FIELD_CHARS - 1) + "…"


def test_log_fields_are_redacted(tmp_path):
    log = ai.Log(str(tmp_path / "x.log"))
    log.info(f"recall {TOKEN}", query=TOKEN, nested={"k": [ENV_SECRET]}, n=3)
    text = (tmp_path / "x.log").read_text()
    assert "[REDACTED" in text and not leaks_in(text, [("t", TOKEN, A36), ("e", ENV_SECRET, B40)])
    assert json.loads(text)["n"] == 3


# ---- every path, then a grep of the whole data dir ----


def data_dir_leaks(data_dir):
    """Families with an 8-character piece in any file or file name under the data dir."""
    wanted = {}
    for fam, _, core in CORPUS:
        for w in windows(core):
            wanted.setdefault(w, fam)
    runs = set()
    for root, dirs, files in os.walk(data_dir):
        for name in dirs + files:
            runs.add(name)
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or name.endswith((".sock", ".lock")):
                continue
            with open(path, "rb") as fh:
                data = fh.read().decode("utf-8", "replace")
            runs.update(re.findall(r"\S{8,}", data.replace("\\n", "\n")))
    found = {}
    for run in runs:
        for i in range(len(run) - 7):
            fam = wanted.get(run[i:i + 8])
            if fam:
                found.setdefault(fam, run[max(0, i - 20):i + 28])
    return found


def test_every_family_through_every_path_leaves_nothing(project, tmp_path):
    store = ai.Store(ai.data_dir_of(str(project))).ensure()

    def run(name, payload):
        ai.answer(name, payload, store)

    for i, (fam, text, core) in enumerate(CORPUS):
        sid = f"session-{i}"
        run("inject", {"session_id": sid, "prompt": f"the {fam} deploy fails with this setting: {text}"})
        run("capture", {"session_id": sid, "tool_name": "Bash", "tool_input": {"command": "cat .env"},
                        "tool_response": {"stdout": f"{fam} settings\n{text}\n", "stderr": ""}})
        run("capture", {"session_id": sid, "tool_name": "Read", "tool_input": {"file_path": f"{project}/.env"},
                        "tool_response": {"type": "text", "file": {"content": f"# {fam}\n{text}\n"}}})
        run("capture", {"session_id": sid, "tool_name": "Write", "tool_input": {
            "file_path": f"{project}/deploy_{i}.sh", "content": f"#!/bin/sh\n{text}\n"}})
        run("capture", {"session_id": sid, "tool_name": "Edit", "tool_input": {
            "file_path": f"{project}/app.py", "old_string": "x = 1", "new_string": f"config for {fam}\n{text}"}})
        run("capture", {"session_id": sid, "tool_name": "WebFetch", "tool_input": {"url": "https://docs.example.com",
                        "prompt": f"find {fam}"}, "tool_response": {"result": f"The page shows {text} for {fam}"}})
        run("stop", {"session_id": text, "last_assistant_message": f"I set up {fam} with {text} as asked."})
        # A path holds no line break: a key split across lines arrives glued, other texts spaced.
        query = text.replace("\n", "" if fam == "key_next_line" else " ")
        run("pretool", {"session_id": sid, "tool_name": "Read",
                        "tool_input": {"file_path": f"{project}/.ai/recall/deploy {query}"}})
        transcript = tmp_path / f"t{i}.jsonl"
        transcript.write_text("\n".join(json.dumps({"type": role, "message": {"role": role, "content": f"We decided to use {text} for {fam}."}})
                                        for role in ("user", "assistant")) + "\n")
        run("precompact", {"session_id": text, "trigger": text, "custom_instructions": f"keep {text}",
                           "transcript_path": str(transcript)})
        run("end", {"session_id": text, "reason": text})
    ai.Memory(store.dir).drain()
    assert len(store.read_digest()) > 10  # the captures were stored, not dropped
    assert data_dir_leaks(store.dir) == {}


def test_real_hook_processes_store_no_secret(project, tmp_path):
    """The process entry: PreCompact and SessionEnd with the whole corpus in every raw field."""
    everything = "\n".join(text for _, text, _ in CORPUS)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "user", "message": {"content": f"We decided: {everything}"}}) + "\n")
    env = dict(os.environ, CLAUDE_PROJECT_DIR=str(project), AI_SMARTNESS_EMBEDDER="hash")
    for name, payload in (("precompact", {"session_id": everything, "trigger": everything,
                                          "custom_instructions": everything, "transcript_path": str(transcript)}),
                          ("end", {"session_id": everything, "reason": everything})):
        proc = subprocess.run([sys.executable, str(SCRIPT), "hook", name], input=json.dumps(payload).encode(),
                              capture_output=True, env=env, timeout=60)
        assert proc.returncode == 0 and proc.stdout == b"", proc.stderr
    data = project / ".ai"
    assert list((data / "db" / "synthesis").glob("*.json")) and (data / "heartbeat.json").exists()
    assert data_dir_leaks(str(data)) == {}


def test_an_upgrade_redacts_again_what_an_older_version_stored(project):
    """Text an older version stored under fewer secret patterns is redacted again, once, when the
    daemon of a version with new patterns starts: recall and thread views then cut stored text
    without redacting it on every answer."""
    from conftest import cli
    from support import stop_daemons, wait_for
    mem = ai.open_memory(str(project), embedder="hash")
    mem.capture("Deploy notes for the billing service: the staging rollout is done.")
    store = mem.store
    everything = "\n".join(text for _, text, _ in CORPUS)
    # What the older version left: the corpus in a message, a title, a rule, the heartbeat, a
    # synthesis and a capture still journaled.
    rec = next(store.iter_threads())
    rec["title"] += " " + CORPUS[0][1]
    rec["messages"][0]["text"] += "\n" + everything
    rec["topic_counts"][CORPUS[2][1]] = 1.0  # a tally keyed by words
    store.save_thread(rec)
    store.save_rules([{"text": f"Never log {CORPUS[1][1]}", "created_at": ai.iso(time.time())}])
    ai.write_json_atomic(store.heartbeat_file, {"last_task": everything})
    store.write_synthesis({"text": everything, "schema": 1}, time.time())
    store.inbox_append(dict(ai.prepare_capture("The deploy settings are in the vault.", "prompt"), text=everything))
    store.write_recall("deploy", everything)  # a recall answer generated before the upgrade
    assert len(data_dir_leaks(store.dir)) > len(CORPUS) / 2
    try:
        assert cli("daemon", "start", project=project, env={"AI_SMARTNESS_EMBEDDER": "hash"}).returncode == 0
        wait_for(lambda: ai.daemon_info(store).get("ready") is True, "the daemon to be ready")
    finally:
        stop_daemons(project)
    assert data_dir_leaks(store.dir) == {}
    assert "Deploy notes for the billing service" in json.dumps(list(store.iter_threads()))
    assert ai.scrub_store(store) == 0  # once per set of patterns


def test_recall_thread_views_and_context_cut_stored_text_without_redacting_it_again(project, monkeypatch):
    """Stored text was redacted when captured (and after an upgrade, by scrub_store): a recall
    or a prompt's context pays for no second pass over each quoted message."""
    mem = ai.open_memory(str(project), embedder="hash")
    notes = ["The billing rollout on staging is done: webhooks retried with backoff.",
             "Billing webhooks store the Stripe event id so a retry is idempotent."]
    for note in notes:
        mem.capture(note)
    seen = []
    real = ai.redact
    monkeypatch.setattr(ai, "redact", lambda text: seen.append(text) or real(text))
    text = mem.recall("billing webhooks retry")
    text += mem.recall(next(iter(mem.threads)))
    text += mem.context("billing webhooks retry", 2000)["text"]
    assert all(note in text for note in notes)
    assert not [t for t in seen if any(note in t for note in notes)]
