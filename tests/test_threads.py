"""Threads that follow the work: labelled note streams (purity, fragmentation), turns of a
session, and what a reader sees of a thread (title, topics, summary). MiniLM: test_minilm.py."""
import json

import pytest

import ai_smartness as ais
import streams_data
from test_hook_units import store  # noqa: F401  (a fixture)

START, GAP = 1.7e9, 60.0


def replay(project, stream, embedder):
    mem = ais.open_memory(str(project), embedder=embedder)
    owner = {}
    for i, (topic, text) in enumerate(stream):
        owner[mem.capture(text, at=START + i * GAP)["message_id"]] = topic
    return mem, {tid: [owner[m["id"]] for m in t["messages"]] for tid, t in mem.threads.items()}


def test_measures_on_a_known_split():
    members = {"a": ["x", "x", "y"], "b": ["y"], "c": ["x"]}
    assert streams_data.purity(members) == pytest.approx(4 / 5)
    assert streams_data.fragmentation(members) == pytest.approx(3 / 2)
    assert streams_data.singles(members) == pytest.approx(2 / 3)


def test_every_stream_holds_its_notes_once():
    for name, stream in {**streams_data.streams(), **streams_data.held_out_streams()}.items():
        texts = [t for _, t in stream]
        assert len(texts) == len(set(texts)) >= 20, name


def test_stdlib_embedder_groups_notes_and_keeps_them_mostly_pure(tmp_path):
    """The hashing embedder only sees shared words, and these notes share few: the concepts
    the words name (CONCEPTS) in its vectors and in the decision scores group the terse ones
    into 4 threads at purity 1.0 (5 before kin concepts, 8 at 0.85 before concepts, 14 before
    relative evidence); over every stream, 5.2 threads at purity 0.99 (5.5 before code words
    said in notes were topics, 5.6 before kin concepts, 5.9 before acronyms such as CI were
    topics, 9.1 at 0.89 before concepts)."""
    _, members = replay(tmp_path / "terse", streams_data.streams()["terse-interleaved"], ais.HashEmbedder())
    assert streams_data.purity(members) == 1.0 and len(members) <= 4
    purities, counts = [], []
    for name, stream in streams_data.streams().items():
        _, got = replay(tmp_path / name, stream, ais.HashEmbedder())
        purities.append(streams_data.purity(got))
        counts.append(len(got))
    assert sum(purities) / len(purities) >= 0.95 and min(purities) >= 0.9
    assert sum(counts) / len(counts) <= 5.3


def test_concepts_name_the_domain_notes_share_without_a_word():
    """Topics map to the domains of CONCEPTS by stem, a hyphenated or snake_case topic by its
    parts; a word naming two domains gives each half of its weight."""
    assert ais.concepts_of(["checkbox"]) == {"ui": 1.0}
    assert ais.concepts_of(["oauth-callback"]) == ais.concepts_of(["logins"]) == {"auth": 1.0}
    assert set(ais.concepts_of(["lock_timeout"])) >= {"database", "reliability"}
    assert ais.concepts_of({"index": 2.0})["search"] == pytest.approx(1.0)
    assert ais.concepts_of(["weather", "tenant"]) == {}
    assert ais.concepts_of(["colonne"]) == ais.concepts_of(["columna"]) == ais.concepts_of(["columns"])
    react = {"topic_counts": {"react": 2.0, "login": 1.5, "password": 1.0, "email": 0.5}}
    postgres = {"topics": ["postgres", "migration", "orders", "backfill"]}
    plain = {"topics": ["tenant", "orders"]}
    (same, shared), (other, none), (neutral, _) = ais.concept_terms(["disable", "submit", "checkbox"],
                                                                    [react, postgres, plain])
    assert same > 0 > other and shared == ["ui"] and none == [] and neutral == 0.0
    assert ais.concept_terms(["tenant"], [react]) == [(0.0, [])]
    # A migration note leans to a database thread that names no migration word (CONCEPT_KIN),
    # not as far as to a thread of its own domain, farther than to one of another domain.
    database = {"topics": ["postgres", "table", "orders"]}
    (kin, kin_shared), (ui, _), (own, _) = ais.concept_terms(["alter", "backfill"], [database, react, postgres])
    assert own > kin > ui and kin_shared == []


def test_a_decision_record_names_the_concepts_behind_a_join(project):
    """A note that shares no word with its thread joins it on their domain, and the decision's
    "top" entries say which (decision log and capture answer alike); a session's capture
    weighs no concept."""
    mem = ais.open_memory(str(project), embedder=ais.HashEmbedder())
    notes = ["React login form with email and password fields",
             "postgres migration adds tenant_id to the orders table",
             "show the validation message under the email input on the login page",
             "remember-me checkbox on the sign-in screen"]
    for i, text in enumerate(notes):
        decision = mem.capture(text, at=START + i * GAP)
    react = next(t for t in mem.threads.values() if "react" in t["topics"])
    assert decision["thread_id"] == react["id"]
    top = next(e for e in decision["top"] if e["thread_id"] == react["id"])
    assert top["concepts"][:2] in (["ui", "auth"], ["auth", "ui"])
    logged = [json.loads(line) for line in open(mem.store.log.path, encoding="utf-8")]
    assert any("concepts" in e for r in logged if r.get("msg") == "decision" for e in r["top"])
    # In a session the turn carries the task: the same text weighs no concept there.
    entry = ais.prepare_capture(notes[-1], "prompt", at=START + 9 * GAP, session_id="s1", origin="prompt")
    cid = mem.store.inbox_append(entry)
    assert not any("concepts" in e for e in mem.drain()[cid]["top"])


