"""Files are first-class: every capture records the project files it touched and what was done
to them, threads know their files, the injected memory and the briefing name the files in play,
the current work and its latest conclusion."""
import json
import subprocess
import sys
import time

import pytest

import ai_smartness as ais
from conftest import hook
from support import (ROOT, end_payload, post_payload, prompt_payload, queued_record, start_payload, stop_payload,
                     turn_records, user_run_records)


def test_a_path_is_made_relative_to_the_project_and_never_leaves_it():
    rel = ais.project_relpath
    assert rel("/p/src/app.py", "/p") == "src/app.py"
    assert rel("tests/t.py", "/p", "/p/sub") == "sub/tests/t.py"
    assert rel("../lib/x.py", "/p", "/p/sub") == "lib/x.py"
    assert rel("x.py", "/p", "relative/cwd") == "x.py"  # a cwd that is not absolute is ignored
    assert rel("C:\\p\\a.py", "/p") is None
    for outside in ("/etc/passwd", "../../etc/passwd", "/p/../q/a.py", "~/.ssh/id_rsa", "/p/.ai/db/x.json",
                    "/p", "", "a\x00b", "x" * 1000, None, 3):
        assert rel(outside, "/p", "/p") is None, outside


def git_worktrees(project, tmp_path):
    """A git repository in `project` with two worktrees: where Claude Code's --worktree puts
    one (.claude/worktrees/), and beside the project."""
    git = lambda *a: subprocess.run(["git", "-C", str(project), *a], check=True, capture_output=True)
    if subprocess.run(["git", "--version"], capture_output=True).returncode:
        pytest.skip("no git")
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "start")
    inside, beside = project / ".claude" / "worktrees" / "feat", tmp_path / "proj-fix"
    git("worktree", "add", "-q", str(inside))
    git("worktree", "add", "-q", str(beside))
    return inside, beside


def test_a_file_of_a_git_worktree_of_the_project_is_the_project_file(project, tmp_path, monkeypatch):
    inside, beside = git_worktrees(project, tmp_path)
    rel = ais.project_relpath
    assert rel(f"{inside}/src/a.ts", str(project)) == "src/a.ts"
    assert rel(f"{beside}/src/a.ts", str(project)) == "src/a.ts"
    assert rel("src/a.ts", str(project), str(beside / "src")) == "src/src/a.ts"
    assert rel(f"{tmp_path}/unrelated/src/a.ts", str(project)) is None
    assert rel(f"{beside}/.ai/db/x.json", str(project)) is None
    (project / ".git" / "worktrees" / "odd").mkdir()
    (project / ".git" / "worktrees" / "odd" / "gitdir").write_text("/.git\n")  # a checkout at / is none
    ais._CHECKOUTS.clear()
    assert rel("/etc/passwd", str(project)) is None and rel(f"{beside}/src/a.ts", str(project)) == "src/a.ts"
    cap = ais.tool_capture({"tool_name": "Edit", "tool_input": {"file_path": f"{beside}/src/a.ts", "old_string": "a",
                                                               "new_string": "b"}, "cwd": str(beside)}, str(project / ".ai"))
    assert cap["files"] == ["src/a.ts"]
    # A session in the worktree (its CLAUDE_PROJECT_DIR) writes to the memory of the project the
    # hooks are installed in; an unrelated folder keeps its own.
    monkeypatch.setattr(ais, "__file__", str(project / ".ai" / "ai_smartness.py"))
    for folder, home in ((beside, project), (inside, project), (tmp_path, tmp_path)):
        monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(folder))
        assert ais.find_project() == str(home)
    assert ais.find_project(str(beside)) == str(beside)  # --project is obeyed


def test_a_shell_command_names_the_files_it_runs_not_its_options_urls_or_folders():
    assert ais._command_paths("pytest tests/test_api.py -k login; cat src/app.ts | head > out.log") == [
        "tests/test_api.py", "src/app.ts", "out.log"]
    # A folder with a space, escaped or quoted, is one path; a quoted message is still words.
    assert ais._command_paths('cd my\\ app && cat "docs/user guide/intro.md" src/a\\ b/x.py') == [
        "my app/docs/user guide/intro.md", "my app/src/a b/x.py"]
    assert ais._command_paths('git commit -m "fix the login.py bug"') == ["login.py"]
    assert ais._command_paths("git push origin main --force; curl https://x.io/a.json; ls src/") == []
    # A program run by its path is a file, though its name has no extension; a folder listed is not.
    assert ais._command_paths('./scripts/fc1 cmd "s" | tail -5 && bin/console cache:clear; ls src/components') == [
        "./scripts/fc1", "bin/console"]
    # A pattern's `|` inside quotes splits no step: `google/genai` is a package grep looks for, not a program run.
    assert ais._command_paths('grep -l "aistudiocdn\\|google/genai" /home/me/web/package.json 2>/dev/null | head') == [
        "/home/me/web/package.json"]
    assert ais._command_paths("rg -n 'src/api|lib/db' . && cat src/app.ts") == ["src/app.ts"]
    assert ais._command_paths("rsync -av \\\n  build/out host:/srv && cat \\\n  src/a.ts") == ["src/a.ts"]  # continued lines
    assert ais._command_paths("env DB=data/app.db RUST_LOG=debug \\\n  ./target/debug/app serve") == [
        "data/app.db", "./target/debug/app"]  # the program after what is set for it
    # A pattern's escapes are the pattern's: the names it looks for are still named.
    assert ais._command_paths('grep -rn "parse" lib/ | grep -v "models\\.dart\\|word_tts\\.dart"') == [
        "models.dart", "word_tts.dart"]
    # A variable the command set is its value; one it did not set hides the folder (no file).
    assert ais._command_paths('WS="workspaces/cfg"; test -f "$WS/agent.json" && cat ${WS}/b.txt $OUT/c.txt') == [
        "workspaces/cfg/agent.json", "workspaces/cfg/b.txt"]
    assert ais._command_paths("cat $(pwd)/src/a.ts; N=$(grep -c TODO lib/b.py)") == ["./src/a.ts", "lib/b.py"]
    # A quoted command run elsewhere is words, not one path with spaces.
    assert ais._command_paths('ssh box "ls -la /srv/app && rm /tmp/build.tar.gz"') == ["/tmp/build.tar.gz"]


