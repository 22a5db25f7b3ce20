"""Cloud Storage's glob syntax (services/cloud_storage_glob.py), by table: what each
pattern matches and does not, and the patterns that do not parse."""

from __future__ import annotations

import pytest

from eoclient.server_stub.services.cloud_storage_glob import GlobError, compile_glob, matches

CASES = [
    # pattern, matching names, names that do not match
    ("", ["a", "a/b/c.txt"], []),
    ("**.txt", ["a.txt", "x/y/a.txt"], ["a.txt.gz", "txt"]),
    ("*.txt", ["a.txt", ".txt"], ["x/a.txt", "a.txtx"]),
    ("logs/**", ["logs/a", "logs/x/y"], ["logs", "other/logs/a"]),
    ("a/**/b", ["a/b", "a/x/b", "a/x/y/b"], ["a/xb", "ab"]),
    ("**/*.csv", ["a.csv", "d/a.csv", "d/e/a.csv"], ["a.csv/x"]),
    ("file?.log", ["file1.log", "filea.log"], ["file.log", "file12.log", "file/.log"]),
    ("[abc]*", ["a", "bx", "c"], ["d", "x/a"]),
    ("[a-c]1", ["a1", "b1", "c1"], ["d1", "-1"]),
    ("[!a]1", ["b1", "z1"], ["a1", "/1"]),
    ("[^a]1", ["b1"], ["a1"]),
    ("*.{json,csv}", ["a.json", "b.csv"], ["c.txt", "d.jsoncsv"]),
    ("a\\*b", ["a*b"], ["axb"]),
    ("data.2024-01-01", ["data.2024-01-01"], ["dataX2024-01-01"]),
]


@pytest.mark.parametrize(("pattern", "yes", "no"), CASES)
def test_what_a_pattern_matches(pattern: str, yes: list[str], no: list[str]) -> None:
    for name in yes:
        assert matches(pattern, name), (pattern, name)
    for name in no:
        assert not matches(pattern, name), (pattern, name)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("a[b", "never closed"),
        ("a{b,c", "never closed"),
        ("a}b", "closes nothing"),
        ("a]", "closes nothing"),
        ("{}", "no alternative"),
        ("{a,{b}}", "cannot nest"),
        ("{a/b,c}", "cannot hold"),
        ("[z-a]", "reversed"),
        ("a\\", "escapes nothing"),
    ],
)
def test_patterns_that_do_not_parse(pattern: str, why: str) -> None:
    with pytest.raises(GlobError, match=why):
        compile_glob(pattern)