def test_stored_vectors_of_the_previous_hash_embedder_are_re_embedded(project):
    """hash-v2 added concept features: a memory of hash-v1 vectors is made again when the daemon
    warms up (upgrade_vectors), once; another model's vectors wait for `reindex`."""
    class Old(ais.HashEmbedder):
        id = "hash-v1"

    class Model(ais.HashEmbedder):
        id = "some-model-v1"
    mem = ais.open_memory(str(project), embedder=Old())
    for i, text in enumerate(["postgres migration adds tenant_id to orders", "React login form"]):
        mem.capture(text, at=START + i * GAP)
    mem = ais.open_memory(str(project), embedder=ais.HashEmbedder())
    assert mem.stats()["mixed_models"] == ["hash-v1"]
    assert ais.upgrade_vectors(mem) == 2 and ais.upgrade_vectors(mem) == 0
    stats = ais.open_memory(str(project), embedder=ais.HashEmbedder()).stats()
    assert stats["mixed_models"] == [] and stats["embedding_model"] == "hash-v2" == ais.HashEmbedder.id
    other = ais.open_memory(str(project / "other"), embedder=Model())
    other.capture("React login form", at=START)
    assert ais.upgrade_vectors(ais.open_memory(str(project / "other"), embedder=ais.HashEmbedder())) == 0


def test_a_daemon_warming_up_makes_older_stdlib_vectors_again(project):
    from conftest import cli
    from support import stop_daemons, wait_for

    class Old(ais.HashEmbedder):
        id = "hash-v1"
    ais.open_memory(str(project), embedder=Old()).capture("postgres migration adds tenant_id to orders")
    store = ais.Store(ais.data_dir_of(str(project)))
    try:
        assert cli("daemon", "start", project=project, env={"AI_SMARTNESS_EMBEDDER": "hash"}).returncode == 0
        wait_for(lambda: ais.daemon_info(store).get("ready") is True, "the daemon to be ready")
    finally:
        stop_daemons(project)
    assert ais.open_memory(str(project), embedder="hash").stats()["mixed_models"] == []


def turn(mem, session, prompt, tools=(), conclusion=None, at=START, turn_id=None):
    """One turn through the engine as the hooks journal it; the thread of each capture."""
    out = []
    entries = [(prompt, "prompt", "prompt")] + [(t, "tool:Bash", "command") for t in tools]
    if conclusion:
        entries.append((conclusion, "assistant", "prompt"))
    for k, (text, source, origin) in enumerate(entries):
        entry = ais.prepare_capture(text, source, at=at + k, session_id=session, origin=origin)
        if turn_id:
            entry["turn"] = turn_id
        cid = mem.store.inbox_append(entry)
        out.append(mem.drain()[cid]["thread_id"])
    return out


def test_a_turns_tool_results_and_conclusion_join_its_prompts_thread(project):
    mem = ais.open_memory(str(project), embedder="fake")
    got = turn(mem, "s1", "Make the invoice PDF export stream rows instead of loading them all",
               tools=["$ git status\nOn branch main\nnothing to commit", "$ ls -la\ntotal 0",
                      "$ pytest -q\n3 passed in 0.2s"],
               conclusion="Done: the exporter streams rows now. Next: add a progress bar.")
    assert len(set(got)) == 1  # the git, ls and pytest outputs are not threads of their own
    thread = mem.threads[got[0]]
    assert thread["title"].startswith("Make the invoice PDF export")
    assert "Done: the exporter streams rows now" in thread["summary"]
    # A short follow-up prompt of the same session continues that thread.
    assert turn(mem, "s1", "run the failing test again", at=START + 60)[0] == got[0]
    # A new session's prompt on another subject starts a thread; its tool results follow it.
    other = turn(mem, "s2", "Set up the nginx reverse proxy for the staging server",
                 tools=["$ nginx -t\nsyntax is ok"], at=START + 120)
    assert other[0] != got[0] and other[1] == other[0]


