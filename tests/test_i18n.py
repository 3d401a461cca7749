"""The message catalogs: same keys and placeholders in every language, every key the module
asks for exists, and a configured language reaches the CLI output."""
import json
import re
import string

import pytest

import ai_smartness
from conftest import ROOT, SCRIPT, cli

I18N = ROOT / "i18n"
# Keys the module builds at run time: prefix -> the values appended to it.
DYNAMIC_PREFIXES = {"status_": ai_smartness.STATUSES, "op_": set(ai_smartness.FILE_OPS.values())}


def catalog(lang):
    return json.loads((I18N / f"{lang}.json").read_text(encoding="utf-8"))


def placeholders(text):
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


def used_keys():
    """Every key the source passes to tr(): literal keys, both arms of `"a" if c else "b"`,
    and prefix + value for keys built by concatenation."""
    src = SCRIPT.read_text(encoding="utf-8")
    keys, prefixes, unknown = set(), set(), []
    for match in re.finditer(r"(?<![\w.])tr\(", src):
        if src[match.start() - 4: match.start()] == "def ":
            continue
        # The first argument ends at the first top-level comma or closing parenthesis.
        depth, end = 0, match.end()
        while end < len(src):
            ch = src[end]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                break
            end += 1
        # Subscripts such as data["daemon"] in a condition are not keys.
        arg = re.sub(r"\[[^\]]*\]", "", src[match.end(): end])
        literals = re.findall(r"""(["'])([A-Za-z0-9_]+)\1(\s*\+)?""", arg)
        if not literals:
            unknown.append(arg)
        for _, key, plus in literals:
            (prefixes if plus else keys).add(key)
    return keys, prefixes, unknown


def test_catalogs_parse_and_share_keys_and_placeholders():
    en = catalog("en")
    assert en, "en.json is empty"
    for lang in ai_smartness.LANGUAGES:
        other = catalog(lang)
        assert set(other) == set(en), (lang, set(other) ^ set(en))
        for key, text in en.items():
            assert isinstance(other[key], str) and other[key].strip(), (lang, key)
            assert placeholders(other[key]) == placeholders(text), (lang, key, other[key])


@pytest.mark.parametrize("lang", ["fr", "es"])
def test_translations_keep_literals_and_are_translated(lang):
    en, other = catalog("en"), catalog(lang)
    for key, text in en.items():
        for literal in ("ai_smartness", ".ai/recall/<query>", ".ai/recall/"):
            if literal in text:
                assert literal in other[key], (lang, key)
    same = [k for k in en if en[k] == other[k] and re.search(r"[a-z]{4}", re.sub(r"\{\w+\}", "", en[k]))]
    assert not same, f"{lang}: untranslated {same}"


def test_every_key_used_by_the_module_exists():
    en = catalog("en")
    keys, prefixes, unknown = used_keys()
    assert not unknown, f"tr() with a key this test cannot see: {unknown}"
    assert len(keys) > 20  # the regex really found the calls
    assert not keys - set(en), keys - set(en)
    for prefix in prefixes:
        assert prefix in DYNAMIC_PREFIXES, f"dynamic key prefix {prefix!r}: list its values in DYNAMIC_PREFIXES"
        missing = [prefix + v for v in DYNAMIC_PREFIXES[prefix] if prefix + v not in en]
        assert not missing, missing


def test_tr_formats_and_falls_back():
    assert ai_smartness.tr("rules_removed", "fr", text="X") == "Règle supprimée : X"
    assert ai_smartness.tr("rules_removed", "xx", text="X") == "Rule removed: X"
    assert ai_smartness.tr("no_such_key", "fr") == "no_such_key"
    assert ai_smartness.tr("rules_removed", "es") == catalog("es")["rules_removed"]  # missing param: raw text


@pytest.mark.parametrize("lang,expected", [("fr", ["(aucun)", "fils", "ponts", "démon"]),
                                           ("es", ["(ninguno)", "hilos", "puentes", "demonio"])])
def test_cli_speaks_the_configured_language(project, lang, expected):
    data = project / ".ai"
    data.mkdir()
    (data / "config.json").write_text(json.dumps({"language": lang}))
    rules = cli("rules", project=project)
    assert rules.returncode == 0, rules.stderr
    status = cli("status", project=project)
    assert status.returncode == 0, status.stderr
    out = rules.stdout + status.stdout
    for word in expected:
        assert word in out, (word, out)
    assert "threads" not in status.stdout and "(none)" not in rules.stdout
