"""The module as code: class sizes, own state declared, tunables named, the docstring and the
help true to the code."""
import ast
import doctest
import re
from collections import Counter

import pytest

import ai_smartness as ai
from support import SCRIPT

TREE = ast.parse(open(SCRIPT, encoding="utf-8").read())
MAX_CLASS_LINES = 400


def test_no_class_is_over_400_lines():
    big = {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(TREE)
           if isinstance(n, ast.ClassDef) and n.end_lineno - n.lineno + 1 > MAX_CLASS_LINES}
    assert not big, big


def test_no_name_is_defined_twice():
    """A module-level name or a method given twice: the later one silently replaces the first
    where the first was meant (the Grep capture's file-name pattern was so replaced by the shell's)."""
    def twice(body):
        names = Counter(n.name for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)))
        names.update(x.id for n in body if isinstance(n, ast.Assign) for t in n.targets for x in ast.walk(t)
                     if isinstance(x, ast.Name))
        return sorted(k for k, c in names.items() if c > 1)
    assert not twice(TREE.body)
    assert not {c.name: twice(c.body) for c in TREE.body if isinstance(c, ast.ClassDef) and twice(c.body)}


def test_no_method_reads_its_own_state_through_getattr_with_a_default():
    """Every attribute is declared in __init__: `getattr(self, "x", default)` hides one that is not."""
    found = [n.lineno for n in ast.walk(TREE)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
             and len(n.args) == 3 and isinstance(n.args[0], ast.Name) and n.args[0].id == "self"
             and isinstance(n.args[1], ast.Constant)]
    assert not found, f"getattr(self, '...', default) at lines {found}"


def _self_attrs_set(fn):
    return {e.attr for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for e in ast.walk(t)
            if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"}


@pytest.mark.parametrize("name", ["Daemon", "EmbedAhead", "Memo", "LazyRe", "Log"])
def test_the_state_of_a_class_is_declared_in_its_init(name):
    cls = next(n for n in TREE.body if isinstance(n, ast.ClassDef) and n.name == name)
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
    declared = _self_attrs_set(methods["__init__"]) if "__init__" in methods else set()
    late = {(attr, m) for m, fn in methods.items() if m != "__init__" for attr in _self_attrs_set(fn) - declared}
    assert not late, late


def _defs(names):
    return [n for n in ast.walk(TREE) if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in names]


# The daemon's code (not the client functions): every wait, timeout and size has a name.
DAEMON_CODE = ("Daemon", "EmbedAhead", "keep_heap_small", "embed_workers", "daemon_unreachable",
               "kill_daemon", "send_msg", "recv_msg", "run_hook", "_hook_process", "shell_answer", "daemon_wait",
               "main", "Cli", "do_daemon")
WAITS = {"sleep", "settimeout", "wait", "listen", "recv", "setswitchinterval", "mallopt", "setitimer"}
WAIT_FUNCTIONS = {"request", "wait_ready"}


def test_the_daemon_and_the_hook_shell_name_their_timeouts_and_sizes():
    inline = []
    for node in _defs(DAEMON_CODE):
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and (
                    isinstance(call.func, ast.Attribute) and call.func.attr in WAITS
                    or isinstance(call.func, ast.Name) and call.func.id in WAIT_FUNCTIONS):
                args = list(call.args) + [k.value for k in call.keywords]
                if any(isinstance(a, ast.Constant) and isinstance(a.value, (int, float)) and a.value  # 0: off
                       for a in args):
                    inline.append((node.name, call.lineno, ast.unparse(call.func)))
        for ret in ast.walk(node):  # a wait computed and returned (daemon_wait)
            if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Constant) \
                    and isinstance(ret.value.value, float):
                inline.append((node.name, ret.lineno, "return"))
        for arg in node.args.defaults if isinstance(node, ast.FunctionDef) else []:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, float):
                inline.append((node.name, arg.lineno, "default"))
    assert not inline, inline