def test_a_prompt_its_whole_turn_left_joins_the_thread_the_turn_went_to(project):
    """A reply to the agent's proposal ("Option 1. Please create documentation for this approach",
    in a replayed session) shares no word with the work: it starts a thread, its turn's work and
    answer go to the thread they continue, and a work-stream of that one prompt was left. It
    joins that thread when the turn's answer does."""
    mem = ais.open_memory(str(project), embedder="fake")
    railway = turn(mem, "s1", "Deploy the backend service to Railway with a railway.json config",
                   tools=["$ railway up\nDeploying the backend service to Railway from railway.json"],
                   conclusion="The backend service deploys to Railway from railway.json.", turn_id="p1")
    assert len(set(railway)) == 1
    reply = turn(mem, "s1", "Option 1. Please write docs for that approach",
                 tools=["$ cat railway.json\nthe backend service deploys to Railway from railway.json config"],
                 conclusion="Done: the docs say how the backend service deploys to Railway from railway.json.",
                 turn_id="p2", at=START + 60)
    assert reply[0] != railway[0] and reply[1:] == [railway[0]] * 2  # as the turn was placed
    assert reply[0] not in mem.threads and mem.thread_id_of(reply[0]) == railway[0]
    assert [m["text"] for m in mem.threads[railway[0]]["messages"] if m["source"] == "prompt"] == [
        "Deploy the backend service to Railway with a railway.json config", "Option 1. Please write docs for that approach"]
    # A client that gives its prompts a turn id but not its tool results and answers (older ones;
    # the replays): the session's latest prompt is the turn's.
    lone = turn(mem, "s1", "Then the second proposal, spell it out", turn_id="p9", at=START + 90)[0]
    assert lone != railway[0]
    for k, (text, source) in enumerate((("$ cat railway.json\nthe backend service deploys to Railway", "tool:Bash"),
                                        ("The backend service deploys to Railway from railway.json.", "assistant"))):
        cid = mem.store.inbox_append(ais.prepare_capture(text, source, at=START + 91 + k, session_id="s1"))
        assert mem.drain()[cid]["thread_id"] == railway[0]
    assert lone not in mem.threads
    # A turn whose work stayed with its prompt keeps its thread.
    other = turn(mem, "s1", "Rotate the JWT signing keys for the auth service", tools=["$ openssl genrsa 2048\nJWT keys"],
                 conclusion="Rotated the JWT signing keys of the auth service.", turn_id="p3", at=START + 120)
    assert len(set(other)) == 1 and other[0] in mem.threads


def test_a_follow_up_that_names_no_work_stays_with_its_sittings_task(project):
    """"Still around 2 secs" shares no word with the task it follows and is about as close to
    another fix: minutes into the sitting it goes on with the session's task; after a pause as
    long as a new conversation's (SESSION_GAP_SECONDS) it starts a thread. A new task close to
    nothing starts one mid-sitting."""
    follow_up = "Still around 2 secs. Any way we can make it near instant?"

    class Placed(ais.FakeEmbedder):
        """Cosines set by hand: the task on one axis, the other fix on another, the follow-up
        between them (0.20 and 0.19: scores of 0.14 and 0.133, neither clearly ahead)."""
        def embed(self, texts):
            def axes(text):
                if text == follow_up:
                    return [0.2, 0.19, (1 - 0.2 ** 2 - 0.19 ** 2) ** 0.5, 0.0]
                return [float("course" in text), float("chart" in text), 0.0, float("JWT" in text)]
            return [ais.unit(axes(t) + [0.0] * (self.dim - 4)) for t in texts]
    for pause, same in ((240, True), (ais.SESSION_GAP_SECONDS + 60, False)):
        mem = ais.open_memory(str(project / str(pause)), embedder=Placed())
        turn(mem, "s2", "The admin dashboard chart renders slowly with a year of orders", at=START - 1800,
             conclusion="Done: the chart memoizes its points.")
        task = turn(mem, "s1", "When a student logs in, the course page takes 2-3 seconds to show the lessons",
                    conclusion="Done: the course page loads lessons and progress in parallel.")[0]
        assert (turn(mem, "s1", follow_up, at=START + pause)[0] == task) is same
        assert turn(mem, "s1", "Rotate the JWT signing keys of the auth service", at=START + pause + 60)[0] != task


def test_tool_results_of_a_session_whose_prompts_were_acknowledgements_follow_its_work(project):
    """A session resumed with "continue" (an acknowledgement: not stored) has no prompt to follow:
    its tool results follow the session's latest work, not a thread each."""
    mem = ais.open_memory(str(project), embedder="fake")
    assert ais.prepare_capture("continue", "prompt", session_id="s1") is None
    got = []
    for k, text in enumerate(["$ go build ./...\nok", "$ ls -la internal\ntotal 0", "$ git status\nOn branch main"]):
        cid = mem.store.inbox_append(ais.prepare_capture(text, "tool:Bash", at=START + k, session_id="s1",
                                                         origin="command"))
        got.append(mem.drain()[cid]["thread_id"])
    assert len(set(got)) == 1


def test_a_turn_id_finds_its_prompt_even_after_another_sessions_prompt(project):
    mem = ais.open_memory(str(project), embedder="fake")
    first = turn(mem, "s1", "Rotate the JWT signing keys for the auth service", turn_id="p1")[0]
    turn(mem, "s1", "Write the Postgres migration adding tenant_id to orders", turn_id="p2", at=START + 10)
    entry = ais.prepare_capture("$ openssl genrsa 2048\n-----", "tool:Bash", at=START + 20, session_id="s1",
                                origin="command")
    entry["turn"] = "p1"
    cid = mem.store.inbox_append(entry)
    assert mem.drain()[cid]["thread_id"] == first
    stored = next(m for m in mem.threads[first]["messages"] if m["source"] == "tool:Bash")
    assert stored["turn"] == "p1"


def test_hooks_journal_the_turn_of_a_payload(store):
    base = {"session_id": "s", "prompt_id": "turn-7"}
    ais.answer("capture", dict(base, tool_name="Bash", tool_input={"command": "make build"},
                               tool_response={"stdout": "built the invoices module"}), store, None)
    ais.answer("stop", dict(base, last_assistant_message="The invoices module builds again."), store, None)
    ais.answer("stop", {"session_id": "s", "last_assistant_message": "No turn id from older clients."}, store, None)
    entries = [store.inbox_read(p) for p in store.inbox_pending()]
    assert [e.get("turn") for e in entries] == ["turn-7", "turn-7", None]


