"""Section 2's small helpers (times, ids, shortening, ages, lazy regexes) and the two stdlib
embedders of section 5, tested directly."""
import json
import math
import os
import re
import subprocess
import sys

import pytest

import ai_smartness as ai
from support import ROOT

# ---- times ----


@pytest.mark.parametrize("value,seconds", [
    ("2024-02-03T04:05:06Z", 1706933106.0),
    ("2024-02-03T04:05:06+01:00", 1706933106.0 - 3600),
    ("2024-02-03T04:05:06", 1706933106.0),  # no zone: UTC, so imported history keeps its clock
    ("2024-02-03", 1706918400.0),
    ("1700000000", 1700000000.0),
    ("1.5e9", 1.5e9),
    (1700000000, 1700000000.0),
    (12.5, 12.5),
])
def test_parse_time_reads_iso_and_epoch(value, seconds):
    assert ai.parse_time(value) == seconds
    assert ai.parse_time(value) == seconds  # the memoized answer is the same


@pytest.mark.parametrize("value", ["", None, "yesterday", "2024-13-01"])
def test_parse_time_rejects_what_is_not_a_time_as_a_usage_error(value):
    with pytest.raises(ai.UsageError):
        ai.parse_time(value)


def test_iso_and_parse_time_round_trip():
    assert ai.iso(1700000000) == "2023-11-14T22:13:20Z"
    assert ai.parse_time(ai.iso(1700000000)) == 1700000000.0

# ---- ids ----


def test_new_ids_are_prefixed_valid_file_names_sorted_by_time_and_unique():
    # From 2001 to 2084 the time part has ten digits, so ids sort as their times do.
    ids = [ai.new_id("t", ts) for ts in (1e9, 1700000000, 1700000000.000001, 1700000000.5, 3e9)]
    assert all(i.startswith("t") and ai.valid_id(i) for i in ids)
    assert ids == sorted(ids) and len({len(i) for i in ids}) == 1
    same_time = {ai.new_id("m", 1700000000) for _ in range(200)}
    assert len(same_time) == 200  # the random tail separates captures of the same microsecond
    assert re.fullmatch(r"m[0-9a-z]{10}[0-9a-f]{6}", ai.new_id("m"))

# ---- text ----


@pytest.mark.parametrize("text,limit,out", [
    ("short", 10, "short"),
    ("  spaces   are\n\tfolded  ", 40, "spaces are folded"),
    ("the quick brown fox jumps over the lazy dog", 20, "the quick brown…"),  # cut at a word
    ("abcdefghijklmnop", 6, "abcde…"),  # one long word: cut inside it
    ("first, second, third", 16, "first, second…"),  # no dangling punctuation
    ("fixed the notes content… (24 October 2025)", 26, "fixed the notes content…"),  # cut again: one mark
    (None, 5, ""),
])
def test_shorten(text, limit, out):
    assert ai.shorten(text, limit) == out
    assert len(ai.shorten(text, limit)) <= limit


@pytest.mark.parametrize("seconds,en,fr", [
    (-5, "just now", "à l'instant"),
    (89, "just now", "à l'instant"),
    (90, "1 min", "1 min"),
    (59 * 60, "59 min", "59 min"),
    (3600, "1 h", "1 h"),
    (3600 + 15 * 60, "1 h 15 min", "1 h 15 min"),
    (47 * 3600, "47 h", "47 h"),
    (48 * 3600, "2 days", "2 jours"),
    (60 * 86400, "2 months", "2 mois"),
    (730 * 86400, "2 years", "2 ans"),
])
def test_human_age(seconds, en, fr):
    assert ai.human_age(seconds) == en
    assert ai.human_age(seconds, "fr") == fr


def test_lazy_re_compiles_on_first_use_only():
    rx = ai.LazyRe(r"a+b", re.I)
    assert rx.rx is None
    assert rx.match("AAb").group() == "AAb"
    compiled = rx.rx
    assert compiled.pattern == "a+b" and compiled.flags & re.I
    assert rx.sub("x", "ab-AB") == "x-x" and rx.rx is compiled

# ---- stdlib embedders ----


@pytest.mark.parametrize("kind", [ai.HashEmbedder, ai.FakeEmbedder])
def test_stdlib_embedders_give_unit_vectors_of_their_dimension(kind):
    emb = kind()
    a, b, same, empty = emb.embed(["JWT refresh token rotation", "CSS grid layout of the sidebar",
                                   "JWT refresh token rotation", ""])
    assert len(a) == emb.dim and math.isclose(math.sqrt(sum(x * x for x in a)), 1.0, rel_tol=1e-5)
    assert list(a) == list(same) and list(a) != list(b)
    assert not any(empty)
    assert ai.dot(a, emb.embed(["the refresh token of the JWT"])[0]) > ai.dot(a, b)


VECTORS = """
import json, sys
sys.path.insert(0, sys.argv[1])
import ai_smartness as ai
texts = ["JWT refresh token rotation", "Postgres migration locks"]
print(json.dumps({k.id: [list(v) for v in k().embed(texts)] for k in (ai.HashEmbedder, ai.FakeEmbedder)}))
"""


def test_stdlib_embedders_are_the_same_in_every_process():
    """Vectors are stored and compared across processes: they must not depend on the salted
    hash() (PYTHONHASHSEED) or on anything else of one process."""
    runs = [subprocess.run([sys.executable, "-c", VECTORS, str(ROOT)], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONHASHSEED=seed), check=True).stdout for seed in ("1", "2")]
    assert runs[0] == runs[1]
    here = {k.id: [list(v) for v in k().embed(["JWT refresh token rotation", "Postgres migration locks"])]
            for k in (ai.HashEmbedder, ai.FakeEmbedder)}
    assert json.loads(runs[0]) == json.loads(json.dumps(here))
    assert set(here) == {"hash-v2", "fake-v1"}