def test_a_pasted_blob_does_not_stall_the_files_and_topics_of_a_text():
    """One long run of path characters (a minified bundle, a base64 blob pasted in a prompt):
    the files named beside it and the topics are found, at once (the patterns tried on the
    whole run backtracked for minutes: the guard is a hang, not a speed goal)."""
    code = ("import ai_smartness as a; blob = 'a_' * 100000 + ' ' + 'a/' * 100000\n"
            "print(a.file_mentions(blob + ' fix ./src/app.ts, README.md.'))\n"
            "print(a.EXTRACTOR.topics(blob + ' the parser in /home/me/proj/src/tokenizer.py', said=True))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    mentions, topics = out.stdout.splitlines()
    assert mentions == "['./src/app.ts', 'README.md']"
    assert "tokenizer" in topics and "home" not in topics and "proj" not in topics


def test_a_path_after_cd_is_under_the_folder_the_command_moved_to():
    paths = ais._command_paths
    assert paths("cd frontend && npx tsc --noEmit src/a.tsx src/b.tsx") == ["frontend/src/a.tsx", "frontend/src/b.tsx"]
    assert paths("(cd web && npm test src/x.test.ts); cat README.md") == ["web/src/x.test.ts", "README.md"]
    assert paths('cd "my app" && cat a.py; cd .. && cat b/c.py') == ["my app/a.py", "b/c.py"]
    assert paths("cd /srv/app && cat y.py") == ["/srv/app/y.py"]
    # A folder that cannot be told: only absolute paths and bare names (kept when known).
    assert paths("cd $DIR && cat a/b.py c.py /e/f.py") == ["c.py", "/e/f.py"]
    assert paths("cd ~ && cat a/b.py; cd - && cat d/e.py") == []
    assert paths("echo cd x && cat a/b.py") == ["a/b.py"]  # cd only as a step's command


def test_a_cd_the_client_kept_is_not_applied_twice(project):
    """Claude Code keeps a command's `cd` for the next ones and reports the folder it moved to
    as the hook's cwd (seen with the real client: test_e2e_claude.py): a path is placed once."""
    for cwd in (project, project / "web"):  # a client that starts each command afresh, and Claude Code
        cap = ais.tool_capture({"tool_name": "Bash", "tool_input": {"command": "cat README.md && cd web && npx tsc src/a.tsx"},
                                "tool_response": {"stdout": ""}, "cwd": str(cwd)}, str(project / ".ai"))
        assert cap["files"] == ["README.md", "web/src/a.tsx"], cwd
    paths = ais._command_paths
    assert paths("cd web/app && cat x.ts", "/p/web/app") == ["x.ts"]
    assert paths("cat a/b.py && cd /srv/app && cat y.py", "/srv/app") == ["/srv/app/y.py"]  # a/b.py: from where?


@pytest.mark.parametrize("tool, tool_input, response, files, op", [
    ("Read", {"file_path": "{p}/src/a.py"}, {"file": {"content": "import os\n"}}, ["src/a.py"], "read"),
    ("Edit", {"file_path": "{p}/src/a.py", "old_string": "x = 1", "new_string": "x = 2"}, {}, ["src/a.py"], "edit"),
    ("Write", {"file_path": "{p}/docs/b.md", "content": "# notes"}, {}, ["docs/b.md"], "write"),
    ("Bash", {"command": "python -m pytest tests/test_a.py"}, {"stdout": "1 passed"}, ["tests/test_a.py"], "run"),
    ("Bash", {"command": "cd web && npx tsc --noEmit src/a.tsx"}, {"stdout": ""}, ["web/src/a.tsx"], "run"),
    ("Bash", {"command": "cd tools && ./deploy staging"}, {"stdout": "ok"}, ["tools/deploy"], "run"),
    ("Read", {"file_path": "/elsewhere/c.py"}, {"file": {"content": "pass\n"}}, None, None),
    ("Bash", {"command": "git status"}, {"stdout": "clean"}, None, None),
    ("Grep", {"pattern": "def load", "path": "{p}/src/a.py", "output_mode": "content", "-n": True},
     {"mode": "content", "content": "12:def load(path):", "numLines": 1}, ["src/a.py"], "search"),
    ("Grep", {"pattern": "LoginForm", "output_mode": "files_with_matches"},
     {"mode": "files_with_matches", "filenames": ["{p}/src/Login.tsx", "{p}/src/App.tsx"], "numFiles": 2},
     ["src/Login.tsx", "src/App.tsx"], "search"),
    ("Grep", {"pattern": "api_key", "path": "{p}/src", "output_mode": "content"},
     {"mode": "content", "content": "src/config.py:API_KEY = env('API_KEY')\nsrc/client.py:  key = API_KEY"},
     ["src/config.py", "src/client.py"], "search"),
])
def test_a_tool_capture_records_the_files_it_touched(project, tool, tool_input, response, files, op):
    data_dir = str(project / ".ai")
    tool_input = {k: v.replace("{p}", str(project)) if isinstance(v, str) else v for k, v in tool_input.items()}
    response = json.loads(json.dumps(response).replace("{p}", str(project)))
    cap = ais.tool_capture({"tool_name": tool, "tool_input": tool_input, "tool_response": response,
                            "cwd": str(project)}, data_dir)
    assert cap.get("files") == files and cap.get("op") == op
    entry = ais.prepare_capture(cap["text"], cap["source"], cap["file"], origin=cap["origin"],
                                files=cap.get("files"), op=cap.get("op"))
    assert entry.get("files") == files and entry.get("op") == op


def test_a_command_is_kept_with_project_paths_and_without_a_cd_into_the_project(project):
    """`cd /abs/project && pytest` is `pytest` to the memory: the agent knows where it works, and
    the folder would take a quote's room; its files are read from the command as it ran."""
    root = project / "my app"
    root.mkdir()
    escaped = str(root).replace(" ", "\\ ")
    cap = ais.tool_capture({"tool_name": "Bash", "tool_input": {
        "command": f"cd {escaped} && python3 {escaped}/scripts/run.py --check src/a.py",
        "description": "Check"}, "tool_response": {"stdout": "ok"}, "cwd": str(root)}, str(root / ".ai"))
    assert cap["text"].startswith("$ python3 scripts/run.py --check src/a.py (Check)"), cap["text"]
    assert cap["command"] == "python3 scripts/run.py --check src/a.py"
    assert cap["files"] == ["scripts/run.py", "src/a.py"]
    other = ais.tool_capture({"tool_name": "Bash", "tool_input": {"command": f'cd "{root}/web" && npm test'},
                              "tool_response": {"stdout": ""}, "cwd": str(root)}, str(root / ".ai"))
    assert other["text"].startswith('$ cd "web" && npm test')
    later = ais.tool_capture({"tool_name": "Bash", "tool_input": {"command": f"pkill -f node; cd {escaped} && node app.js"},
                              "tool_response": {"stdout": ""}, "cwd": str(root)}, str(root / ".ai"))
    assert later["text"] == "$ pkill -f node; cd . && node app.js" and later["files"] == ["app.js"]
    beside = ais.project_command(f"cd {root}-old && ls", str(root))
    assert beside == f"cd {root}-old && ls"
    # Claude Code's note when a command left the folder is no output, and the folder's name no topic.
    away = ais.tool_capture({"tool_name": "Bash", "tool_input": {"command": "cd ../site && git log --oneline -1"},
                             "tool_response": {"stdout": "ac9b00a feat: rename the site",
                                               "stderr": f"Shell cwd was reset to {root}"}, "cwd": str(root)},
                            str(root / ".ai"))
    assert away["text"] == "$ cd ../site && git log --oneline -1\nac9b00a feat: rename the site", away["text"]


def test_output_reports_prompts_and_answers_name_the_projects_files_by_their_project_path(project):
    """The project's folder is no part of a path in what a command printed, a subagent's report, a
    prompt or an answer, as in a command: a file is named the same everywhere, and the folder would
    take a quote's room. A file's content stays as written (a path there is code), and a path
    that only ends with the folder's name is another folder's."""
    p, data_dir = str(project), str(project / ".ai")
    beside = f"/srv{p}/x.py"
    ran = ais.capture_entry("tool", post_payload("Bash", {"command": f"cd {p} && npm test"}, {
        "stdout": f"FAIL {p}/src/a.test.ts\n  at ({p}/app/(shop)/page.tsx:3:9)\nsee {beside}"}, project=p), data_dir)
    assert ran["text"] == f"$ npm test\nFAIL src/a.test.ts\n  at (app/(shop)/page.tsx:3:9)\nsee {beside}", ran["text"]
    task = ais.capture_entry("tool", post_payload("Task", {"description": "Find the form", "prompt": f"Read {p}/src"}, {
        "content": [{"type": "text", "text": f"It is in {p}/src/LoginForm.tsx."}]}, project=p), data_dir)
    assert task["text"] == "Task Find the form: Read src\nIt is in src/LoginForm.tsx.", task["text"]
    run = {"task_type": "local_workflow", "status": "completed", "description": "audit",
           "output": json.dumps({"result": f"{p}/src/lexer.py drops combining marks"})}
    for tool, inp, resp in (("TaskOutput", {"task_id": "wkkpqyrhd"}, {"task": run}),
                            ("mcp__serena__find_symbol", {"name": "lex"}, f"lex is defined in {p}/src/lexer.py"),
                            ("WebFetch", {"url": "https://example.com/lexer", "prompt": "the API"},
                             f"See {p}/src/lexer.py")):
        report = ais.capture_entry("tool", post_payload(tool, inp, resp, project=p), data_dir)["text"]
        assert p not in report and "src/lexer.py" in report, report
    wrote = ais.capture_entry("tool", post_payload("Write", {"file_path": f"{p}/conf.py", "content": f"ROOT = '{p}/x'"},
                                                   {"type": "create", "filePath": f"{p}/conf.py"}, project=p), data_dir)
    assert f"ROOT = '{p}/x'" in wrote["text"]
    for name, payload in (("inject", prompt_payload(f"why does {p}/src/LoginForm.tsx accept an empty password?",
                                                    project=p)),
                          ("stop", stop_payload(f"Fixed {p}/src/LoginForm.tsx: it checks the length now.", project=p))):
        assert hook(name, payload, project).returncode == 0
    mem = ais.open_memory(p)
    mem.flush()
    assert sorted(m["text"] for m in mem.msgs.values()) == [
        "Fixed src/LoginForm.tsx: it checks the length now.", "why does src/LoginForm.tsx accept an empty password?"]
    hb = mem.store.heartbeat()  # what the briefing names before the threads are stored
    assert (hb["last_task"], hb["last_conclusion"]) == ("why does src/LoginForm.tsx accept an empty password?",
                                                        "Fixed src/LoginForm.tsx: it checks the length now.")
    assert ais.project_command(f"ls {beside} && cat {p}/a.py", p) == f"ls {beside} && cat a.py"


def test_a_search_is_kept_with_what_it_found_and_names_its_files_only_when_they_are_few(project):
    """A Grep says where the agent looked and what it found: the lines, by project path. Many
    matching files say little about any one of them; nothing found is not kept."""
    p = str(project)
    search = lambda inp, resp: ais.tool_capture({"tool_name": "Grep", "tool_input": inp, "tool_response": resp,
                                                 "cwd": p}, p + "/.ai")
    cap = search({"pattern": "players", "path": p + "/server.js", "output_mode": "content", "-n": True},
                 {"mode": "content", "content": "53:    db.run(`CREATE TABLE IF NOT EXISTS players (", "numLines": 1})
    assert cap["text"] == "Searched server.js for `players`:\n53:    db.run(`CREATE TABLE IF NOT EXISTS players ("
    assert cap["origin"] == "file_read" and cap["source"] == "tool:Grep"
    many = [f"{p}/src/m{i}.ts" for i in range(ais.SEARCH_FILES + 1)]
    cap = search({"pattern": "useAuth", "glob": "*.ts"}, {"mode": "files_with_matches", "filenames": many})
    assert "files" not in cap and cap["text"].startswith("Searched the project for `useAuth` glob=*.ts:\nsrc/m0.ts")
    assert p not in cap["text"]
    assert search({"pattern": "x", "path": p}, {"mode": "content", "content": "", "numFiles": 0}) is None
    assert search({"pattern": "x", "path": p}, "No matches found") is None
    secret = "ghp_" + "a1B2" * 9
    cap = search({"pattern": secret, "path": p + "/src"}, {"mode": "content", "content": f"src/a.py:t = '{secret}'"})
    assert secret not in cap["text"] and cap["files"] == ["src/a.py"]
    assert search({"pattern": "x"}, {"mode": "content", "content": "12:00 and 3.5: are not paths"}).get("files") is None


def test_a_capture_keeps_files_only_with_a_known_operation_and_redacts_them():
    entry = ais.prepare_capture("Read a file", "tool:Read", files=["a.py"], op="delete")
    assert "files" not in entry and "op" not in entry
    secret = "ghp_" + "a1B2" * 9
    entry = ais.prepare_capture("Read a file", "tool:Read", files=[f"keys/{secret}.txt"], op="read")
    assert secret not in json.dumps(entry)


def work(project, session="s1"):
    """A turn on the login form, then one on a migration, through the real hooks."""
    p = str(project)
    hook("inject", prompt_payload("fix the login form validation", session, project), project)
    for tool, inp, resp in (
            ("Read", {"file_path": p + "/src/LoginForm.tsx"},
             {"file": {"content": "export function LoginForm() {\n  return <form onSubmit={submit} />\n}\n"}}),
            ("Edit", {"file_path": p + "/src/LoginForm.tsx", "old_string": "onSubmit={submit}",
                      "new_string": "onSubmit={validateThenSubmit}"}, {}),
            ("Bash", {"command": "npm test -- src/LoginForm.test.tsx"}, {"stdout": "Tests: 3 passed"})):
        assert hook("capture", post_payload(tool, inp, resp, session, project), project).returncode == 0
    hook("stop", stop_payload("Done: the login form validates the email before submitting. "
                              "Next: reject empty passwords.", session=session, project=project), project)
    hook("inject", prompt_payload("write the users table migration", session, project), project)
    hook("capture", post_payload("Write", {"file_path": p + "/db/migrations/001_users.sql",
                                           "content": "CREATE TABLE users (id serial primary key);"}, {},
                                 session, project), project)
    mem = ais.open_memory(str(project))
    mem.flush()
    return mem


def test_messages_and_threads_record_their_files(project):
    mem = work(project)
    by_text = {m["text"].split("\n")[0][:20]: m for m in mem.msgs.values()}
    edit = next(m for m in mem.msgs.values() if m["text"].startswith("Edited"))
    assert edit["files"] == ["src/LoginForm.tsx"] and edit["op"] == "edit"
    run = next(m for m in mem.msgs.values() if m["text"].startswith("$ npm test"))
    assert run["files"] == ["src/LoginForm.test.tsx"] and run["op"] == "run"
    thread = mem.threads[mem.thread_rows.keys[mem.row_thread[mem.rows.of[edit["id"]]]]]
    assert thread["files"]["src/LoginForm.tsx"]["op"] == "edit" and thread["files"]["src/LoginForm.tsx"]["n"] >= 1
    assert by_text  # every message kept its text
    # Saved with the thread, and read back.
    again = ais.open_memory(str(project))
    again.ensure_loaded()
    assert again.msgs[edit["id"]]["files"] == ["src/LoginForm.tsx"]


def test_a_search_is_recalled_by_what_it_found_but_is_no_work_on_the_files_it_names(project):
    """A Grep is memory (recalled when a prompt asks about what it found) and names its files in
    its thread, but a file only searched is not in play, and a search's lines never stand for
    the file: its last read or edit does."""
    mem = work(project)
    p = str(project)
    for path in ("src/LoginForm.tsx", "src/legacy/auth_v1.ts"):
        assert hook("capture", post_payload("Grep", {"pattern": "passwordStrength", "path": f"{p}/{path}",
                                                     "output_mode": "content", "-n": True},
                                            {"mode": "content", "content": "41:  const passwordStrength = score(pw)"},
                                            "s1", project), project).returncode == 0
    mem = ais.open_memory(str(project))
    mem.flush()
    search = {m["files"][0]: m for m in mem.msgs.values() if m["text"].startswith("Searched src/")}
    assert sorted(search) == ["src/LoginForm.tsx", "src/legacy/auth_v1.ts"]
    legacy = search["src/legacy/auth_v1.ts"]
    assert legacy["op"] == "search" and legacy["files"] == ["src/legacy/auth_v1.ts"]
    thread = mem.threads[mem.thread_rows.keys[mem.row_thread[mem.rows.of[legacy["id"]]]]]
    assert thread["files"]["src/legacy/auth_v1.ts"]["op"] == "search"
    in_play = [f for f, _ in mem.file_table().rank("where is passwordStrength computed", 5)]
    assert "src/legacy/auth_v1.ts" not in in_play
    ctx = mem.context("where is passwordStrength computed?")["text"]
    assert "const passwordStrength = score(pw)" in ctx
    quotes = mem._file_quotes([(f, st) for f, st in mem.file_table().files.items() if f == "src/LoginForm.tsx"], set())
    assert quotes and not any(q["text"].startswith("Searched") for q in quotes)


@pytest.mark.parametrize("lang,line", [("en", "Files in play: src/LoginForm.tsx (edit "),
                                       ("fr", "Fichiers en jeu : src/LoginForm.tsx (modifié "),
                                       ("es", "Archivos en juego: src/LoginForm.tsx (editado ")])
def test_the_files_line_says_what_was_done_to_each_in_the_users_language(project, lang, line):
    work(project)
    (project / ".ai" / "config.json").write_text(json.dumps({"language": lang}))
    text = ais.open_memory(str(project)).context("the login form again")["text"]
    assert text.splitlines()[1].startswith(line), text


def test_a_prompt_that_names_a_known_file_records_it(project):
    mem = work(project)
    mem.capture("why does LoginForm.tsx still accept an empty password?", session_id="s2")
    prompt = next(m for m in mem.msgs.values() if m["text"].startswith("why does"))
    assert prompt["files"] == ["src/LoginForm.tsx"] and "op" not in prompt
    mem.capture("and what about Unknown.tsx?", session_id="s2")
    assert "files" not in next(m for m in mem.msgs.values() if m["text"].startswith("and what"))
    mem.capture("/review @src/LoginForm.tsx", session_id="s2")  # Claude Code's @-mention of a file
    assert next(m for m in mem.msgs.values() if m["text"].startswith("/review"))["files"] == ["src/LoginForm.tsx"]


def test_an_absolute_path_in_a_prompt_names_the_project_file(project):
    """A file dragged into the terminal comes as an absolute path: inside the project it is that
    project file, though other known files share its name; from another checkout, the known file
    its path ends with (a folder and a name, never a bare name)."""
    mem = ais.open_memory(str(project))
    for path in ("app/CMakeLists.txt", "gateway/CMakeLists.txt", "README.md", "docs/README.md"):
        mem.store.inbox_append(ais.prepare_capture(f"Edited {path}:\n- a\n+ b", "tool:Edit", session_id="s1",
                                                   origin="file_write", files=[path], op="edit"))
    mem.flush()
    table = mem.file_table()
    assert table.mentioned(f"bump the version in {project}/gateway/CMakeLists.txt") == ["gateway/CMakeLists.txt"]
    assert table.mentioned(f"see {project}/README.md") == ["README.md"]
    assert table.mentioned("as in /home/greg/old-clone/gateway/CMakeLists.txt") == ["gateway/CMakeLists.txt"]
    assert table.mentioned("as in /home/greg/old-clone/README.md") == []  # which README.md: not told
    ranked = [p for p, _ in table.rank(f"review {project}/app/CMakeLists.txt, the build number must increase", 1)]
    assert ranked == ["app/CMakeLists.txt"]


def test_a_file_is_named_as_prompts_name_it_in_a_dot_folder_a_route_with_an_at_or_without_a_suffix(project):
    """`.claude/commands/x.md` is that file, not `claude/commands/x.md` (a dot-folder keeps its
    dot; only a leading `./` goes); a route's folder in brackets is part of the path; Claude Code's
    `@src/app.ts` is src/app.ts; a known file with no suffix is named by its path, a known dotfile
    by its name; "the gitignore" says its name."""
    mem = ais.open_memory(str(project))
    for path in (".claude/commands/commit.md", ".github/workflows/ci.yml", ".gitignore", "config/.npmrc",
                 "src/app.ts", "README.md", "scripts/deploy", "app/users/[id]/page.tsx", "app/page.tsx"):
        mem.store.inbox_append(ais.prepare_capture(f"Edited {path}:\n- a\n+ b", "tool:Edit", session_id="s1",
                                                   origin="file_write", files=[path], op="edit"))
    mem.flush()
    table = mem.file_table()
    assert table.mentioned("improve .claude/commands/commit.md and ./.github/workflows/ci.yml") == [
        ".claude/commands/commit.md", ".github/workflows/ci.yml"]
    assert table.mentioned("add dist to .gitignore, and ../config/.npmrc.") == [".gitignore", "config/.npmrc"]
    assert table.mentioned("process.env and .then() in src/app.ts") == ["src/app.ts"]
    assert table.mentioned("/implement @src/app.ts with @.claude/commands/commit.md") == [
        "src/app.ts", ".claude/commands/commit.md"]
    assert table.mentioned("why does scripts/deploy fail? see scripts/other too") == ["scripts/deploy"]
    assert table.mentioned("fix app/users/[id]/page.tsx as [the readme](README.md) says") == [
        "app/users/[id]/page.tsx", "README.md"]
    assert [p for p, _ in table.rank("update gitignore so the excel files stay out", 1)] == [".gitignore"]
    # What a document names keeps its dots too; there a bare `.go` or `.btn` is a suffix or a class.
    doc = "Copy .env.example to .env.local, add @.claude/commands/x.md; style .btn; build the *.go files."
    assert ais.file_citations(doc, str(project), "README.md") == [".env.example", ".env.local", ".claude/commands/x.md"]


def test_files_in_play_rank_the_named_file_then_the_work_the_prompt_is_about(project):
    mem = work(project)
    ranked = [p for p, _ in mem.file_table().rank("the users migration needs an email column", 3)]
    assert ranked[0] == "db/migrations/001_users.sql"
    ranked = [p for p, _ in mem.file_table().rank("the login form still accepts empty passwords", 3)]
    # The words of the turns that touched them, though the migration was touched last.
    assert set(ranked[:2]) == {"src/LoginForm.tsx", "src/LoginForm.test.tsx"}, ranked
    ranked = [p for p, _ in mem.file_table().rank("look at 001_users.sql again", 3)]
    assert ranked[0] == "db/migrations/001_users.sql"


def test_the_injected_memory_names_the_files_the_current_work_and_the_latest_edits(project):
    mem = work(project)
    ctx = mem.context("the login form still accepts empty passwords", session="s2")
    text = ctx["text"]
    files_line = next(line for line in text.splitlines() if line.startswith("Files in play:"))
    assert files_line.index("src/LoginForm.tsx") < files_line.index("db/migrations/001_users.sql")
    assert "(edit " in files_line
    assert "onSubmit={validateThenSubmit}" in text  # the edit itself, verbatim
    assert len(text) <= 2000


HEAD = ("import { useState } from 'react'; import { api } from '../lib/api'; export function PlayerList({ team }) "
        "{ const [players, setPlayers] = useState([]); const [filter, setFilter] = useState('all');")


def test_a_files_latest_messages_come_under_the_files_and_a_repeated_read_is_quoted_once(project):
    mem = ais.open_memory(str(project))
    mem.store.inbox_append(ais.prepare_capture("list the players of a team", "prompt", session_id="s1"))
    for k in range(4):
        mem.store.inbox_append(ais.prepare_capture(f"Read src/PlayerList.tsx:\n{HEAD[:150]} // read {k}",
                                                   "tool:Read", session_id="s1", files=["src/PlayerList.tsx"], op="read"))
    mem.store.inbox_append(ais.prepare_capture("Edited src/PlayerList.tsx:\n- a\n+ b", "tool:Edit", session_id="s1",
                                               files=["src/PlayerList.tsx"], op="edit"))
    mem.flush()
    text = mem.context("the team's player list is empty", session="s2")["text"]
    lines = text.splitlines()
    first = lines.index("  - [" + text.split("  - [", 1)[1].split("\n", 1)[0])
    # Under the files and the current work, before any thread's header: the newest read stands
    # for the four reads of the same head, then the edit, which only it stands for.
    assert "// read 3" in lines[first] and lines[first + 1].endswith("Edited src/PlayerList.tsx: - a + b")
    assert first + 1 < next(k for k, line in enumerate(lines) if line.startswith("# "))
    files_part = "\n".join(lines[:next(k for k, line in enumerate(lines) if line.startswith("# "))])
    assert files_part.count("import { useState }") == 1  # three reads of the same head: one is enough
    assert text.count("import { useState }") == 1 and "// read 3" in text  # nor retrieval's fourth

def test_the_quotes_chosen_stand_for_the_most_messages_then_the_newest():
    head = HEAD.split(";")
    texts = ["Read a.tsx:\n" + HEAD + " // first", "Edited a.tsx:\n- x\n+ y", "Read a.tsx:\n" + HEAD + " // second",
             "Read a.tsx:\n" + HEAD + " // third", "the player list filter ignores the team"]
    quotes = [ais.shingles(ais.shorten(t, 120)) for t in texts]
    grams = [ais.shingles(t) for t in texts]
    # The head stands for the three reads; a quote of nothing else stands for something new.
    assert ais.standing_quotes(ais.quote_covers(quotes, grams), 5) == [0, 1, 4]
    assert ais.standing_quotes(ais.quote_covers(quotes, grams), 1) == [0]
    assert ais.standing_quotes(ais.quote_covers([ais.shingles(head[0])], grams[:1]), 1) == []  # too short to stand for a long read


def test_a_files_head_as_read_is_quoted_though_newer_edits_came_after_it(project):
    mem = ais.open_memory(str(project))
    for k in range(3):
        mem.store.inbox_append(ais.prepare_capture(f"Read src/PlayerList.tsx:\n{HEAD} // read {k}", "tool:Read",
                                                   session_id="s1", files=["src/PlayerList.tsx"], op="read"))
    for k in range(3):
        mem.store.inbox_append(ais.prepare_capture(f"Edited src/PlayerList.tsx:\n- step {k}\n+ stage {k}", "tool:Edit",
                                                   session_id="s1", files=["src/PlayerList.tsx"], op="edit"))
    mem.flush()
    lines = mem.context("the team's player list is empty", session="s2")["text"].splitlines()
    quotes = lines[lines.index(next(x for x in lines if x.startswith("  - ["))):][:3]
    # The newest three are edits; the head of the file stands for its three reads.
    assert "import { useState }" in quotes[0] and quotes[1].endswith("- step 2 + stage 2"), quotes
    assert quotes[2].endswith("- step 1 + stage 1"), quotes


def test_a_files_quotes_start_with_its_work_the_prompt_is_about(project):
    """The quotes stand for most of a file's work, newest first: a prompt about an older part of
    it ("the board is flipped") found that part below them, with no room left to show it."""
    mem = ais.open_memory(str(project))
    path = "src/panel/panel.js"
    mem.store.inbox_append(ais.prepare_capture(
        f"Read {path}:\n// Board flip state (display only)\nboardFlipped = !!settings.boardFlipped;\n"
        "sideSwitch.checked = boardFlipped; // the ranks are mirrored when the board is flipped",
        "tool:Read", session_id="s1", files=[path], op="read"))
    for k, change in enumerate(("the panel script version 3.8.1", "popover position shown as a block",
                                "moves list rendered as cards with the piece icon", "elo slider step of 50",
                                "dark switch label removed")):
        mem.store.inbox_append(ais.prepare_capture(f"Edited {path}:\n+ {change}\n- before {k}", "tool:Edit",
                                                   session_id="s1", files=[path], op="edit"))
    mem.store.inbox_append(ais.prepare_capture(f"Read {path}:\n// Chess Study Tool panel script v3.8.1\n"
                                               "import { analyse } from './engine.js';", "tool:Read", session_id="s1",
                                               files=[path], op="read"))
    mem.flush()

    def quotes(prompt):  # the quotes under the files, before any thread's header
        return mem.context(prompt, session="s2")["text"].split("\n# ", 1)[0].split("\n  - ")[1:]
    asked = quotes("the arrows point to the wrong squares when the board is flipped")
    assert "Board flip state" in asked[0] and len(asked) == ais.EVIDENCE_PER_FILE, asked
    assert "panel script v3.8.1" in asked[1]  # then the file's last known state
    # A prompt that names no work, or none of this file's, gets what stands for the most of it.
    for prompt in ("continue", "the colours seem off"):
        assert "panel script v3.8.1" in quotes(prompt)[0] and not any("Board flip state" in x for x in quotes(prompt))


def test_a_files_last_read_is_a_quote_though_newer_messages_pushed_it_out_of_its_recent_ones(project):
    mem = ais.open_memory(str(project))
    mem.store.inbox_append(ais.prepare_capture(f"Read src/PlayerList.tsx:\n{HEAD}", "tool:Read", session_id="s1",
                                               files=["src/PlayerList.tsx"], op="read"))
    for k in range(ais.FILE_RECENT_MESSAGES):
        mem.store.inbox_append(ais.prepare_capture(f"$ npm test -- src/PlayerList.tsx (run {k})", "tool:Bash",
                                                   session_id="s1", files=["src/PlayerList.tsx"], op="run"))
    mem.flush()
    text = mem.context("the team's player list is empty", session="s2")["text"]
    assert "import { useState }" in text.split("\n# ", 1)[0]  # its last known state, under the files


def test_the_quotes_of_one_day_share_its_date(project):
    mem = ais.open_memory(str(project))
    day = 86400
    start = (time.time() // day - 3) * day + 3600  # an hour into a day three days ago
    for k, (path, at) in enumerate((("src/a.ts", start), ("src/b.ts", start + 60), ("src/c.ts", start + day))):
        mem.store.inbox_append(ais.prepare_capture(f"Edited {path}:\n- old {k}\n+ new {k}", "tool:Edit", at=ais.iso(at),
                                                   session_id="s1", files=[path], op="edit"))
    mem.flush()
    lines = mem.context("the edits of a, b and c", session="s2")["text"].splitlines()
    quotes = [x for x in lines if x.startswith("  - ") and "Edited src/" in x]
    dates = [ais.format_date(start + day), ais.format_date(start), None]
    # Newest first: the second day's edit, then the first day's two under one date.
    assert [x.split("] ", 1)[0][5:] if x.startswith("  - [") else None for x in quotes] == dates, quotes
    assert quotes[2].endswith("Edited src/a.ts: - old 0 + new 0"), quotes


def test_the_reminders_come_with_a_sessions_first_prompt_then_every_few_prompts(project):
    store = ais.Store(ais.data_dir_of(str(project))).ensure()

    def reminded(session, k):
        out = ais.hook_inject(store, {"session_id": session, "prompt": f"step {k} of the invoice parser rewrite"}, None)
        return "Reminders:" in out
    every = ais.REMINDERS_EVERY
    assert [reminded("s1", k) for k in range(every + 1)] == [True] + [False] * (every - 1) + [True]
    assert reminded("s2", 0) and not reminded("s2", 1)  # a new session: its first prompt has them


def test_the_current_work_is_the_sessions_latest_thread_when_it_touched_files(project):
    mem = work(project)
    mem.capture("an unrelated note about the team offsite in march", session_id="s9")
    last = mem.sessions["s1"][-1]  # the Write of the migration
    thread, *_ = mem.current_thread("s1")
    assert thread["id"] == mem.thread_rows.keys[mem.row_thread[mem.rows.of[last]]]
    assert "db/migrations/001_users.sql" in thread["files"]
    assert mem.current_thread("s9") is None  # a conversation: no work on files to resume


def test_after_continue_the_current_work_is_the_task_the_session_asked_last(project):
    """A late result of an earlier turn (a background job) joins that turn's thread: that is
    the latest work. "continue" goes on with the task the session asked last."""
    mem = ais.open_memory(str(project))
    for text, source, turn, files in (
            ("write the users table migration", "prompt", "t0", None),
            ("Wrote db/migrations/001_users.sql:\nCREATE TABLE users", "tool:Write", "t0", ["db/migrations/001_users.sql"]),
            ("refactor the tokenizer to split camelCase words", "prompt", "t1", None),
            ("Edited src/tok.py:\n- a\n+ b", "tool:Edit", "t1", ["src/tok.py"]),
            ("$ psql -f db/migrations/001_users.sql\nCREATE TABLE", "tool:Bash", "t0", ["db/migrations/001_users.sql"])):
        entry = ais.prepare_capture(text, source, session_id="s1", files=files, op="edit" if files else None)
        entry["turn"] = turn
        mem.store.inbox_append(entry)
        mem.flush()
    latest, *_ = mem.current_thread("s1")
    assert "db/migrations/001_users.sql" in latest["files"] and "src/tok.py" not in latest["files"]
    line = next(x for x in mem.context("continue", session="s1")["text"].splitlines() if x.startswith("Current work"))
    assert "refactor the tokenizer" in line, line


def test_the_current_work_shows_the_threads_latest_conclusion(project):
    mem = ais.open_memory(str(project))
    for text, source, files in (("refactor the tokenizer", "prompt", None),
                                ("Edited src/tok.py:\n- a\n+ b", "tool:Edit", ["src/tok.py"]),
                                ("Done: the tokenizer splits on case. Next: benchmark it.", "assistant", None)):
        entry = ais.prepare_capture(text, source, session_id="s1", files=files, op="edit" if files else None)
        mem.store.inbox_append(entry)
        mem.flush()
    thread, last, _ = mem.current_thread("s1")
    assert "src/tok.py" in thread["files"]
    assert last is None or last["text"].startswith("Done: the tokenizer")
    text = mem.context("what next for the tokenizer?", session="s1")["text"]
    assert "src/tok.py" in text.splitlines()[1]


def test_the_current_work_is_the_task_asked_last_in_its_thread(project):
    """A thread that took one task after another is on the last one, not on its first."""
    mem = ais.open_memory(str(project))
    for text, source, files in (("do work order 025: the roster API endpoints in server.js", "prompt", None),
                                ("Edited server.js:\n- a\n+ roster", "tool:Edit", ["server.js"]),
                                ("Work order 025 complete: the roster endpoints are in.", "assistant", None),
                                ("do work order 040: the payments API endpoints in server.js", "prompt", None),
                                ("Edited server.js:\n- b\n+ payments", "tool:Edit", ["server.js"])):
        mem.store.inbox_append(ais.prepare_capture(text, source, session_id="s1", files=files,
                                                   op="edit" if files else None))
        mem.flush()
    assert len(mem.threads) == 1
    current = next(x for x in mem.context("continue", session="s1")["text"].splitlines() if x.startswith("Current work"))
    assert current.startswith('Current work: "do work order 040: the payments API endpoints in server.js"'), current


def test_the_current_work_is_named_without_a_pasted_frame_or_an_attachments_mark(project):
    """The task's title was taken from the prompt as typed: `Current work: "│ │ Option 5: Check
    Deployment Logs because U cant see in [Image #1]"`."""
    mem = ais.open_memory(str(project))
    for text, source, files in (("│ │ Option 5: check the deploy logs of server.js [Image #1]", "prompt", None),
                                ("Edited server.js:\n- a\n+ log", "tool:Edit", ["server.js"])):
        mem.store.inbox_append(ais.prepare_capture(text, source, session_id="s1", files=files,
                                                   op="edit" if files else None))
    mem.flush()
    current = next(x for x in mem.context("go on", session="s1")["text"].splitlines() if x.startswith("Current work"))
    assert current.startswith('Current work: "Option 5: check the deploy logs of server.js" ('), current


def test_the_current_work_line_says_what_the_last_answer_concluded(project):
    """Not its cheers, its plan of a summary or the lead-in to its list."""
    mem = ais.open_memory(str(project))
    answer = ("Perfect! Now let me provide a comprehensive completion summary:\n\n## ✅ Agent Commit Complete\n"
              "Both agents were merged into main.\n\n### Files Updated:\n- `src/merge.ts`\n\nNext: delete the worktrees.")
    for text, source, files in (("merge the agents' work back to main", "prompt", None),
                                ("Edited src/merge.ts:\n- a\n+ b", "tool:Edit", ["src/merge.ts"]),
                                (answer, "assistant", None)):
        mem.store.inbox_append(ais.prepare_capture(text, source, session_id="s1", files=files,
                                                   op="edit" if files else None))
    mem.flush()
    current = next(x for x in mem.context("go on", session="s1")["text"].splitlines() if x.startswith("Current work"))
    assert current.endswith("Last: Agent Commit Complete. Both agents were merged into main. Next: delete the worktrees.")
    # An answer that only says what it is about to do concludes nothing: no "Last:", as in the briefing.
    mem.store.inbox_append(ais.prepare_capture("Let me create a summary of all the changes.", "assistant",
                                               session_id="s1"))
    mem.flush()
    current = next(x for x in mem.context("go on", session="s1")["text"].splitlines() if x.startswith("Current work"))
    assert "Last:" not in current, current


def test_the_briefing_after_a_gap_says_where_the_work_stopped(project):
    work(project)
    out = hook("start", start_payload("startup", "s2", project), project)
    text = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Where the work stopped:" in text
    assert "src/LoginForm.tsx" in text and "db/migrations/001_users.sql" in text
    assert len(text) <= 500


def test_the_briefing_names_a_task_by_its_words_not_by_the_screenshot_pasted_with_it(project):
    hook("inject", prompt_payload("[Image #1] the pagination of the orders page skips page 2 [Image #2]", "s1",
                                  project), project)
    out = hook("start", start_payload("startup", "s2", project), project)
    text = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert 'Where the work stopped: "the pagination of the orders page…"' in text, text
    assert "[Image" not in text, text


def test_an_approved_plan_and_the_users_choice_are_where_the_work_stopped(project):
    """Through the real hooks: a turn that asks the user, plans and stops there. The briefing
    after a gap says the plan as the latest word on the work, and the choice is recalled."""
    p = str(project)
    hook("inject", prompt_payload("the side panel is too tall on a laptop screen", "s1", project), project)
    hook("capture", post_payload("Read", {"file_path": p + "/src/panel/panel.html"},
                                 {"file": {"content": "<header><span class='version-badge'>v3.7.0</span></header>"}},
                                 "s1", project), project)
    question = {"question": "Should the status popover close when a capture starts?", "header": "During capture",
                "options": [{"label": "Auto-close", "description": "Closes when a capture starts"},
                            {"label": "Stay open", "description": "Shows the status live"}]}
    hook("capture", post_payload("AskUserQuestion", {"questions": [question]}, {
        "questions": [question], "answers": {question["question"]: "Stay open"}}, "s1", project), project)
    plan = ("# Plan: Condensed side panel for small screens\n\n## Summary\nReplace the version badge with a status "
            "dot and a floating popover.\nThe thumbnail overflow is already fixed.\n")
    hook("capture", post_payload("ExitPlanMode", {"plan": plan}, {"plan": plan, "isAgent": False}, "s1", project),
         project)
    mem = ais.open_memory(str(project))
    mem.flush()
    stored = next(m for m in mem.msgs.values() if m["text"].startswith("Plan approved:"))
    assert stored["source"] == "assistant" and "resolved" not in stored
    out = hook("start", start_payload("startup", "s2", project), project)
    text = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Last: Plan approved: Condensed side panel for small screens." in text, text
    assert not {"plan", "approved"} & set(text.split("Topics: ")[1].split(".")[0].split(", ")), text
    assert "Resolved" not in text, text
    recalled = mem.context("should the status popover stay open during a capture?", session="s2")["text"]
    assert "During capture: chose Stay open (Shows the status live)" in recalled, recalled


def test_a_background_tasks_notification_is_news_of_the_work_not_the_users_task(project):
    """Claude Code sends a background command's end as a user turn. Through the real hooks it
    joins the work it came into: no thread of its own, and the task stays the user's."""
    p = str(project)
    turn = lambda payload, n: dict(payload, prompt_id=f"turn-{n}")  # noqa: E731
    hook("inject", turn(prompt_payload("start the SDK backend and the Vite frontend for the dashboard", "s1", project),
                        1), project)
    hook("capture", turn(post_payload("Bash", {"command": "cd sdk && bun run server.ts", "run_in_background": True},
                                      {"stdout": "Command running in background with ID: b2181d1"}, "s1", project), 1),
         project)
    hook("stop", turn(stop_payload("Both servers are starting: SDK on 3001, Vite on 5173.", session="s1",
                                   project=project), 1), project)
    notice = ("<task-notification>\n<task-id>b2181d1</task-id>\n<output-file>/tmp/claude/tasks/b2181d1.output"
              "</output-file>\n<status>failed</status>\n<summary>Background command \"Start SDK backend server\" "
              "failed with exit code 137</summary>\n</task-notification>\nRead the output file to retrieve the "
              "result: /tmp/claude/tasks/b2181d1.output")
    assert hook("inject", turn(prompt_payload(notice, "s1", project), 2), project).returncode == 0
    hook("stop", turn(stop_payload("That was the old backend I killed earlier (137 = killed).", session="s1",
                                   project=project), 2), project)
    # A subagent's, with the line newer clients add after it; a hook's feedback (Claude Code 1.0 wrote
    # it as a user record): neither is a task of the user's.
    agent = ('<task-notification>\n<task-id>a58545f</task-id>\n<status>completed</status>\n<summary>Agent "Port the '
             'dashboard charts to recharts" completed</summary>\n<result>Replaced the chart components in '
             'src/Dashboard.tsx with recharts ones.</result>\n</task-notification>\nFull transcript available at: '
             '/private/tmp/claude-503/-Users-x-dashboard/tasks/a58545f.output')
    feedback = "Stop hook feedback:\n- [uv run .claude/hooks/stop.py --chat]: error: Failed to spawn: `.claude/hooks/stop.py`"
    for n, said in ((3, agent), (4, feedback)):
        assert hook("inject", turn(prompt_payload(said, "s1", project), n), project).returncode == 0
    mem = ais.open_memory(p)
    mem.flush()
    assert len(mem.threads) == 1, [t["title"] for t in mem.threads.values()]
    [thread] = mem.threads.values()
    assert thread["title"].startswith("start the SDK backend")
    news = next(m for m in thread["messages"] if m["text"].startswith("Background command"))
    assert news["source"] == "tool:TaskNotification" and "b2181d1" not in news["text"]
    report = next(m for m in thread["messages"] if m["text"].startswith("Agent "))
    assert report["source"] == "tool:TaskNotification" and "Full transcript" not in report["text"], report
    assert not any("hook feedback" in m["text"] for m in thread["messages"]), thread["messages"]
    assert mem.store.heartbeat()["last_task"].startswith("start the SDK backend")
    current = next(x for x in mem.context("go on", session="s1")["text"].splitlines() if x.startswith("Current work"))
    assert current.startswith('Current work: "start the SDK backend') and "Background command" not in current, current


def test_a_background_commands_notification_is_that_commands_run(project, tmp_path):
    """Claude Code 2.1 sends a background command's end as the next prompt, naming the task and
    its output file: kept as that command's run (its command from the transcript, the end of its
    output file), a failure its next passing run fixes. Without the file (gone, a link, another
    task's), the notification's summary says how it ended; a subagent's stays its report."""
    p = str(project)
    common = {"isSidechain": False, "userType": "external", "cwd": p, "sessionId": "s1", "version": "2.1.197"}
    calls = [(f"toolu_{tid}", "Bash", {"command": command, "run_in_background": True},
              f"Command running in background with ID: {tid}.", {"backgroundTaskId": tid}, False)
             for tid, command in (("bjr2wz6j8", "node server.js"), ("b0link", "npm run worker"),
                                  ("b1other", "npm run build"), ("b2vite", "npx vite"))]
    (project / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in turn_records(
        common, "start the API server", calls)), encoding="utf-8")
    tasks = tmp_path / "claude-0" / "-srv-api" / "s1" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "bjr2wz6j8.output").write_text("listening on :4000\nError: listen EADDRINUSE: address already in use\n")
    (tasks / "b0link.output").symlink_to(tasks / "bjr2wz6j8.output")

    def notice(tid, status, summary, output=None):
        return (f"<task-notification>\n<task-id>{tid}</task-id>\n<tool-use-id>toolu_{tid}</tool-use-id>\n"
                f"<output-file>{output or tasks / (tid + '.output')}</output-file>\n<status>{status}</status>\n"
                f"<summary>{summary}</summary>\n</task-notification>")
    hook("inject", prompt_payload("start the API server", "s1", project), project)
    for prompt in (notice("bjr2wz6j8", "failed", 'Background command "Start the API server" failed with exit code 1'),
                   notice("b0link", "failed", 'Background command "Start the worker" failed with exit code 2'),
                   notice("b1other", "failed", 'Background command "Build" failed with exit code 1',
                          tasks / "bjr2wz6j8.output"),  # another task's file
                   notice("a58545f", "completed", 'Agent "Audit the parser" completed'),
                   notice("b2vite", "failed", 'Background command "Start Vite" failed with exit code 143')):
        assert hook("inject", prompt_payload(prompt, "s1", project), project).returncode == 0
    hook("capture", post_payload("Bash", {"command": "node server.js"}, {"stdout": "listening on :4001"}, "s1",
                                 project), project)
    mem = ais.open_memory(p)
    mem.flush()
    runs = {m["command"] if m.get("command") else m["text"]: m for m in mem.msgs.values()
            if m["source"] == "tool:TaskNotification"}
    crash = runs["node server.js"]
    assert crash["text"] == ("$ node server.js (background, failed, exit 1) [failed]\n"
                             "listening on :4000\nError: listen EADDRINUSE: address already in use"), crash
    assert crash["failed"] and crash.get("fixed_by"), crash  # the next passing run fixed it
    assert runs["npm run worker"]["text"] == ("$ npm run worker (background, failed, exit 2) [failed]\n"
                                              'Background command "Start the worker" failed with exit code 2')
    assert runs["npm run build"]["text"].endswith('\nBackground command "Build" failed with exit code 1')
    assert 'Agent "Audit the parser" completed' in runs  # no command: the notice as it was
    # Ended by SIGTERM (128 + 15): a server stopped, most often on purpose, is no crash.
    stopped = next(m for m in mem.msgs.values() if m["text"].startswith("$ npx vite"))
    assert stopped["text"].startswith("$ npx vite (background, stopped)\n") and not stopped.get("failed"), stopped