def test_topics_are_concepts_and_titles_say_what_the_work_is():
    ex = ais.EXTRACTOR.extract("Read /home/dev/proj/src/components/LoginForm.tsx:\nimport React from 'react';\n"
                               "export default function LoginForm() { return <div className='p-4'>", "file_read",
                               "/home/dev/proj/src/components/LoginForm.tsx")
    assert ex["title"] == "Read LoginForm.tsx"
    assert not set(ex["topics"]) & {"home", "dev", "proj", "src", "components", "div", "export", "return", "tsx"}
    assert "loginform" in ex["topics"]
    cmd = ais.EXTRACTOR.extract("$ ls -la /tmp/work/proj/.claude (List the hook folder)\n"
                                "drwxr-xr-x 2 dev staff 64 Dec 1 .", "command")
    assert cmd["title"] == "List the hook folder"
    bare = ais.EXTRACTOR.extract("$ git ls-files /tmp/work/proj/src\nsrc/a.py", "command")
    assert "/tmp" not in bare["title"] and bare["title"].startswith("$ git ls-files")
    nums = ais.EXTRACTOR.topics("padding 1rem on 2025-11-24 for module 0042: the checkout total is wrong")
    assert "checkout" in nums and not [t for t in nums if any(c.isdigit() for c in t)] and "padding" not in nums
    # Said, a code word names the domain it means; in code, or said as an everyday word, none.
    note = ais.EXTRACTOR.extract("every log line should carry the request id; the login form too")["topics"]
    assert {"log", "form"} <= set(note)
    code = ais.EXTRACTOR.extract("console.log(form); return <form>", "file_read", "src/app.js")["topics"]
    assert not {"log", "form"} & set(code)
    assert "case" not in ais.EXTRACTOR.topics("in that case the deploy waits", said=True)
    # An elided article is no part of the word it stands with.
    elided = ais.EXTRACTOR.topics("l'export d’utilisateurs échoue quand l’en-tête manque", said=True)
    assert {"export", "utilisateurs", "en-tête"} <= set(elided), elided
    go = ais.EXTRACTOR.extract("Read internal/server/router.go:\npackage server\n\nfunc (s *Server) Route(ctx context.Context, "
                               "req *Request) (res *Response, err error) {\n\tdefer s.mu.Unlock()\n\tfmt.Println(req)",
                               "file_read", "internal/server/router.go")["topics"]
    assert "router" in go and not {"func", "ctx", "req", "res", "err", "defer", "fmt"} & set(go), go
    dom = ais.EXTRACTOR.extract("Read static/gallery.js:\nconst panel = document.getElementById('detail');\n"
                                "panel.classList.add('open'); panel.textContent = photo.caption.toString();\n"
                                "const onPick = useCallback(() => setTimeout(show, 10), []); const box = useRef(null);",
                                "file_read", "static/gallery.js")["topics"]
    assert "gallery" in dom and not {"getelementbyid", "classlist", "textcontent", "tostring", "usecallback",
                                     "settimeout", "useref"} & set(dom), dom
    # A terminal session pasted as a prompt: the command is the work, the user and machine no topic.
    pasted = ais.EXTRACTOR.extract("dana@MacBook-Pro etl-2025 % poetry run python scripts/batch.py\nTimeoutError\n"
                                   "dana@MacBook-Pro etl-2025 % poetry install\n(venv) dana@box:~/etl$ make", "prompt")
    assert pasted["title"] == "poetry run python scripts/batch.py"
    assert not {"dana", "macbook-pro", "etl-2025", "box"} & set(pasted["topics"]), pasted["topics"]
    assert ais.EXTRACTOR.extract("PS C:\\app> npm run build", "prompt")["title"] == "npm run build"
    zsh = ais.EXTRACTOR.extract("base) ➜  golfgod_x_convex git:(main) ✗ npx convex dev\n✖ Error: Unable to finish push",
                                "prompt")
    assert zsh["title"] == "npx convex dev" and "golfgod_x_convex" not in zsh["topics"]
    # Starship's or Powerlevel10k's `❯`, with the status it draws in Nerd Font glyphs beside the command or above it.
    right = ais.EXTRACTOR.extract("~/Projects/erewhon/medianator ❯ cargo run --release        \ue0a0 main [ ~7 ?3] is "
                                  "📦 v0.1.0 via 🦀 v1.70.0  4s827ms\nerror: failed to select a version for `ort`", "prompt")
    assert right["title"] == "cargo run --release" and not {"main", "medianator", "v1"} & set(right["topics"]), right
    above = ais.EXTRACTOR.extract("medianator on \ue0a0 main [!?] is 📦 v0.1.0 via 🦀 v1.89.0\n❯ cargo build\n"
                                  "error[E0432]: unresolved import `ort::session`", "prompt")
    assert above["title"] == "cargo build" and "medianator" not in above["topics"], above
    assert ais.EXTRACTOR.extract("Settings ❯ Privacy: the toggle is gone", "prompt")["title"] == \
        "Settings ❯ Privacy: the toggle is gone"  # a menu's path, not a prompt
    # A terminal UI's dialog pasted back: its frame and input mark are no words of the work.
    framed = ais.EXTRACTOR.extract("│ │ Option 5: Check Deployment Logs because U cant see in [Image #1]", "prompt")
    assert framed["title"] == "Option 5: Check Deployment Logs because U cant see in", framed
    boxed = ais.EXTRACTOR.extract("╭──────────────╮\n│ > fix the login redirect │\n╰──────────────╯", "prompt")
    assert boxed["title"] == "fix the login redirect" and "│" not in boxed["summary"], boxed
    # A pasted log is about its first error, not its first line, nor the time and tag each line opens with.
    vercel = ais.EXTRACTOR.extract("21:07:51.289 Running build in Washington, D.C., USA (East) – iad1\n"
                                   "21:07:51.290 Build machine configuration: 2 cores\n21:08:21.371 Failed to compile.\n"
                                   "21:08:21.373 Type error: Type 'NextResponse' is not assignable", "prompt")
    assert vercel["title"] == "Failed to compile.", vercel
    logcat = ais.EXTRACTOR.extract("E/flutter (15059): [ERROR:flutter/runtime/dart_vm_initializer.cc(40)] Unhandled "
                                   "Exception: PlatformException(error, just_audio_background)", "prompt")
    assert logcat["title"].startswith("Unhandled Exception: PlatformException"), logcat
    assert ais.EXTRACTOR.extract("2024-05-01T10:00:00Z app listening\n2024-05-01T10:00:02Z TypeError: x is undefined",
                                 "prompt")["title"] == "TypeError: x is undefined"
    assert ais.EXTRACTOR.extract("ERROR handling in the parser is wrong", "prompt")["title"] == \
        "ERROR handling in the parser is wrong"  # a word of the request, not a log's level
    # A build's output is about its first error, not the warnings before it; a note of the user's stays.
    for build, title in (("warning: Run script build phase '[CP-User] [Hermes] Replace Hermes' will be run during "
                          "every build\nnote: Run script build phase '[CP-User] Generate app.config' will be run\n"
                          "** BUILD FAILED **\n\nThe following build commands failed:\n        CompileAssetCatalog\n"
                          "error: script \"ios\" exited with code 1", 'error: script "ios" exited with code 1'),
                         ("src/app.ts(4,2): warning TS6133: 'x' is declared but its value is never read.\n"
                          "src/app.ts(9,1): error TS2307: Cannot find module './auth'.",
                          "src/app.ts(9,1): error TS2307: Cannot find module './auth'."),
                         ("warning: unused variable: `x`\n --> src/main.rs:2:9\nerror[E0382]: borrow of moved value: "
                          "`v`\n --> src/main.rs:5:20", "error[E0382]: borrow of moved value: `v`"),
                         ("warning: deprecated API\nwarning: slow path\n** BUILD FAILED **", "** BUILD FAILED **"),
                         ("note: I renamed the tests. Please run them and fix the error in auth",
                          "note: I renamed the tests.")):
        assert ais.EXTRACTOR.extract(build, "prompt")["title"] == title, build
    # A tool's output pasted after a fragment of its banner is about its first error, not a line marked done.
    next_dev = ("/sc:troubleshoot (ress Ctrl+C to stop all services...\n\n ✓ Compiled /middleware with 0 errors\n"
                " ⨯ [Error: `headers` was called outside a request scope. Read more: https://nextjs.org/docs]\n"
                " ○ Compiling /_error ...\n GET / 404")
    assert ais.EXTRACTOR.extract(next_dev, "prompt")["title"] == \
        "/sc:troubleshoot [Error: `headers` was called outside a request scope."
    assert ais.EXTRACTOR.extract("fix this:\n✖ Error: Unable to push to the deployment\n⠙ Retrying", "prompt")[
        "title"] == "fix this: Error: Unable to push to the deployment"
    assert ais.EXTRACTOR.extract("✅ login works\n❌ signup is slow\n✅ reset works", "prompt")["title"] == \
        "✅ login works"  # a checklist with no error: as typed
    # A reply before the request names no work; the request does.
    assert ais.EXTRACTOR.extract("Still not working. Can you use the Supabase MCP to check the signup webhook?",
                                 "prompt")["title"] == "Can you use the Supabase MCP to check the signup webhook?"
    assert ais.EXTRACTOR.extract("sounds great! proceed", "prompt")["title"] == "sounds great!"  # nothing else to say
    # Nor does a limit set on it; a prompt that is only a limit keeps it.
    for said, title in (("Do NOT read the .env files. Count how many .env and .env.sample files there are.",
                         "Count how many .env and .env.sample files there are."),
                        ("Ne modifie rien. Explique pourquoi le module de facturation arrondit mal.",
                         "Explique pourquoi le module de facturation arrondit mal."),
                        ("Nunca uses var. Revisa el módulo de facturación y sus tests.",
                         "Revisa el módulo de facturación y sus tests."),
                        ("Do not write anything, just research and report", "Do not write anything, just research and report"),
                        ("Never use var in the billing module. Always const.", "Never use var in the billing module."),
                        ("Nevertheless the build fails on CI. Fix the pipeline config.",
                         "Nevertheless the build fails on CI.")):
        assert ais.EXTRACTOR.extract(said, "prompt")["title"] == title, said
    # A first line that leads into a paste ("Getting this error:") is titled with what it pastes.
    assert ais.EXTRACTOR.extract("Getting this error messaging:\n\nCould not load the library\n\nPostgrestException(",
                                 "prompt")["title"] == "Getting this error messaging: Could not load the library"
    assert ais.EXTRACTOR.extract("Still failing on Vercel:\\\n17:03:19.090 Running build\n17:03:49.112 Error: Command "
                                 "\"npm run build\" exited with 1", "prompt")["title"] == \
        'Still failing on Vercel: Error: Command "npm run build" exited with 1'
    assert ais.EXTRACTOR.extract("launch an agent team on:\n\n  1. Fix the auth strategy\n  2. Wire the resolver",
                                 "prompt")["title"] == "launch an agent team on: Fix the auth strategy"
    # Its login banner (macOS Terminal, ssh) neither; a slash command on a line of its own asks of the next.
    banner = ais.EXTRACTOR.extract("Last login: Fri Nov  7 14:25:43 on ttys058\n(base) ➜  gist-console git:(master) ✗ "
                                   "npx convex dev\n✔ Convex functions ready!", "prompt")
    assert banner["title"] == "npx convex dev" and not {"ttys058", "last", "login", "fri", "nov"} & set(banner["topics"])
    assert ais.EXTRACTOR.extract("/sc:troubleshoot Last login: Tue Nov 25 01:02:03 2025 from 10.0.0.5\n"
                                 "dana@box:~/etl$ make deploy\nmake: *** [deploy] Error 1", "prompt")["title"] == \
        "/sc:troubleshoot make deploy"
    assert ais.EXTRACTOR.extract("/prime\n\nfix the login redirect", "prompt")["title"] == "/prime fix the login redirect"
    assert ais.EXTRACTOR.extract("what does Last login: mean", "prompt")["title"] == "what does Last login: mean"
    bullet = ais.EXTRACTOR.extract("- I'd like to trigger processing manually.\n- and see the results", "prompt")
    assert bullet["title"] == "I'd like to trigger processing manually." and "i'd" not in bullet["topics"], bullet
    mac = ais.EXTRACTOR.extract("Mac:etl-restore-28-Jul-2025 copy dana$ python3 'scripts/months.py'\n"
                                "bash: python: command not found", "prompt")  # macOS bash's prompt, a dated folder
    assert mac["title"] == "python3 'scripts/months.py'" and not {"mac", "dana"} & set(mac["topics"]), mac
    assert not [t for t in mac["topics"] if "jul" in t], mac["topics"]
    assert ais.EXTRACTOR.extract("Note: the cost is 5$ per seat", "prompt")["title"] == "Note: the cost is 5$ per seat"
    # A paste that starts mid-word: the fragment is no title; a dated log's name is no topic.
    cut = ais.EXTRACTOR.extract("ble.\nWelcome to developing with Convex, log in.\nsee chess-debug-2026-01-26t15-12-40.txt",
                                "prompt")
    assert cut["title"] == "Welcome to developing with Convex, log in." and "convex" in cut["topics"]
    assert not [t for t in cut["topics"] if "2026" in t], cut["topics"]
    assert ais.EXTRACTOR.extract("mail dana@example.com % of the refunds", "prompt")["title"].startswith("mail dana@")
    # An acknowledgement before the request is not what the work is.
    assert ais.EXTRACTOR.extract("Great. Now add the CSV export to the report page", "prompt")["title"] == \
        "Now add the CSV export to the report page"
    assert ais.EXTRACTOR.extract("Perfect! The export works.\nNext: the PDF", "assistant")["title"] == "The export works."
    assert ais.EXTRACTOR.extract("Awesome! Now the narration audio does not play", "prompt")["title"] == \
        "Now the narration audio does not play"
    assert ais.EXTRACTOR.extract("Great.", "prompt")["title"] == "Great."
    # A file dragged into the prompt is named, not the folders above it; a project path stays.
    assert ais.EXTRACTOR.extract("/build_prompt /home/greg/app/docs/prompt_work/fc1.yaml", "prompt")["title"] == \
        "/build_prompt fc1.yaml"
    assert ais.EXTRACTOR.extract("why is C:\\app\\logs\\run.json empty? see src/app/api/route.ts",
                                 "prompt")["title"] == "why is run.json empty?"
    assert ais.EXTRACTOR.extract("see src/app/api/route.ts", "prompt")["title"] == "see src/app/api/route.ts"
    # A link by what it names: an issue or a pull request as repo#N, else its host and path.
    assert ais.EXTRACTOR.extract("can you read https://github.com/a16z-infra/ai-town/issues/227", "prompt")[
        "title"] == "can you read ai-town#227"
    assert ais.EXTRACTOR.extract("as per https://github.com/kesslerio/attio-mcp/issues/377#issuecomment-31576 take "
                                 "Phase 2 to a PR", "prompt")["title"] == "as per attio-mcp#377 take Phase 2 to a PR"
    assert ais.EXTRACTOR.extract("review https://gitlab.com/acme/web/app/-/merge_requests/12/diffs, then merge",
                                 "prompt")["title"] == "review app#12, then merge"
    assert ais.EXTRACTOR.extract("Still slow, https://www.shop.example/course?ref=nav takes 3 s to load", "prompt")[
        "title"] == "Still slow, shop.example/course takes 3 s to load"
    # A line typed on several ends with a backslash; a contraction is no topic.
    assert ais.EXTRACTOR.extract("Can't deploy on Vercel?\\\n\\\n21:07 Running build", "prompt")["title"] == \
        "Can't deploy on Vercel?"
    assert ais.EXTRACTOR.extract("pls list all the things you've tried for the websocket flake", "prompt")[
        "topics"] == ["tried", "websocket", "flake"]