def test_the_memo_answers_every_key_and_keeps_no_more_than_its_cap():
    calls = []
    memo = ai.Memo(lambda k: calls.append(k) or k * 2, 2)
    assert [memo[k] for k in (1, 2, 3, 1, 3)] == [2, 4, 6, 2, 6]
    assert len(memo) == 2 and calls == [1, 2, 3, 3]  # 3 came past the cap: computed each time
    assert ai.parse_time("2024-02-03") == ai.parse_time("2024-02-03") == 1706918400.0


def test_the_stem_docstring_is_true():
    assert "migrations" in ai.stem.__doc__ and "meet" in ai.stem.__doc__
    assert ai.stem("migrating") == ai.stem("migrated") != ai.stem("migrations")
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(ai.stem, "stem", globs={"stem": ai.stem}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 1
    assert "'migrations', 'migrating' and 'migrated' to meet" not in ai.stem.__doc__


# ---- the module docstring ----

def _synopsis():
    doc = ai.__doc__
    block = doc[doc.index("Usage:"):].split("\n\n")[1]  # after the command line, to a blank line
    return [line.strip() for line in block.splitlines() if line.strip()]


def _subparsers(parser):
    import argparse
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_command_of_the_synopsis_exists_and_every_command_is_listed():
    parsers = _subparsers(ai.build_parser())
    listed = set()
    for line in _synopsis():
        usage = re.split(r"\s{2,}", line)[0]  # the usage, before its description
        for alternative in usage.split(" | "):
            name = alternative.split()[0]
            assert name in parsers, f"the synopsis names {name!r}, which is no command"
            listed.add(name)
            for choice in re.findall(r"\[?([a-z]+(?:\|[a-z]+)+)\]?", alternative):
                words = choice.split("|")
                if name == "hook":
                    assert words == list(ai.HOOKS), words
                else:
                    action = next(a for a in parsers[name]._actions if a.choices)
                    assert set(words) <= set(action.choices), (name, words)
            for option in re.findall(r"--[a-z-]+", alternative):
                assert option in parsers[name]._option_string_actions, (name, option)
    assert listed == set(parsers), set(parsers) ^ listed


def test_the_synopsis_says_capture_at_takes_iso_or_epoch_seconds():
    capture = next(line for line in _synopsis() if line.startswith("capture"))
    assert "--at ISO|EPOCH" in capture
    assert ai.parse_time("1700000000") == 1700000000.0


def test_the_section_map_is_the_sections_of_the_module():
    sections = re.findall(r"^# ==== (\d+)\. (\w+)", open(SCRIPT, encoding="utf-8").read(), re.M)
    doc = ai.__doc__
    block = doc[doc.index("Sections"):doc.index("Exit codes")]
    mapped = re.findall(r"(\d+)\. (\w+)", block)
    assert mapped == sorted(sections, key=lambda s: int(s[0])) == sections


def test_the_lives_of_a_capture_and_a_prompt_name_functions_that_exist():
    doc = ai.__doc__
    for title in ("Life of a capture", "Life of a prompt"):
        assert title in doc
    names = set(re.findall(r"\b([A-Za-z_][A-Za-z_0-9]*(?:\.[a-z_]+)?)\(\)", doc))
    assert len(names) >= 8, names
    for name in names:
        obj = ai
        for part in name.split("."):
            obj = getattr(obj, part, None)
        assert callable(obj), name


# ---- hook --help ----

def test_hook_help_lists_the_hooks_of_the_registry_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        ai.main(["hook", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert exc.value.code == 0 and out.startswith("usage:")
    for h in ai.HOOKS.values():
        assert f"{h.name} ({h.event})" in out


def test_hook_without_a_name_is_a_usage_error_that_names_the_hooks(capsys):
    with pytest.raises(SystemExit) as exc:
        ai.main(["hook"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "required" in err and "|".join(ai.HOOKS) in err