def test_what_comes_while_the_agent_works_is_kept_once(project, tmp_path):
    """Claude Code 2.1 hands a prompt typed while the agent works, and the notification of a
    background command that ends meanwhile, to the running turn as transcript attachments: no
    hook is sent for them. The turn's Stop keeps them, each once though Stop fires again and
    the session's end looks too: the instruction typed is a rule, the crash its command's
    failure, which its next passing run fixes. A subagent's attachment stays out of it."""
    p = str(project)
    common = {"isSidechain": False, "userType": "external", "cwd": p, "sessionId": "s1", "version": "2.1.197"}
    tasks = tmp_path / "claude-0" / "-srv-api" / "s1" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "bjr2wz6j8.output").write_text("FAIL src/parser.test.ts\n  expected 3 tokens, got 2\n")
    calls = [("toolu_bg", "Bash", {"command": "npm test", "run_in_background": True},
              "Command running in background with ID: bjr2wz6j8.", {"backgroundTaskId": "bjr2wz6j8"}, False),
             ("toolu_fg", "Bash", {"command": "npx prettier --write src"}, "done", {"stdout": "done"}, False)]
    typed = "from now on, always use tabs for indentation in this repo"
    notice = ("<task-notification>\n<task-id>bjr2wz6j8</task-id>\n<tool-use-id>toolu_bg</tool-use-id>\n"
              f"<output-file>{tasks / 'bjr2wz6j8.output'}</output-file>\n<status>failed</status>\n"
              '<summary>Background command "Run the tests" failed with exit code 1</summary>\n</task-notification>')
    records = turn_records(common, "run the tests in the background and format the sources", calls) + [
        queued_record(common, "q-typed", "prompt", typed), queued_record(common, "q-notice", "task-notification", notice),
        dict(queued_record(common, "q-sub", "prompt", "never commit generated files"), isSidechain=True)]
    (project / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    hook("inject", prompt_payload("run the tests in the background and format the sources", "s1", project), project)
    for _ in range(2):
        assert hook("stop", stop_payload("Tests started; sources formatted.", session="s1", project=project),
                    project).returncode == 0
    assert hook("end", end_payload(session="s1", project=project), project).returncode == 0
    hook("capture", post_payload("Bash", {"command": "npm test"}, {"stdout": "Tests: 12 passed"}, "s1", project),
         project)
    mem = ais.open_memory(p)
    mem.flush()
    assert [m["source"] for m in mem.msgs.values() if m["text"] == typed] == ["prompt"]
    assert [r["text"] for r in ais.current_rules(mem.store.rules())] == ["Always use tabs for indentation in this repo"]
    [crash] = [m for m in mem.msgs.values() if m["source"] == "tool:TaskNotification"]
    assert crash["text"] == ("$ npm test (background, failed, exit 1) [failed]\n"
                             "FAIL src/parser.test.ts\n  expected 3 tokens, got 2"), crash
    assert crash["failed"] and crash.get("fixed_by"), crash
    assert not any("generated files" in m["text"] for m in mem.msgs.values())


def test_a_command_the_user_runs_is_kept_as_that_commands_run(project):
    """A command the user runs with "!" at Claude Code 2.1's prompt goes to the model with no
    hook: the next Stop keeps it as a run of that command, not as the user's words; a failure
    (the client gives its output as stderr) that the agent's next passing run fixes. One with
    no output says nothing of how it ended: not kept."""
    p = str(project)
    common = {"isSidechain": False, "userType": "external", "cwd": p, "sessionId": "s1", "version": "2.1.197"}
    records = (turn_records(common, "make the parser tests pass", [])
               + user_run_records(common, "u-test", "npm test", stderr="FAIL src/parser.test.ts\n  expected 3 tokens\n")
               + user_run_records(common, "u-git", "git status", stdout="On branch main\nnothing to commit")
               + user_run_records(common, "u-true", "true"))
    (project / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    hook("inject", prompt_payload("make the parser tests pass", "s1", project), project)
    assert hook("stop", stop_payload("Looking at the failure.", session="s1", project=project), project).returncode == 0
    hook("capture", post_payload("Edit", {"file_path": f"{p}/src/parser.ts", "old_string": "a", "new_string": "b"},
                                 {"filePath": f"{p}/src/parser.ts"}, "s1", project), project)
    hook("capture", post_payload("Bash", {"command": "npm test"}, {"stdout": "Tests: 12 passed"}, "s1", project), project)
    mem = ais.open_memory(p)
    mem.flush()
    runs = {m["text"]: m for m in mem.msgs.values() if "(run by the user)" in m["text"]}
    failed = runs["$ npm test (run by the user) [failed]\nFAIL src/parser.test.ts\n  expected 3 tokens"]
    assert failed["failed"] and failed["fixed_files"] == ["src/parser.ts"], failed
    assert "$ git status (run by the user)\nOn branch main\nnothing to commit" in runs and len(runs) == 2, runs
    assert [m["text"] for m in mem.msgs.values() if m["source"] == "prompt"] == ["make the parser tests pass"]


def test_an_issue_read_through_mcp_is_recalled_with_the_work(project):
    """Through the real capture hook: the GitHub MCP server's issue, read in a turn, is memory a
    later prompt about it gets back."""
    hook("inject", prompt_payload("take issue 377 and fix what it reports", "s1", project), project)
    issue = {"number": 377, "title": "Notes lose their content field", "state": "open",
             "body": "get-company-notes returns No content for every note although the Attio API sends content_plaintext."}
    assert hook("capture", post_payload("mcp__github__get_issue", {"owner": "kesslerio", "repo": "attio-mcp-server",
                                                                   "issue_number": 377},
                                        [{"type": "text", "text": json.dumps(issue)}], "s1", project),
                project).returncode == 0
    mem = ais.open_memory(str(project))
    mem.flush()
    kept = next(m for m in mem.msgs.values() if m["source"] == "tool:mcp__github__get_issue")
    assert kept["text"].startswith("github get_issue owner=kesslerio repo=attio-mcp-server issue_number=377:\n"
                                   "title: Notes lose their content field")
    assert len(mem.threads) == 1  # in the turn that read it
    text = mem.context("why do the company notes come back without content_plaintext?", session="s2")["text"]
    assert "although the Attio API sends content_plaintext" in text, text


def test_the_digest_lists_each_threads_newest_files(project):
    mem = work(project)
    mem.write_index()
    digest = mem.store.read_digest()
    assert any("src/LoginForm.tsx" in t.get("files", []) for t in digest.values())


def test_a_journaled_entry_with_bad_files_is_applied_without_them(project):
    mem = ais.open_memory(str(project))
    entry = ais.prepare_capture("Read the parser module", "tool:Read", origin="file_read")
    for files in ("src/a.py", [3, None, "src/b.py"], {"a": 1}):
        mem.store.inbox_append(dict(entry, files=files, op="read"))
    mem.flush()
    kept = [m.get("files") for m in mem.msgs.values()]
    assert ["src/b.py"] in kept and all(f in (None, ["src/b.py"]) for f in kept)


def test_a_failed_command_is_captured_and_linked_to_the_run_that_passes_after_the_fix(project):
    from support import failure_payload
    p = str(project)
    hook("inject", prompt_payload("make the parser tests pass", "s1", project), project)
    out = hook("failure", failure_payload("pytest tests/test_parser.py", "Exit code 1\nE   AssertionError: "
                                          "tokens differ", "s1", project), project)
    assert out.returncode == 0 and out.stdout == b""
    hook("capture", post_payload("Edit", {"file_path": p + "/src/parser.py", "old_string": "split()",
                                          "new_string": "split(maxsplit=1)"}, {}, "s1", project), project)
    hook("capture", post_payload("Bash", {"command": "pytest tests/test_parser.py"},
                                 {"stdout": "3 passed", "stderr": ""}, "s1", project), project)
    mem = ais.open_memory(str(project))
    mem.flush()
    failed = next(m for m in mem.msgs.values() if m.get("failed"))
    assert "[failed]" in failed["text"] and "tokens differ" in failed["text"]
    assert failed["files"] == ["tests/test_parser.py"] and failed["command"] == "pytest tests/test_parser.py"
    passed = mem.msgs[failed["fixed_by"]]
    assert passed["fixes"] == failed["id"] and not passed.get("failed")
    # The change that fixed it: the files the session edited between the failure and the pass.
    assert failed["fixed_files"] == ["src/parser.py"]
    assert "failed, fixed on" in ais.item_line(failed, "en") and "by changing src/parser.py" in ais.item_line(failed, "en")
    again = ais.open_memory(str(project))  # saved on both sides
    again.ensure_loaded()
    assert again.msgs[failed["id"]]["fixed_by"] == passed["id"]
    thread = next(t for t in again.threads.values() if any(m["id"] == failed["id"] for m in t["messages"]))
    assert ais.thread_outcomes(thread)[0]["files"] == ["src/parser.py"]


def test_a_background_commands_crash_is_a_failure_the_next_run_fixes(project):
    """BashOutput (Claude Code 2.0) brings a background command's output with its command, status
    and exit code. A server that died is an error like a failed command's; one still running
    passes nothing; the same command run again and passing fixes it."""
    p = str(project)
    bg = lambda resp: post_payload("BashOutput", {"bash_id": "08173f"}, dict(  # noqa: E731
        {"shellId": "08173f", "command": "node server-supabase.js &", "stdoutLines": 1, "stderrLines": 1,
         "timestamp": "2025-09-17T06:06:18.805Z"}, **resp), "s1", project)
    hook("inject", prompt_payload("move the players API to the Supabase server", "s1", project), project)
    hook("capture", post_payload("Read", {"file_path": p + "/server-supabase.js"},
                                 {"file": {"content": "app.listen(2004)\n"}}, "s1", project), project)
    hook("capture", bg({"status": "running", "exitCode": None, "stdout": "GamePlanPro server on :2004", "stderr": ""}),
         project)
    hook("capture", bg({"status": "completed", "exitCode": 1, "stdout": "", "stderr": "Error: listen EADDRINUSE: "
                                                                                      "address already in use :::2004"}),
         project)
    hook("capture", bg({"status": "running", "exitCode": None, "stdout": "", "stderr": ""}), project)  # nothing new
    hook("capture", post_payload("Edit", {"file_path": p + "/server-supabase.js", "old_string": "listen(2004)",
                                          "new_string": "listen(process.env.PORT || 2005)"}, {}, "s1", project), project)
    hook("capture", post_payload("Bash", {"command": "node server-supabase.js &"}, {"stdout": "listening on :2005"},
                                 "s1", project), project)
    mem = ais.open_memory(p)
    mem.flush()
    runs = [m for m in sorted(mem.msgs.values(), key=lambda m: m["id"]) if m["source"] == "tool:BashOutput"]
    assert [m["text"].split("\n")[0] for m in runs] == [
        "$ node server-supabase.js & (background, running)",
        "$ node server-supabase.js & (background, completed, exit 1) [failed]"]
    running, crashed = runs
    assert "command" not in running and crashed["failed"] and "EADDRINUSE" in crashed["text"]
    assert "files" not in crashed  # the call that started it ran them
    assert mem.msgs[crashed["fixed_by"]]["text"].startswith("$ node server-supabase.js &\nlistening on :2005")
    assert crashed["fixed_files"] == ["server-supabase.js"]
    for resp in ({}, {"command": " "}, {"command": 3}, "text"):
        assert ais.tool_capture(post_payload("BashOutput", {"bash_id": "x"}, resp, "s1", project), p + "/.ai") is None


def test_a_background_task_read_with_task_output_is_its_commands_run(project):
    """TaskOutput (Claude Code 2.1) names the task, not the command: the command is the one the
    transcript's Bash call started (shapes of 2.1.197). Its crash is that command's failure, fixed
    by its next passing run; with the call not in the transcript, the task's description names
    the run and nothing is linked. A Read of the task's output file, or a `tail` of it, is that
    command's output so far; an older transcript keeps only the text of the call's result ("with
    ID: …"). A background subagent's task is its report once it completed."""
    p = str(project)
    command = "node server.js"
    task = lambda tid, status, code, output, kind="local_bash": post_payload("TaskOutput", {  # noqa: E731
        "task_id": tid, "block": False, "timeout": 3000}, {"retrieval_status": "success" if code is not None else
                                                           "not_ready", "task": {
            "task_id": tid, "task_type": kind, "status": status, "description": "Start the API server",
            "output": output, "exitCode": code}}, "s1", project)
    started = {"stdout": "", "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False,
               "backgroundTaskId": "b6fj1qje4"}
    common = {"isSidechain": False, "userType": "external", "cwd": p, "sessionId": "s1", "version": "2.1.197"}
    records = turn_records(common, "start the API server", [
        ("toolu_bg", "Bash", {"command": command, "description": "Start the API server", "run_in_background": True},
         "Command running in background with ID: b6fj1qje4.", started, False),
        ("toolu_w", "Bash", {"command": "npm run worker", "run_in_background": True},
         "Command running in background with ID: b7worker. Output is being written to: /tmp/x.", None, False)])
    (project / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    hook("inject", prompt_payload("start the API server", "s1", project), project)
    hook("capture", post_payload("Bash", {"command": command, "run_in_background": True}, started, "s1", project),
         project)
    hook("capture", task("b6fj1qje4", "running", None, "API on :4000\n"), project)
    outputs = "/tmp/claude-0/-srv-api/s1/tasks/"
    for tid in ("b6fj1qje4", "b0unknown"):
        hook("capture", post_payload("Read", {"file_path": outputs + tid + ".output"}, {"type": "text", "file": {
            "filePath": outputs + tid + ".output", "content": "API on :4000\nGET /health 200\n"}}, "s1", project), project)
    for look in (f"sleep 2 && tail -30 {outputs}b7worker.output", f"tail {outputs}b7worker.output {outputs}b0.output"):
        hook("capture", post_payload("Bash", {"command": look}, {"stdout": "worker: queue drained", "stderr": ""},
                                     "s1", project), project)
    hook("capture", task("b6fj1qje4", "failed", 1, "Error: listen EADDRINUSE: address already in use :::4000\n"),
         project)
    hook("capture", task("b9unknown", "failed", 1, "Error: Cannot find module 'express'\n"), project)
    agent = {"task_id": "a4334356", "task_type": "local_agent", "status": "running", "description": "audit the parser",
             "output": "Reading lexer.py", "prompt": "Audit the parser for unicode bugs"}
    assert ais.tool_capture(post_payload("TaskOutput", {"task_id": "a4334356"}, {"task": agent}, "s1", project),
                            p + "/.ai") is None  # its way there is not its finding
    hook("capture", post_payload("TaskOutput", {"task_id": "a4334356", "block": True}, {"retrieval_status": "success",
         "task": dict(agent, status="completed", output="2 issues", result="2 issues: lexer.py drops combining marks")},
         "s1", project), project)
    hook("capture", post_payload("Bash", {"command": command}, {"stdout": "API on :4001"}, "s1", project), project)
    mem = ais.open_memory(p)
    mem.flush()
    reads = sorted((m for m in mem.msgs.values() if m["source"] == "tool:Read"), key=lambda m: m["id"])
    assert [m["text"].split("\n")[0] for m in reads] == ["$ node server.js (background, output so far)",
                                                        f"Read {outputs}b0unknown.output:"]
    assert "GET /health 200" in reads[0]["text"] and "command" not in reads[0] and "files" not in reads[0]
    looks = sorted((m for m in mem.msgs.values() if "queue drained" in m["text"]), key=lambda m: m["id"])
    assert [m["text"].split("\n")[0] for m in looks] == ["$ npm run worker (background, output so far)",
                                                        f"$ tail {outputs}b7worker.output {outputs}b0.output"]
    assert "command" not in looks[0]
    runs = [m for m in sorted(mem.msgs.values(), key=lambda m: m["id"]) if m["source"] == "tool:TaskOutput"]
    assert [m["text"].split("\n")[0] for m in runs] == [
        "$ node server.js (background, running)", "$ node server.js (background, failed, exit 1) [failed]",
        "Start the API server (background, failed, exit 1)",
        "Task audit the parser (background): Audit the parser for unicode bugs"]
    running, crashed, unknown, report = runs
    assert report["text"].endswith("\n2 issues: lexer.py drops combining marks")
    assert "command" not in running and "files" not in crashed and "EADDRINUSE" in crashed["text"]
    assert mem.msgs[crashed["fixed_by"]]["text"].startswith("$ node server.js\nAPI on :4001")
    assert "Cannot find module" in unknown["text"] and not unknown.get("failed") and "command" not in unknown
    for resp in ({}, {"task": "x"}, {"task": {"task_type": "local_bash", "output": "x"}},
                 {"task": {"task_type": "local_bash", "task_id": ["b6fj1qje4"], "description": " ", "output": "x"}}):
        assert ais.tool_capture(post_payload("TaskOutput", {"task_id": 3}, resp, "s1", project), p + "/.ai") is None
    for path in (None, p + "/missing.jsonl", p, "/proc/self/mem"):  # the lookup fails quietly
        assert ais.background_command(path, "b6fj1qje4") is None
    assert ais.background_command(p + "/t.jsonl", "b6fj1qje4") == command
    assert ais.background_command(p + "/t.jsonl", "b6fj1qje4\"") is None


def test_a_workflows_result_read_with_task_output_is_kept_not_its_progress(project):
    p = str(project)

    def capture(status, output, description="audit the parser"):
        task = {"task_id": "wkkpqyrhd", "task_type": "local_workflow", "status": status, "description": description,
                "output": output}
        return ais.tool_capture(post_payload("TaskOutput", {"task_id": "wkkpqyrhd"}, {"retrieval_status": "success",
                                                                                     "task": task}, "s1", project), p + "/.ai")
    run = {"summary": "audit the parser", "agentCount": 2, "logs": [], "workflowProgress": [
        {"type": "workflow_agent", "label": "lexer", "state": "done", "tokens": 1271}]}
    kept = capture("completed", json.dumps(dict(run, result="lexer.py drops combining marks")))
    assert kept["text"] == "Workflow audit the parser:\nlexer.py drops combining marks" and kept["source"] == "tool:TaskOutput"
    # What a script returns as data is kept by its prose; no description, the run's summary names it.
    found = {"findings": [{"file": "src/lexer.py", "summary": "drops combining marks in identifiers"}], "count": 1}
    assert capture("completed", json.dumps(dict(run, result=found)), None)["text"] == \
        "Workflow audit the parser:\nsummary: drops combining marks in identifiers"
    # Still running, returned nothing, or an output that is not the run's record: nothing kept.
    assert capture("running", json.dumps(dict(run, result="half"))) is None
    for output in (json.dumps(dict(run, result=None)), json.dumps(dict(run, result="  ")), "not json", None, "[1, 2]"):
        assert capture("completed", output) is None, output


def test_a_code_reviews_findings_are_kept_with_their_files(project):
    """ReportFindings (Claude Code 2.1's code review; its shape in 2.1.197): a line each verified
    finding, with its place, defect, failure and verdict; the findings' project files are recorded
    as named, not worked on, and a later prompt about one brings its finding back. A review without
    a finding is not kept."""
    p = str(project)
    findings = [{"file": "src/billing.py", "line": 2, "summary": "invoice_total crashes on an empty invoice",
                 "failure_scenario": "invoice_total([]) raises ZeroDivisionError", "verdict": "CONFIRMED"},
                {"file": "/etc/passwd", "summary": "Reads a file outside the project.", "verdict": "PLAUSIBLE",
                 "outcome": "skipped"},
                {"file": "src/api.py", "summary": "  "}]
    hook("inject", prompt_payload("review the billing module", "s1", project), project)
    hook("capture", post_payload("ReportFindings", {"level": "high", "findings": findings},
                                 {"count": 3, "level": "high", "findings": findings}, "s1", project), project)
    mem = ais.open_memory(p)
    mem.flush()
    [review] = [m for m in mem.msgs.values() if m["source"] == "tool:ReportFindings"]
    assert review["text"] == ("Review findings (high):\n- src/billing.py:2: invoice_total crashes on an empty invoice. "
                              "Fails: invoice_total([]) raises ZeroDivisionError (confirmed)\n"
                              "- /etc/passwd: Reads a file outside the project. (plausible, skipped)")
    assert review["files"] == ["src/billing.py"] and review["op"] == "mention"
    out = hook("inject", prompt_payload("fix invoice_total in src/billing.py", "s2", project), project)
    assert "invoice_total crashes on an empty invoice" in json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    for inp, resp in (({"findings": []}, {"count": 0, "findings": []}), ({"findings": "x"}, "1 finding reported."),
                      ({}, {"findings": [3, {"summary": 4}, {"file": 5, "summary": ""}]})):
        assert ais.tool_capture(post_payload("ReportFindings", inp, resp, "s1", project), p + "/.ai") is None


def test_the_change_that_fixed_a_failure_names_the_files_its_error_names_first():
    """Between the failure and the pass the session edited five files: the one the traceback
    names leads, then the others in order, three at most."""
    msgs = {"m1": {"text": '$ pytest [failed]\nFile "src/lexer.py", line 12, in split'},
            "m2": {"op": "edit", "files": ["README.md"]}, "m3": {"op": "read", "files": ["src/app.py"]},
            "m4": {"op": "edit", "files": ["docs/notes.md", "src/lexer.py"]},
            "m5": {"op": "write", "files": ["src/tokens.py"]}, "m6": {"op": "edit", "files": ["setup.cfg"]}}
    assert ais.fix_change(msgs, ["m0", "m1", "m2", "m3", "m4", "m5", "m6"], "m1") == {
        "fixed_files": ["src/lexer.py", "README.md", "docs/notes.md"]}
    assert ais.fix_change(msgs, ["m1", "m3"], "m1") == {}  # a read changes nothing


def test_a_failure_in_another_session_or_of_another_command_is_not_fixed_by_it(project):
    mem = ais.open_memory(str(project))
    for session, command, failed in (("s1", "npm test", True), ("s2", "npm test", False),
                                     ("s1", "npm run build", False)):
        mem.store.inbox_append(ais.prepare_capture(f"$ {command}\noutput", "tool:Bash", session_id=session,
                                                   origin="command", command=command, failed=failed))
    mem.flush()
    failed = next(m for m in mem.msgs.values() if m.get("failed"))
    assert "fixed_by" not in failed


def test_interrupted_and_non_shell_failures_are_not_captured(project):
    from support import failure_payload
    for payload in (dict(failure_payload(project=project), is_interrupt=True),
                    dict(failure_payload(project=project), tool_name="Read", tool_input={"file_path": "x.py"})):
        assert hook("failure", payload, project).returncode == 0
    mem = ais.open_memory(str(project))
    mem.flush()
    assert not mem.msgs


def test_a_bare_file_name_in_a_command_counts_only_when_the_memory_knows_that_file(project):
    mem = work(project)
    mem.store.inbox_append(ais.prepare_capture("Edited .gitignore:\n+ dist", "tool:Edit", origin="file_write",
                                               files=[".gitignore"], op="edit"))
    commands = ("npx eslint LoginForm.tsx", "node -e 'console.log(1)' && cat notes.txt",
                "echo coverage >> .gitignore", "ls .venv .claude")
    for command in commands:
        mem.store.inbox_append(ais.prepare_capture(f"$ {command}\nok", "tool:Bash", origin="command",
                                                   files=ais._command_paths(command), op="run"))
    mem.flush()
    runs = {m["text"].split("\n")[0]: m.get("files") for m in mem.msgs.values() if m["text"].startswith("$ ")}
    assert runs["$ npx eslint LoginForm.tsx"] == ["src/LoginForm.tsx"]
    assert runs["$ node -e 'console.log(1)' && cat notes.txt"] is None
    assert runs["$ echo coverage >> .gitignore"] == [".gitignore"]  # a dotfile it knows
    assert runs["$ ls .venv .claude"] is None  # folders, as far as it knows


def test_a_file_worked_on_with_the_named_one_comes_with_it(project):
    mem = ais.open_memory(str(project))
    turns = [("wire the button", [("src/a/widget.ts", "edit"), ("src/lib/helpers.ts", "edit")]),
             ("style the header", [("src/header.css", "edit")]),
             ("tune the footer", [("src/footer.css", "edit")])]
    for prompt, touched in turns:
        mem.store.inbox_append(ais.prepare_capture(prompt, "prompt", session_id="s1"))
        for path, op in touched:
            mem.store.inbox_append(ais.prepare_capture(f"Edited {path}:\n- a\n+ b", "tool:Edit", session_id="s1",
                                                       origin="file_write", files=[path], op=op))
        mem.flush()
    ranked = [p for p, _ in mem.file_table().rank("widget.ts crashes on empty rows", 2)]
    assert ranked == ["src/a/widget.ts", "src/lib/helpers.ts"]  # not the newer css files
    assert [p for p, _ in mem.file_table().rank("crashes on empty rows", 1)] == ["src/footer.css"]


def test_the_files_a_spec_names_are_in_play_when_a_prompt_names_the_spec(project):
    """ "/implement specs/billing.md": the files the spec says to change come with it, though
    other files were worked on since and the spec names them past the head the memory keeps."""
    mem = ais.open_memory(str(project))
    paths = ["src/billing/invoice.ts", "src/billing/tax.ts"] + [f"src/ui/{n}.tsx" for n in ("Header", "Menu", "Card", "Table")]
    for i, path in enumerate(paths):
        mem.store.inbox_append(ais.prepare_capture(f"Edited {path}:\n- a\n+ b", "tool:Edit", at=time.time() - 600 + i,
                                                   session_id="s1", origin="file_write", files=[path], op="edit"))
    mem.flush()
    spec = ("# Billing\n" + "Why totals must round per line, not per invoice. " * 40 + "\n## Files to change\n"
            f"- `./src/billing/invoice.ts`: round each line\n- {project}/src/billing/tax.ts: the same\n"
            "- questions: billing@example.com; see specs/billing.md\n")
    hook("capture", post_payload("Write", {"file_path": f"{project}/specs/billing.md", "content": spec}, {},
                                 "s1", project), project)
    mem = ais.open_memory(str(project))
    mem.flush()
    write = next(m for m in mem.msgs.values() if m.get("op") == "write")
    assert write["cites"] == ["src/billing/invoice.ts", "src/billing/tax.ts"]  # not the address, not itself
    assert "src/billing/tax.ts" not in write["text"]  # past the head kept as the text
    assert ais.file_citations("import './tax.ts'; const db = ctx.db", str(project), "src/billing/invoice.ts") == []
    ranked = [p for p, _ in mem.file_table().rank("/implement specs/billing.md", 3)]
    assert ranked[0] == "specs/billing.md" and set(ranked[1:]) == {"src/billing/invoice.ts", "src/billing/tax.ts"}
    assert [p for p, _ in mem.file_table().rank("restyle the menu", 3)] == [
        "src/ui/Menu.tsx", "specs/billing.md", "src/ui/Table.tsx"]


def test_a_prompt_saying_most_words_of_a_files_camelcase_name_ranks_it_first(project):
    mem = ais.open_memory(str(project))
    for path in ("src/EventSchedulerDashboard.tsx", "src/EventList.tsx", "src/TeamDashboard.tsx", "src/api.ts"):
        mem.store.inbox_append(ais.prepare_capture(f"Read {path}:\nexport default 1", "tool:Read", session_id="s1",
                                                   files=[path], op="read"))
    mem.flush()
    ranked = [p for p, _ in mem.file_table().rank("the event scheduler page does not open", 2)]
    assert ranked[0] == "src/EventSchedulerDashboard.tsx", ranked  # 2 of its 3 words, not EventList's 1 of 2


@pytest.mark.parametrize("first_second", [0, 1])
def test_files_touched_in_the_same_second_are_newest_last_touched(project, first_second):
    """Times are whole seconds: of files read one after the other in the same second, the last
    read is the newest, wherever a second boundary falls (it used to rank the first read
    newest, and the camelCase test above then failed when its first read fell a second earlier)."""
    mem = ais.open_memory(str(project))
    paths = ("src/EventSchedulerDashboard.tsx", "src/EventList.tsx", "src/TeamDashboard.tsx", "src/api.ts")
    for k, path in enumerate(paths):
        at = ais.iso(1_800_000_000 + (first_second if k else 0))
        mem.store.inbox_append(ais.prepare_capture(f"Read {path}:\nexport default 1", "tool:Read", session_id="s1",
                                                   files=[path], op="read", at=at))
    mem.flush()
    table = mem.file_table()
    assert [p for p, _ in table.rank("continue", 4)] == list(reversed(paths))
    assert [p for p, _ in table.rank("the event scheduler page does not open", 1)] == [paths[0]]


def test_a_prompt_of_acknowledgements_ranks_the_files_by_the_work_not_by_its_words(project):
    """ "continue" matches the turns that said "continue"; the file in play is the one worked on."""
    mem = ais.open_memory(str(project))
    mem.store.inbox_append(ais.prepare_capture("continue with the parser cleanup", "prompt", session_id="s1"))
    mem.store.inbox_append(ais.prepare_capture("Edited src/parser.py:\n- a\n+ b", "tool:Edit", session_id="s1",
                                               files=["src/parser.py"], op="edit"))
    mem.store.inbox_append(ais.prepare_capture("make the server answer 404 on unknown routes", "prompt", session_id="s1"))
    for k in range(3):
        mem.store.inbox_append(ais.prepare_capture(f"Edited src/server.go:\n- a{k}\n+ b{k}", "tool:Edit",
                                                   session_id="s1", files=["src/server.go"], op="edit"))
    mem.flush()
    assert [p for p, _ in mem.file_table().rank("continue", 1)] == ["src/server.go"]
    assert [p for p, _ in mem.file_table().rank("continue the parser cleanup", 1)] == ["src/parser.py"]


def test_a_reply_with_no_words_goes_on_with_the_files_of_the_last_task(project):
    """ "yes" answers the agent's last turn: the files touched since the last prompt that set a task
    come first, then the newest ones; a guide read five times two days before is found by a prompt
    about it, not by a reply that names nothing."""
    mem = ais.open_memory(str(project))
    day = 1_800_000_000

    def cap(text, source="prompt", at=0, path=None):
        mem.store.inbox_append(ais.prepare_capture(text, source, session_id="s1", at=ais.iso(day + at),
                                                   **({"files": [path], "op": "read"} if path else {})))
    cap("write a guide to the command line interface")
    for k in range(5):
        cap(f"Read docs/cli_guide.md:\n# part {k}", "tool:Read", k + 1, "docs/cli_guide.md")
    cap("add this week's changes to the changelog", at=86400)
    cap("Read CHANGELOG.md:\n## 2.3", "tool:Read", 86401, "CHANGELOG.md")
    cap("make the build number increase on every build", at=2 * 86400)
    for k, path in enumerate(("build/version.h", "build/bump_version.py")):
        cap(f"Read {path}:\nBUILD = 78", "tool:Read", 2 * 86400 + 1 + k, path)
    mem.flush()
    assert [p for p, _ in mem.file_table().rank("yes", 3)] == ["build/bump_version.py", "build/version.h",
                                                               "CHANGELOG.md"]
    assert [p for p, _ in mem.file_table().rank("update the command line guide", 1)] == ["docs/cli_guide.md"]
    # No prompt at all (the briefing after a break): the work's weight, not the last turn.
    assert [p for p, _ in mem.file_table().rank("", 1)] == ["docs/cli_guide.md"]


def test_a_slash_command_run_again_ranks_the_files_its_earlier_run_touched(project):
    """ "/prime" is short, yet a prompt: the next session's "/prime" reads what the last one read."""
    mem = ais.open_memory(str(project))
    cap = mem.store.inbox_append
    cap(ais.prepare_capture("/prime", "prompt", session_id="s1"))
    for path in ("README.md", "docs/architecture.md"):
        cap(ais.prepare_capture(f"Read {path}:\n# notes", "tool:Read", session_id="s1", files=[path], op="read"))
    cap(ais.prepare_capture("make the server answer 404 on unknown routes", "prompt", session_id="s1"))
    for k in range(3):
        for path in ("src/server.go", "src/routes.go"):
            cap(ais.prepare_capture(f"Edited {path}:\n- a{k}\n+ b{k}", "tool:Edit", session_id="s1",
                                    files=[path], op="edit"))
    mem.flush()
    assert sorted(p for p, _ in mem.file_table().rank("/prime", 2)) == ["README.md", "docs/architecture.md"]


def test_the_briefing_lines_name_the_task_conclusion_files_resolved_and_other_work():
    now = 1_800_000_000
    at = ais.iso(now - 3600)
    hot = {"id": "t1", "title": "parser speed-up", "last_active": at, "topics": ["parser", "tokens", "cache"],
           "files": {"src/parser.py": {"op": "edit", "at": at, "n": 3}},
           "messages": [{"id": "m1", "ts": at, "source": "tool:Bash", "text": "$ pytest [failed]",
                         "command": "pytest tests/test_parser.py", "fixed_by": "m2", "fixed_files": ["src/parser.py"]},
                        {"id": "m3", "ts": at, "source": "assistant",
                         "text": "Done ✅\nThe parser now caches tokens. Next: profile the lexer."},
                        # Run again with nothing changed: a retry, not what the work resolved.
                        {"id": "m4", "ts": at, "source": "tool:Bash", "text": "$ gh issue close 31 [failed]",
                         "command": "gh issue close 31", "fixed_by": "m5"}]}
    digest = {"t2": {"title": "login form", "topics": ["login", "validation"], "last_active": at}}
    hb = {"last_task": "make the parser twice as fast", "last_conclusion": ""}
    lines = ais.where_work_stopped(hot, digest, ["src/lexer.py", "src/parser.py"], hb, now, "en", 400)
    assert lines[0] == ('Where the work stopped: "parser speed-up" (1 h ago). Topics: tokens, cache. '  # not the title's
                        'Task: make the parser twice as fast.')
    assert lines[1] == "Files: src/lexer.py, src/parser.py."  # the files in play first, no twice
    assert lines[2] == "Last: The parser now caches tokens. Next: profile the lexer."  # "Done ✅" says nothing
    assert lines[3].startswith("Resolved: pytest tests/test_parser.py (") and "src/parser.py" in lines[3]
    assert lines[4:] == ["Other recent work:", "- login form (validation)"]
    # A title cut short shows what the request asks, not how it opens.
    digest["t2"]["title"] = "ok so can you please make the login form accept a pasted one-time code"
    assert ais.where_work_stopped(hot, digest, [], hb, now, "en", 400)[-1] == \
        "- make the login form accept a pasted… (validation)"
    assert ais.title_shown("Peux-tu corriger la validation du formulaire de connexion", 40, (), "fr") == \
        "corriger la validation du formulaire…"
    assert ais.title_shown("¿Puedes revisar el flujo de pago con Stripe y PayPal?", 40, (), "es") == \
        "revisar el flujo de pago con Stripe y…"
    assert ais.title_shown("review https://github.com/acme/shop/pull/401#issuecomment-3164 and merge it", 40, (),
                           "en") == "review shop#401 and merge it"
    digest["t2"]["title"] = "can you fix the login form"  # whole: nothing to make room for
    assert ais.where_work_stopped(hot, digest, [], hb, now, "en", 400)[-1] == "- can you fix the login form (validation)"


def test_the_briefing_names_the_last_task_its_stream_was_given():
    now = 1_800_000_000
    at, before = ais.iso(now - 3600), ais.iso(now - 3 * 86400)
    hot = {"id": "t1", "title": "npx expo-doctor", "last_active": at, "topics": ["expo-audio", "bgm"],
           "messages": [{"id": "m1", "ts": before, "source": "prompt", "text": "npx expo-doctor"},
                        {"id": "m2", "ts": at, "source": "prompt",
                         "text": "Lets get a team of agents refactoring to expo-audio instead"},
                        {"id": "m3", "ts": at, "source": "assistant", "text": "The audio hook now uses expo-audio."}]}
    hb = {"last_task": "Lets get a team of agents refactoring to expo-audio instead"}
    where = 'Where the work stopped: "get a team of agents refactoring to…" (1 h ago). Topics: expo-audio, bgm.'
    assert ais.where_work_stopped(hot, {}, [], hb, now, "en", 400)[0] == where
    # "continue" sets no task, nor a follow-up that names no work; a pasted shell prompt is no part of one.
    hot["messages"].append({"id": "m4", "ts": at, "source": "prompt", "text": "continue"})
    hot["messages"].append({"id": "m6", "ts": at, "source": "prompt", "text": "what do you suggest?"})
    assert ais.where_work_stopped(hot, {}, [], hb, now, "en", 400)[0] == where
    hot["messages"].append({"id": "m5", "ts": at, "source": "prompt", "text": "dev@mbp ~ % npm run ios\nBuild failed"})
    assert ais.where_work_stopped(hot, {}, [], hb, now, "en", 400)[0].startswith('Where the work stopped: "npm run ios')
    # The prompt that opened the stream is its title.
    hot["messages"] = hot["messages"][:1]
    assert ais.where_work_stopped(hot, {}, [], {}, now, "en", 400)[0].startswith('Where the work stopped: "npx expo-doctor"')


def test_the_briefing_keeps_room_for_the_other_work_and_cuts_no_path():
    now = 1_800_000_000
    at = ais.iso(now - 3600)
    hot = {"id": "t1", "title": "checkout flow", "last_active": at, "topics": ["checkout", "cart"],
           "files": {f"src/checkout/step_{i}_of_the_payment_form.tsx": {"at": ais.iso(now - 3600 + i)} for i in range(9)},
           "messages": []}
    digest = {f"t{i}": {"title": f"work-stream {i} " + "with a long title " * 5, "topics": ["alpha", "beta", "gamma"],
                        "last_active": ais.iso(now - 7200 - i)} for i in range(2, 7)}
    hb = {"last_task": "make the checkout flow survive a reload " * 4,
          "last_conclusion": "The cart now persists in local storage, reloads keep it. " * 5}
    lines = ais.where_work_stopped(hot, digest, [], hb, now, "en", 400)
    assert sum(len(x) + 1 for x in lines) <= 400
    others = lines[lines.index("Other recent work:") + 1:]
    assert len(others) >= 2 and all(x.startswith("- work-stream ") for x in others)
    files = next(x for x in lines if x.startswith("Files:"))
    named = files[len("Files: "):].rstrip(".").split(", ")
    assert named and all(p in hot["files"] for p in named)  # whole paths, newest first
    assert named[0] == "src/checkout/step_8_of_the_payment_form.tsx"


def test_a_crowded_briefing_keeps_a_line_of_the_open_tasks_after_the_conclusion():
    now = 1_800_000_000
    at = ais.iso(now - 3600)
    hot = {"id": "t1", "title": "checkout flow", "last_active": at, "messages": [],
           "topics": ["checkout", "cart", "storage", "reload", "stripe", "webhook"],
           "files": {f"src/checkout/step_{i}.tsx": {"at": ais.iso(now - 3600 + i)} for i in range(9)}}
    digest = {f"t{i}": {"title": f"work-stream {i}", "topics": ["alpha"], "last_active": ais.iso(now - 7200 - i)}
              for i in range(2, 5)}
    plan = {"at": at, "items": [["1", "Persist the cart", "completed"], ["2", "Add the Stripe webhook", "pending"],
                                ["3", "Keep the cart across a reload " * 3, "in_progress"]]}
    hb = {"last_task": "make the checkout flow survive a reload", "prompt_session": "s1", "plans": {"s1": plan},
          "last_conclusion": "The cart now persists in local storage, reloads keep it. " * 5}
    lines = ais.where_work_stopped(hot, digest, [], hb, now, "en", 400)
    assert sum(len(x) + 1 for x in lines) <= 400
    assert [x.split(":")[0] for x in lines[:4]] == ["Where the work stopped", "Files", "Last", "Open tasks"], lines
    assert lines[3].startswith("Open tasks: Keep the cart across a reload")  # the one in progress first
    assert "Persist the cart" not in "\n".join(lines) and "Other recent work:" in lines
    hb["prompt_session"] = "s2"  # the last prompt came from a session without a task list
    assert not any(x.startswith("Open tasks") for x in ais.where_work_stopped(hot, digest, [], hb, now, "en", 400))


def test_the_other_work_streams_are_named_by_people_not_by_a_tools_output(project):
    mem = ais.open_memory(str(project))
    flags = []
    for text, source in (("Read src/billing/invoice.py:\ndef total(lines): ...", "tool:Read"),
                         ("Rework the invoice rounding so totals match the bank statements", "prompt")):
        mem.store.inbox_append(ais.prepare_capture(text, source, session_id="s1", files=["src/billing/invoice.py"]))
        mem.flush()
        mem.write_index()
        flags.append({t["title"][:6]: bool(t.get("tool_title")) for t in mem.store.read_digest().values()})
    assert list(flags[0].values()) == [True]  # a thread a Read started
    assert flags[1]["Rework"] is False  # a prompt's title is never flagged
    now = time.time()
    hot = {"id": "hot", "title": "checkout flow", "last_active": ais.iso(now - 60), "messages": []}
    digest = {"a": {"title": "Read src/cart.py:", "tool_title": True, "last_active": ais.iso(now - 120)},
              "b": {"title": "Rework the invoice rounding", "topics": ["invoice", "bank"], "last_active": ais.iso(now - 180)}}
    lines = ais.where_work_stopped(hot, digest, [], {}, now, "en", 400)
    assert lines[-2:] == ["Other recent work:", "- Rework the invoice rounding (bank)"]


def test_the_other_work_streams_are_those_that_hold_the_most_work_lately():
    now = 1_800_000_000
    hot = {"id": "hot", "title": "checkout flow", "last_active": ais.iso(now - 60), "messages": []}
    digest = {"small": {"title": "What port does the dev server use?", "n": 1, "last_active": ais.iso(now - 3600)},
              "big": {"title": "Migrate the billing tables to Postgres", "n": 40, "last_active": ais.iso(now - ais.DAY)},
              "old": {"title": "Rewrite the search indexer", "n": 60, "last_active": ais.iso(now - 5 * ais.DAY)}}
    lines = ais.where_work_stopped(hot, digest, [], {}, now, "en", 400)
    # Forty messages a day ago, then a question an hour ago, then sixty messages five days ago.
    assert lines[lines.index("Other recent work:") + 1:] == [
        "- Migrate the billing tables to Postgres", "- What port does the dev server use?", "- Rewrite the search indexer"]
    for entry in digest.values():
        entry.pop("n")  # no message count: the most recent first
    assert ais.where_work_stopped(hot, digest, [], {}, now, "en", 400)[-3:] == [
        "- What port does the dev server use?", "- Migrate the billing tables to Postgres", "- Rewrite the search indexer"]


def test_the_briefing_names_the_topics_that_tell_work_streams_apart():
    now = 1_800_000_000
    at = ais.iso(now - 3600)
    hot = {"id": "t1", "title": "speed up the parser", "last_active": at, "messages": [],
           "topics": ["react", "parser", "tokenizer", "lookahead", "backtracking", "memo", "grammar", "unicode"]}
    # "react" names every stream of this project: it tells none apart.
    digest = {f"t{i}": {"title": f"stream {i}", "topics": ["react", f"topic{i}"], "last_active": ais.iso(now - 7200 - i)}
              for i in range(2, 6)}
    lines = ais.where_work_stopped(hot, dict(digest, t1=dict(hot)), [], {}, now, "en", 400)
    assert lines[0].endswith("Topics: tokenizer, lookahead, backtracking, memo, grammar, unicode.")
    assert "- stream 2 (topic2)" in lines
    assert ais.common_topics(digest) == {"react"}
    assert ais.common_topics({"a": {"topics": ["react"]}, "b": {"topics": ["vue"]}}) == set()  # one stream each
    # A part of a compound topic shown says nothing more.
    thread = {"topics": ["server-sdk", "sdk", "finish_push", "push", "finish", "parser", "parser_test"]}
    assert ais.telling_topics(thread, "the parser's tests", set()) == ["server-sdk", "finish_push", "parser_test"]
    assert ais.telling_topics(thread, "the SDK server", set()) == ["finish_push", "parser_test"]  # said
    # Nor another form of one before it.
    thread = {"topics": ["page", "popup", "pages", "migrations", "migration", "popups"]}
    assert ais.telling_topics(thread, "the teams view", set()) == ["page", "popup", "migrations"]


def test_the_topics_leave_room_for_the_files_and_the_last_conclusion():
    now = 1_800_000_000
    hot = {"id": "t1", "title": "checkout flow", "last_active": ais.iso(now - 60), "messages": [],
           "topics": [f"topic{i}word" for i in range(8)], "files": {"src/checkout/cart.ts": {"at": ais.iso(now)}}}
    lines = ais.where_work_stopped(hot, {}, [], {"last_conclusion": "The cart now survives a reload."}, now, "en", 150)
    assert lines[1:] == ["Files: src/checkout/cart.ts.", "Last: The cart now survives a reload."]
    assert "Topics: topic0word" in lines[0] and sum(len(x) + 1 for x in lines) <= 150


def test_the_briefing_shows_no_announcement_as_the_last_conclusion():
    now = 1_800_000_000
    hot = {"id": "t1", "title": "checkout flow", "last_active": ais.iso(now - 60), "messages": []}
    lines = ais.where_work_stopped(hot, {}, [], {"last_conclusion": "Let me create a summary of the work."},
                                   now, "en", 400)
    assert not any(x.startswith("Last:") for x in lines)


def test_a_conclusion_skips_cheers_and_announcements():
    text = "Perfect! Let me create a summary of the completed work.\n\n## ✅ Checkout fixed\nThe cart survives a reload."
    assert ais.conclusion_of(text) == "Checkout fixed. The cart survives a reload."
    assert ais.conclusion_of("Let me check.") == "Let me check."  # nothing else to say
    # Nor one after what was done: "Let me commit" is no part of it.
    assert ais.conclusion_of("All tests pass. Let me commit and push this final fix.") == "All tests pass."
    # "Changes are in place." says something: no lead-in to a list as "Changes:" is.
    fixed = ("Changes are in place. Let me create a summary of all the changes:\n\n## Summary of Fixes\n\n"
             "### Issue 1: FEN recognition\n- Opus 4.5 is the default model")
    assert ais.conclusion_of(fixed) == \
        "Changes are in place. Issue 1: FEN recognition — Opus 4.5 is the default model."
    # Agreeing with the user or apologising says what the user said, not what was done.
    assert ais.conclusion_of("You're absolutely right! I apologize for the confusion. Column B stays PROVIDER_TYPE.") \
        == "Column B stays PROVIDER_TYPE."
    assert ais.conclusion_of("You're right - the payments API exists but has no UI yet. Let me check.") == \
        "The payments API exists but has no UI yet."
    assert ais.conclusion_of("Sorry for the delay, the export now streams rows.") == "The export now streams rows."
    assert ais.conclusion_of("Vous avez raison : le cache était vidé à chaque requête.") == \
        "Le cache était vidé à chaque requête."
    assert ais.conclusion_of("Tienes razón, el botón estaba fuera del formulario.") == "El botón estaba fuera del formulario."
    assert ais.conclusion_of("You are correct.") == "You are correct."  # nothing else to say
    # Nor does the agent saying it now understands: what it found does.
    assert ais.conclusion_of("Now I have the full picture. The extension reads .env.local at runtime.") == \
        "The extension reads .env.local at runtime."
    assert ais.conclusion_of("Now I can see the problem clearly: the worker never flushes.") == "The worker never flushes."
    assert ais.conclusion_of("Perfect! Now I can see the full workflow configuration. The header reads `$env`, "
                             "which the HTTP node never fills.") == "The header reads `$env`, which the HTTP node never fills."
    assert ais.conclusion_of("Ahora entiendo. El caché nunca se vaciaba.") == "El caché nunca se vaciaba."
    assert ais.conclusion_of("Je comprends mieux : le cache n'était jamais vidé.") == "Le cache n'était jamais vidé."
    # Nor "I've successfully": what was done is the rest of the sentence.
    assert ais.conclusion_of("Perfect! I've successfully fixed all the color contrast issues in the dark theme.") == \
        "Fixed all the color contrast issues in the dark theme."
    assert ais.conclusion_of("I have now successfully implemented the fix for issue #365.") == \
        "Implemented the fix for issue #365."
    assert ais.conclusion_of("I've successfully.") == "I've successfully."  # nothing else to say
    # A finding said with "I see" is kept.
    assert ais.conclusion_of("I see the download already uses the MarkUpGo API.") == \
        "I see the download already uses the MarkUpGo API."
    # A restatement of the request is not: the answer follows it.
    assert ais.conclusion_of("Based on the data provided, I can see you're asking about the last seven months on "
                             "the KiroViden project. You logged 212 hours in that period.") == \
        "You logged 212 hours in that period."
    assert ais.conclusion_of("I see you're running the `/agent-commit` command.\n\nWith no agent worktree left, "
                             "it will exit with an error about the workspace path.") == \
        "With no agent worktree left, it will exit with an error about the workspace path."
    assert ais.conclusion_of("Je vois que vous demandez un export CSV. L'export existe déjà dans reports.py.") == \
        "L'export existe déjà dans reports.py."
    assert ais.conclusion_of("Veo que estás usando Vite 5. El puerto 5173 ya está ocupado.") == \
        "El puerto 5173 ya está ocupado."
    assert ais.conclusion_of("I see you're running the tests.") == "I see you're running the tests."  # nothing else


def test_a_conclusion_skips_the_lead_in_to_its_list():
    text = ("All three agents are done. Here's the full summary:\n\n---\n\n## What was done\n\n"
            "### Audio Refactor (expo-av → expo-audio)\n- `useAudioPlayer.ts` rewritten with expo-audio")
    assert ais.conclusion_of(text) == \
        "All three agents are done. Audio Refactor (expo-av → expo-audio) — " \
        "`useAudioPlayer.ts` rewritten with expo-audio."
    assert ais.conclusion_of("Voici le résumé :\n- L'export est en streaming.") == "L'export est en streaming."
    assert ais.conclusion_of("Resumen de cambios:\n- La exportación ahora usa streaming.") == \
        "La exportación ahora usa streaming."
    # A colon followed by what was done is the conclusion itself; a lead-in alone stays.
    assert ais.conclusion_of("Summary: the export streams now.") == "Summary: the export streams now."
    assert ais.conclusion_of("Here's the summary:") == "Here's the summary."


def test_a_conclusion_never_ends_on_a_heading():
    """A heading that states nothing names the section under it: what the section says is the
    conclusion; under a heading of what is next, its first line is the next step."""
    text = ("Updated the fix plan. Here's a summary of the findings:\n\n## Root Cause Analysis\n\n"
            "The build uses the wrong BTstack fork.\n\n## Files Created\n- docs/fix.md")
    said = "Updated the fix plan. Root Cause Analysis — The build uses the wrong BTstack fork."
    assert ais.conclusion_of(text) == said
    # The briefing reads the conclusion kept at the end of the turn again: the heading stays with its sentence.
    assert ais.conclusion_of(ais.conclusion_of(text, ais.LAST_CONCLUSION_CHARS)) == said
    unrelated = "**No** - This is unrelated to the Bun migration.\n\n## Evidence\n\n### What We Changed\n- scripts"
    assert ais.conclusion_of(unrelated, 60) == "No - This is unrelated to the Bun migration."
    asked = "BatchData enriches the entities with contacts.\n\n## What is BatchData?\nA skip-trace API."
    assert ais.conclusion_of(asked) == "BatchData enriches the entities with contacts."
    for heading, step in (("Next Steps", "Add a progress bar"), ("Remaining work", "Add a progress bar"),
                          ("Prochaines étapes", "Ajouter une barre de progression"),
                          ("Próximos pasos", "Añadir una barra de progreso")):
        text = f"The export streams its rows now, tested on a 1 GB file.\n\n## {heading}\n1. {step}\n2. Ship it"
        assert ais.conclusion_of(text) == f"The export streams its rows now, tested on a 1 GB file. {step}."
    # A heading that states something stays a conclusion of its own.
    assert ais.conclusion_of("## ✅ Work Order 25 Complete!\n\nThe roster API is live.") == \
        "Work Order 25 Complete! The roster API is live."


def test_a_short_line_into_a_list_is_a_label_and_a_run_of_labels_keeps_the_last():
    """"**Evidence:**" names the lines under it as a heading does: never the last word of a
    conclusion. Of labels one above the other, the upper ones name what was a table or code."""
    unrelated = "**No** - This is unrelated to the Bun migration.\n\n**Evidence:**\n- `bun.lock` predates it"
    assert ais.conclusion_of(unrelated, 60) == "No - This is unrelated to the Bun migration."
    assert ais.conclusion_of(unrelated, 200) == \
        "No - This is unrelated to the Bun migration. Evidence: `bun.lock` predates it."
    resolved = ("## ✅ ISSUE RESOLVED!\n\n### Deep Investigation Results\n\n**Diagnostic Output:**\n```\nGOOD\n```\n\n"
                "### Root Cause Timeline\n\n1. **Primary Issue**: `--bun` flag caused incompatible sourcemaps")
    said = "ISSUE RESOLVED! Root Cause Timeline — Primary Issue: `--bun` flag caused incompatible sourcemaps."
    assert ais.conclusion_of(resolved) == said
    assert ais.conclusion_of(ais.conclusion_of(resolved, ais.LAST_CONCLUSION_CHARS)) == said
    # A heading over a label of its section keeps it: the label says what the section is.
    fixed = "Changes are in place.\n\n### Issue 1: Vision accuracy\n**Fixed by:**\n- Added Opus as a model option"
    assert ais.conclusion_of(fixed) == \
        "Changes are in place. Issue 1: Vision accuracy — Fixed by: Added Opus as a model option."
    assert ais.conclusion_of("The bundles are built.\n\n**Next:**\n- Deploy to the CDN\n- Tell QA") == \
        "The bundles are built. Next: Deploy to the CDN."


def test_a_conclusion_reads_through_list_numbers_and_tables():
    text = ("## The timeout error is likely caused by:\n\n1. **Large Excel files** - saving 4-7 MB with "
            "openpyxl takes long\n2. **A cloud drive** - writes time out")
    assert ais.conclusion_of(text) == \
        "The timeout error is likely caused by: Large Excel files - saving 4-7 MB with openpyxl takes long."
    assert ais.conclusion_of("Changes:\n\n1) Added retries.\n2) Logged failures.") == "Added retries. Logged failures."
    # A table's rows say what the sentence leading into it announced: a row a line, no header.
    table = "Both servers are now running:\n\n| Service | URL |\n|---|---|\n| **API** | http://localhost:3000 |\n" \
            "| Web (Vite) | http://localhost:5173 |\n\nThe API reads .env.local."
    assert ais.conclusion_of(table) == "Both servers are now running: API — http://localhost:3000."
    assert ais.conclusion_of(table, 200) == "Both servers are now running: API — http://localhost:3000. " \
                                            "Web (Vite) — http://localhost:5173. The API reads .env.local."
    # After a lead-in or a heading, the answer's own sentences come first; cells of a mark only go.
    compared = ("Here's the tradeoff:\n\n| Factor | WASM | Cloud |\n|--|--|--|\n| Offline | Yes | No |\n\n"
                "My recommendation: start with the cloud eval.")
    assert ais.conclusion_of(compared) == "My recommendation: start with the cloud eval."
    assert ais.conclusion_of("Done.\n\n## Files\n| | File | Change |\n|---|---|---|\n| ✅ | `a.py` | retries |") == \
        "`a.py` — retries."
    fenced = "The skill is complete.\n```\n.claude/skills/teamwork/\n```\nRun it with /teamwork."
    assert ais.conclusion_of(fenced, 200) == "The skill is complete. Run it with /teamwork."
    insight = "Fix complete. Three changes made:\n\n`★ Insight ─────────────────────`\nThe root cause was the prompt."
    assert ais.conclusion_of(insight) == "Fix complete. Three changes made: The root cause was the prompt."
    shown = "```\n✓ YAML parsed successfully\n  Complexity: simple\n```\nPreview (first 20 lines):\n---\n# Prompt"
    assert ais.conclusion_of(shown) == "YAML parsed successfully. Complexity: simple."
    # A sentence goes on through its inline code: "?" and ". " there end nothing.
    coded = ("Fixed: the card now uses `animate={isHovered ? 'hover' : 'rest'}` so the hover state stays in sync. "
             "The old `useAnimation()` controls are gone. Next: check it on mobile.")
    assert ais.conclusion_of(coded) == ("Fixed: the card now uses `animate={isHovered ? 'hover' : 'rest'}` so the hover "
                                        "state stays in sync. Next: check it on mobile.")
    assert ais.resolution_of(coded).endswith("stays in sync.")  # no question: it says what was fixed
    assert ais.split_sentences("Run `make ok? x`. Then?\nDone") == ["Run `make ok? x`.", "Then?", "Done"]


def test_the_briefing_names_the_last_task_before_any_thread_is_stored(project):
    store = ais.Store(str(project / ".ai"))
    store.ensure()
    store.update_heartbeat(last_task="Make the export stream rows instead of loading them all",
                           last_conclusion="The export now streams. Next: a progress bar.",
                           last_interaction=ais.iso(time.time() - 7200))  # its captures still journaled
    text = json.loads(ais.hook_start(store, {"source": "startup"}, None))["hookSpecificOutput"]["additionalContext"]
    assert text.splitlines()[1:] == ['Where the work stopped: "Make the export stream rows instead of…" (2 h ago).',
                                     "Last: The export now streams. Next: a progress bar."]


def test_the_briefing_waits_for_a_warm_daemon_to_apply_the_last_turn(project, monkeypatch):
    """A session that starts right after one ended: the last turn, still journaled, is applied
    before the briefing reads the store, so it does not depend on whether the daemon was done."""
    store = ais.Store(str(project / ".ai"))
    store.ensure()
    mem = ais.Memory(store.dir, embedder=ais.FakeEmbedder())
    asked = []

    def daemon(store, cmd, timeout=None, **args):  # a warm daemon's answer to a drain request
        asked.append(cmd)
        mem.drain()
        return {"ok": True}
    monkeypatch.setattr(ais, "request", daemon)
    ais.hook_start(store, {"source": "startup"}, None)
    assert asked == []  # nothing journaled: nothing to wait for
    store.inbox_append(ais.prepare_capture("Make the invoice exporter stream its CSV rows", "prompt", session_id="s1"))
    text = json.loads(ais.hook_start(store, {"source": "startup"}, None))["hookSpecificOutput"]["additionalContext"]
    assert asked == ["drain"] and not store.inbox_pending()
    assert 'Where the work stopped: "Make the invoice exporter' in text


def test_the_work_stopped_on_the_thread_of_the_last_task_not_of_the_last_capture(project):
    """The last capture (a file read, the agent's answer) may have joined another thread than
    the prompt that set the task: the briefing starts from the task's thread."""
    store = ais.Store(str(project / ".ai"))
    store.ensure()
    now = time.time()
    task = "Make the invoice exporter stream its CSV rows instead of loading them all"

    def thread(tid, title, ago, text, source):
        at = ais.iso(now - ago)
        return {"id": tid, "title": title, "status": "active", "last_active": at, "topics": [],
                "messages": [{"id": "m" + tid, "ts": at, "source": source, "text": text}]}
    threads = [thread("texport", "Make the invoice exporter stream its CSV…", 7260, task, "prompt"),
               thread("tread", "Read docs/deploy.md", 7200, "Read docs/deploy.md: the deploy steps", "tool:Read")]
    for t in threads:
        store.save_thread(t)
    store.write_digest(json.dumps({"threads": {t["id"]: {k: t[k] for k in ("title", "topics", "last_active")}
                                               for t in threads}}).encode())
    store.bump([t["id"] for t in threads], hot="tread")
    assert ais.task_thread(store, store.read_digest(), "")["id"] == "tread"  # no task: the hot thread
    store.update_heartbeat(last_task=task, last_interaction=ais.iso(now - 7200))
    text = json.loads(ais.hook_start(store, {"source": "startup"}, None))["hookSpecificOutput"]["additionalContext"]
    assert text.splitlines()[1].startswith('Where the work stopped: "Make the invoice exporter')
    assert text.splitlines()[-1] == "- Read docs/deploy.md"  # the other recent work
    # A later prompt too short to set a task ("/start-apps") started other work: it stays there.
    later = thread("tread", "/start-apps", 60, "/start-apps", "prompt")
    store.save_thread(later)
    assert ais.task_thread(store, store.read_digest(), task)["title"] == "/start-apps"


def test_the_last_conclusion_takes_the_room_the_other_work_cannot_use():
    now = 1_800_000_000
    at = ais.iso(now - 3600)
    hot = {"id": "t1", "title": "checkout flow", "last_active": at, "topics": ["checkout"], "messages": []}
    # Two other lines do not fit in BRIEF_OTHERS_ROOM: only the room of the one that does is kept.
    digest = {f"t{i}": {"title": f"work-stream {i} " + "with a long title " * 3, "topics": [f"alphabet{i}", f"betatron{i}"],
                        "last_active": ais.iso(now - 7200 - i)} for i in range(2, 5)}
    hb = {"last_conclusion": "The cart now persists in local storage and reloads keep it; " * 4}
    lines = ais.where_work_stopped(hot, digest, [], hb, now, "en", 250)
    last = next(x for x in lines if x.startswith("Last:"))
    assert len(last) > 80 and sum(len(x) + 1 for x in lines) <= 250
    assert lines[-2:] == ["Other recent work:", "- work-stream 2 with a long title with a… (alphabet2, betatron2)"]


def test_the_topics_give_way_to_the_first_sentence_of_the_last_conclusion():
    now = 1_800_000_000
    at = ais.iso(now - 3600)
    hot = {"id": "t1", "title": "run the monthly batch over all months", "last_active": at, "messages": [],
           "topics": ["dependencies", "pipeline", "mcao", "geocoding", "throttle", "addresses"],
           "files": {f"scripts/batch_process_{k}.py": {"at": at} for k in ("all", "months", "local")}}
    digest = {f"t{i}": {"title": f"column mapping of the tracker sheet {i}", "topics": ["provider", "county"],
                        "last_active": ais.iso(now - 7200 - i)} for i in range(2, 4)}
    said = ("The timeout error is likely caused by the MCAO lookups running one address at a time. "
            "Next: batch the lookups.")
    hb = {"last_task": "why does the batch time out after an hour?", "last_conclusion": said}
    lines = ais.where_work_stopped(hot, digest, [], hb, now, "en", 380)
    assert sum(len(x) + 1 for x in lines) <= 380
    # The first topics stay; cut to the room all six left, the conclusion lost its point (the cause).
    assert lines[0].endswith("(1 h ago). Topics: dependencies, pipeline, mcao."), lines
    assert lines[2].startswith("Last: The timeout error is likely caused by the MCAO lookups running one address "
                               "at a time"), lines
    assert lines[-3:] == ["Other recent work:", "- column mapping of the tracker sheet 2",
                          "- column mapping of the tracker sheet 3"]


def test_a_briefing_with_room_to_spare_says_more_of_the_last_conclusion():
    now = 1_800_000_000
    hot = {"id": "t1", "title": "ETL pipeline stages", "last_active": ais.iso(now - 3600), "messages": []}
    answer = ("All set. Here's the summary:\n## Stage 1: entity lookup\nInput: the owners sheet.\n"
              "Selenium searches each company on the registry and keeps the principals.\n"
              "## Stage 2: contacts\nThe principals go to the skip-trace API for phones and emails.\n"
              "Next: wire stage 2 into the monthly run.")
    lines = ais.where_work_stopped(hot, {}, [], {"last_conclusion": ais.conclusion_of(answer, ais.LAST_CONCLUSION_CHARS)},
                                   now, "en", 400)
    assert lines[1] == ("Last: All set. Stage 1: entity lookup — Input: the owners sheet. Selenium searches each "
                        "company on the registry and keeps the principals. Stage 2: contacts — The principals go to "
                        "the skip-trace API for phones and emails. Next: wire stage 2 into the monthly run.")
    # Without room to spare, the line is the conclusion's start and what is next.
    short = ais.where_work_stopped(hot, {}, [], {"last_conclusion": ais.conclusion_of(answer, ais.LAST_CONCLUSION_CHARS)},
                                   now, "en", 150)
    assert short[1] == "Last: All set. Stage 1: entity lookup — Input: the owners sheet. Next: wire stage 2 into…"
    assert sum(len(x) + 1 for x in short) <= 150


def test_the_task_is_not_repeated_when_it_is_the_title():
    now = 1_800_000_000
    hot = {"id": "t1", "title": "fix the login redirect loop on…", "last_active": ais.iso(now - 60), "messages": []}
    hb = {"last_task": "fix the login redirect loop on Safari when cookies are blocked"}
    assert "Task:" not in ais.where_work_stopped(hot, {}, [], hb, now, "en", 400)[0]