def test_thread_topics_lean_on_what_people_said(project):
    mem = ais.open_memory(str(project), embedder="fake")
    tid = turn(mem, "s", "Speed up the invoice export", tools=[
        "$ cat big.log\nwarning warning warning warning warning warning timeout timeout timeout"])[0]
    topics = mem.threads[tid]["topics"]
    assert topics.index("invoice") < topics.index("warning")


def described_thread():
    """A bare thread and add(text, source, origin): a message described into it as a capture is."""
    thread = {"title": "", "messages": [], "summary": ""}

    def add(text, source="prompt", origin="prompt"):
        msg = {"id": f"m{len(thread['messages'])}", "ts": ais.iso(START), "source": source, "text": text}
        ext = ais.EXTRACTOR.extract(text, origin)
        thread["title"] = thread["title"] or ext["title"]  # as _new_thread sets it
        thread["messages"].append(msg)
        ais.describe(thread, msg, ext)
    return thread, add


def test_a_thread_a_short_prompt_started_is_retitled_by_the_first_real_one():
    thread, add = described_thread()
    add("$ npm run dev (Start the dev servers)\nvite ready", "tool:Bash", "command")
    assert thread["title"] == "Start the dev servers"
    add("/start-apps")
    assert thread["title"] == "/start-apps"
    add("still broken")
    assert thread["title"] == "/start-apps"  # one short prompt does not replace another
    add("Make the vite dev server proxy the SDK requests to the backend. Then restart it.")
    assert thread["title"] == "Make the vite dev server proxy the SDK requests to the backend."
    add("Also log every proxied request with its status and duration")
    assert thread["title"].startswith("Make the vite dev server")
    add("Done: requests to /sdk go to the backend now. Next: add the log line.", "assistant")
    assert thread["summary"] == "/start-apps … Done: requests to /sdk go to the backend now. Next: add the log line."


def test_an_approved_plan_names_a_thread_a_short_prompt_started():
    """"Let's ULTRATHINK more!" says nothing of the work; the plan the user then approved does.
    A prompt that names the work still wins over it; another short prompt or plan does not."""
    thread, add = described_thread()
    add("Let's ULTRATHINK more!")
    assert thread["title"] == "Let's ULTRATHINK more!" and thread["title_from"] == "short"
    add("I made the plan more robust. Here it is.", "assistant")
    assert thread["title"] == "Let's ULTRATHINK more!"  # a conclusion names nothing
    add(ais.approved_plan("## Foolproof MCAO API Fix Plan\n1. Call each endpoint with a known APN"), "assistant", "plan")
    assert thread["title"] == "Foolproof MCAO API Fix Plan" and thread["title_from"] == "plan"
    add("go")
    add(ais.approved_plan("# Plan: Retry the lookups\n1. Back off"), "assistant", "plan")
    assert thread["title"] == "Foolproof MCAO API Fix Plan"
    add("Add the MCAO columns to the Excel output of process_months_local.py")
    assert thread["title"] == "Add the MCAO columns to the Excel output of process_months_local.py"
    add(ais.approved_plan("# Plan: Something else entirely\n1. Step"), "assistant", "plan")
    assert thread["title_from"] == "prompt" and thread["title"].startswith("Add the MCAO columns")


def test_a_fragment_merges_only_into_a_clear_winner():
    a, b, c = ({"id": x, "status": "active"} for x in "abc")
    assert ais.merge_choice([(0.5, a), (0.1, b), (0.05, c)]) is a
    assert ais.merge_choice([(0.5, a), (0.45, b), (0.42, c)]) is None  # no clear winner
    assert ais.merge_choice([(ais.MERGE_FLOOR - 0.01, a)]) is None  # clear but too weak
    assert ais.merge_choice([(0.5, dict(a, status="archived")), (0.1, b)]) is None
    # b leans to a itself (its own clearest link is a): the lead is over the others.
    d = {"id": "d", "status": "active"}
    assert ais.merge_choice([(0.5, a), (0.45, b), (0.42, c), (0.1, d)]) is None
    assert ais.merge_choice([(0.5, a), (0.45, b), (0.42, c), (0.1, d)], kin={"b"}) is a
    assert ais.merge_choice([(0.5, a), (0.45, b), (0.42, c), (0.4, d)], kin={"b"}) is None


def test_the_language_of_a_note_is_read_from_its_function_words():
    assert ais.text_languages("migration locks the orders table for too long on staging") == {"en"}
    assert ais.text_languages("la mémoire de Redis monte à 90 % chaque soir") == {"fr"}
    assert ais.text_languages("el mapa de tiendas no carga en Safari") == {"es"}
    assert ais.text_languages("ya llegan a la bandeja de entrada") == {"fr", "es"}  # foreign to English all the same
    assert ais.text_languages("React login form: email + password fields") == set()  # no function word
    assert ais.text_languages("See ya, Nate!") == set()
    assert ais.text_languages("the cache, el mapa") == {"en", "es"}  # a tie: not foreign to English
    english = ais.LANGUAGE_MARKERS["en"]
    assert not any(english & marks for lang, marks in ais.LANGUAGE_MARKERS.items() if lang != "en")


def test_foreign_cosines_count_above_the_background_of_unrelated_threads():
    cache = {"topics": ["cache", "redis"]}
    invoice, tax = {"topics": ["facture", "tva"]}, {"topics": ["taxe"]}
    # The median of the threads sharing no topic (0.40, 0.44) is the background: 0.42.
    got = ais.rebased_cosines([(cache, 0.60), (invoice, 0.40), (tax, 0.44)], ["cache", "clés"])
    assert got == pytest.approx([(0.60 - 0.42) / 0.58, 0.0, (0.44 - 0.42) / 0.58])
    # One thread, sharing a topic: its cosine says nothing in this language, the topic does.
    assert ais.rebased_cosines([(cache, 0.5)], ["cache"]) == [0.0]
    assert ais.rebased_cosines([], ["cache"]) == []


def test_notes_in_a_language_the_embedder_was_not_made_for_are_judged_on_their_background(project):
    """A stand-in for all-MiniLM-L6-v2 on French: every pair of texts at a cosine of 0.5 or
    more. Without the rebasing, each note continues the first thread."""
    class Offset(ais.FakeEmbedder):
        id = ais.MINILM_ID

        def embed(self, texts):
            base = ais.unit([1.0] + [0.0] * (self.dim - 1))
            return [ais.unit([b + v for b, v in zip(base, vec)]) for vec in super().embed(texts)]
    mem = ais.open_memory(str(project), embedder=Offset())
    notes = ["les factures PDF sortent sans le numéro de TVA du client",
             "le cache Redis des sessions expire trop tôt pour les clients",
             "la numérotation des factures doit rester continue sans trou",
             "mettre une durée de vie sur les clés du cache Redis"]
    got = [mem.capture(t, at=START + i * GAP)["thread_id"] for i, t in enumerate(notes)]
    assert got[0] == got[2] != got[1] == got[3]


def merged_pair(project):
    """Two threads on unrelated subjects, the second merged into the first as a drain does."""
    mem = ais.open_memory(str(project), embedder="fake")
    first = [mem.capture(t, at=START + i)["thread_id"] for i, t in enumerate(
        ["Kubernetes ingress certificate renewal", "Kubernetes ingress annotations for certificate"])]
    other = mem.capture("Quarterly invoice totals spreadsheet formula", at=START + 10)["thread_id"]
    assert first[0] == first[1] != other
    src, dst = mem.threads[other], mem.threads[first[0]]
    bridge = ais.make_bridge(other, "t_elsewhere", "extends", 0.5, "test", 0, START)
    mem._add_bridge(bridge)
    with mem.store.lock():
        touched_t, touched_b = {other, dst["id"]}, {bridge["id"]}
        dropped = mem._merge(src, dst, 0.4, START + 20, touched_t, touched_b)
        mem.save(touched_t, touched_b - dropped, dropped, [other])
    return mem, other, dst["id"], bridge["id"]


def test_a_merge_moves_every_message_and_the_old_id_redirects(project):
    mem, old, new, bid = merged_pair(project)
    again = ais.open_memory(str(project), embedder="fake")
    again.ensure_loaded()
    assert old not in again.threads and again.thread_id_of(old) == new
    thread = again.threads[new]
    assert [m["text"] for m in thread["messages"]][-1] == "Quarterly invoice totals spreadsheet formula"
    assert len(thread["messages"]) == 3 and len(again.msgs) == 3
    assert thread["merged"][0]["id"] == old and thread["merged"][0]["messages"] == 1
    assert "invoice" in thread["topics"]
    assert again.bridges[bid]["source_id"] == new  # re-ended at the thread it went into
    # Retrieval finds the moved message in its new thread.
    hits = again.search("invoice spreadsheet", 3)
    assert hits and hits[0]["thread_id"] == new
    # The thread's history shows the merge, and its old id shows the thread it went into.
    assert old in again.thread_view(new)
    from conftest import cli_json
    assert cli_json("thread", old, project=project, env={"AI_SMARTNESS_EMBEDDER": "fake"})["id"] == new


def test_a_merge_cut_short_before_the_old_file_went_keeps_each_message_once(project):
    mem, old, new, _ = merged_pair(project)
    stale = {"schema": ais.SCHEMA, "id": old, "title": "Quarterly invoice", "status": "active",
             "messages": [dict(m) for m in mem.threads[new]["messages"] if "invoice" in m["text"]]}
    mem.store.save_thread(stale)  # the crash: the merged thread's own file still there
    again = ais.open_memory(str(project), embedder="fake")
    again.ensure_loaded()
    assert old not in again.threads and len(again.msgs) == 3
    assert len(again.threads[new]["messages"]) == 3
