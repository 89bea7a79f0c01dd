"""Python scanner: each read / writer / mention form, helpers, constants, pre-filter and cache.

Every fixture here is SYNTHETIC Python source written for the test (not instrument output).
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from forensics.knobs import scan
from forensics.knobs.python_scan import contains_name, scan_python_bytes

KNOB = "MY_KNOB"

# SYNTHETIC: one module exercising every form the scanner knows.
SYNTHETIC_ALL_FORMS = textwrap.dedent('''\
    """Module docstring that mentions MY_KNOB."""
    import os
    from os import environ, getenv as ge

    KNOB_VAR = "MY_KNOB"
    env = os.environ


    def env_flag(name, default="0"):
        return os.getenv(name, default) == "1"


    class Layer:
        var = 'MY_KNOB'

        def __init__(self):
            self.det = not bool(int(os.getenv("MY_KNOB", "1")))
            a = os.environ.get(KNOB_VAR)
            b = os.environ["MY_KNOB"]
            if "MY_KNOB" in os.environ:
                pass
            c = environ.get("MY_KNOB", 5)
            d = ge("MY_KNOB")
            e = env.get(self.var)
            f = env_flag("MY_KNOB", "1")


    os.environ["MY_KNOB"] = "1"  # a comment about MY_KNOB
    os.environ.setdefault("MY_KNOB", "0")
    os.putenv("MY_KNOB", "2")
    os.environ.update({"MY_KNOB": "3"})
    os.environ.update(MY_KNOB="4")
    del os.environ["MY_KNOB"]
    os.environ.pop("MY_KNOB", None)
    print(f"set MY_KNOB={1}")
    raise RuntimeError("please set MY_KNOB=1")
    something("MY_KNOB")
    child_env = {"MY_KNOB": "1"}
    MY_KNOB_LONGER = os.getenv("MY_KNOB_LONGER")
''')


@pytest.fixture()
def findings():
    r = scan_python_bytes(SYNTHETIC_ALL_FORMS.encode(), KNOB, "synthetic_all_forms.py")
    assert r.parse_error is None
    return {(f.line, f.kind, f.form): f for f in r.findings}


def _line(text: str) -> int:
    return next(i for i, line in enumerate(SYNTHETIC_ALL_FORMS.splitlines(), 1) if text in line)


@pytest.mark.parametrize("snippet, form, default", [
    ('os.getenv("MY_KNOB", "1")', "os.getenv", "'1'"),
    ("os.environ.get(KNOB_VAR)", "os.environ.get", "None"),
    ('os.environ["MY_KNOB"]', "os.environ[...]", "(none: KeyError if unset)"),
    ('"MY_KNOB" in os.environ', "in os.environ", None),
    ('environ.get("MY_KNOB", 5)', "os.environ.get", "5"),
    ('ge("MY_KNOB")', "os.getenv", "None"),
    ("env.get(self.var)", "os.environ.get", "None"),
    ('env_flag("MY_KNOB", "1")', "helper call", "'1'"),
])
def test_each_read_form(findings, snippet, form, default):
    line = _line(snippet)
    f = findings[(line, "read", form)]
    assert f.scope == "Layer.__init__"
    assert f.default == default
    assert snippet.split("(")[0].split("[")[0].strip('"') in f.feeds or form == "in os.environ"


def test_read_reports_expression_it_feeds_and_constants(findings):
    f = findings[(_line('os.getenv("MY_KNOB", "1")'), "read", "os.getenv")]
    assert f.feeds == "self.det = not bool(int(os.getenv('MY_KNOB', '1')))"
    via = findings[(_line("os.environ.get(KNOB_VAR)"), "read", "os.environ.get")]
    assert via.note == f"via constant KNOB_VAR (line {_line('KNOB_VAR = ')})"
    helper = findings[(_line('env_flag("MY_KNOB", "1")'), "read", "helper call")]
    assert f"def at line {_line('def env_flag')}" in helper.note


@pytest.mark.parametrize("snippet, form", [
    ('os.environ["MY_KNOB"] = "1"', "os.environ[...] ="),
    ('os.environ.setdefault("MY_KNOB", "0")', "os.environ.setdefault"),
    ('os.putenv("MY_KNOB", "2")', "os.putenv"),
    ('os.environ.update({"MY_KNOB": "3"})', "os.environ.update"),
    ('os.environ.update(MY_KNOB="4")', "os.environ.update"),
    ('del os.environ["MY_KNOB"]', "del os.environ[...]"),
    ('os.environ.pop("MY_KNOB", None)', "os.environ.pop"),
])
def test_each_writer_form_is_kept_apart_from_reads(findings, snippet, form):
    line = _line(snippet)
    assert (line, "write", form) in findings
    assert not any(k[0] == line and k[1] == "read" for k in findings)
    assert findings[(line, "write", form)].scope == "<module>"


@pytest.mark.parametrize("snippet, form", [
    ('"""Module docstring', "docstring"),
    ("# a comment about MY_KNOB", "comment"),
    ('print(f"set MY_KNOB', "string (f-string)"),
    ('raise RuntimeError("please set MY_KNOB=1")', "string"),
    ('KNOB_VAR = "MY_KNOB"', "name constant"),
    ('child_env = {"MY_KNOB": "1"}', "dict key"),
])
def test_documentation_mentions_are_not_reads(findings, snippet, form):
    line = _line(snippet)
    assert (line, "mention", form) in findings


def test_unknown_callee_is_unresolved_and_longer_names_do_not_count(findings):
    assert (_line('something("MY_KNOB")'), "unresolved", "argument to a call") in findings
    assert not any(k[0] == _line("MY_KNOB_LONGER =") for k in findings)


def test_prefilter_is_a_whole_word_search():
    assert contains_name(b"x = os.getenv('MY_KNOB')", KNOB)
    assert not contains_name(b"x = os.getenv('MY_KNOB_LONGER')", KNOB)
    assert not contains_name(b"NOT_MY_KNOB", KNOB)
    assert scan_python_bytes(b"import os\nos.getenv('OTHER')\n", KNOB, "x.py").findings == []


def test_import_os_path_binds_os():
    # SYNTHETIC: only `import os.path`, which binds the name `os`
    r = scan_python_bytes(b"import os.path\nX = os.getenv('MY_KNOB')\n", KNOB, "p.py")
    assert [(f.line, f.kind, f.form) for f in r.findings] == [(2, "read", "os.getenv")]


def test_unparsable_file_still_reports_its_lines():
    # SYNTHETIC: a Python 2 file (print statement) that mentions the knob
    r = scan_python_bytes(b"import os\nprint os.environ['MY_KNOB']\n", KNOB, "py2.py")
    assert r.parse_error and r.parse_error.startswith("SyntaxError")
    assert [(f.line, f.kind) for f in r.findings] == [(2, "mention")]


def _tree(tmp_path: Path) -> Path:
    """SYNTHETIC package: a helper in one module, its call site with the knob name in another."""
    pkg = tmp_path / "site" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "envutil.py").write_text("import os\n\ndef get_flag(var, default=False):\n    v = os.environ.get(var)\n    return default if v is None else v == '1'\n")
    (pkg / "layer.py").write_text("from .envutil import get_flag\n\nUSE = get_flag('MY_KNOB', True)\n")
    (pkg / "other.py").write_text("from pkg import envutil\n\nX = envutil.get_flag('MY_KNOB')\n")
    (pkg / "nothing.py").write_text("import os\nos.getenv('OTHER_KNOB')\n")
    return tmp_path / "site"


def test_helper_imported_from_another_module_is_a_read(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    result = scan(KNOB, [str(_tree(tmp_path))])
    reads = {(Path(f.file).name, f.line): f for f in result.findings("read")}
    assert set(reads) == {("layer.py", 3), ("other.py", 3)}
    assert "envutil.py:3" in reads[("layer.py", 3)].note
    assert {Path(r.file).name for r in result.python} == {"layer.py", "other.py"}


def test_cache_hits_then_rescans_a_changed_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    root = _tree(tmp_path)
    first = scan(KNOB, [str(root)])
    assert first.counts["cache_hits"] == 0 and first.counts["scanned"] == 5
    assert (tmp_path / "cache" / "knobs").is_dir()
    second = scan(KNOB, [str(root)])
    assert second.counts["cache_hits"] == 5 and second.counts["scanned"] == 0
    assert [f.line for f in second.findings("read")] == [f.line for f in first.findings("read")]
    layer = root / "pkg" / "layer.py"
    layer.write_text("from .envutil import get_flag\n\n\nUSE = get_flag('MY_KNOB', True)\n")
    os.utime(layer, ns=(1, 1))  # a new stat key even on coarse clocks
    third = scan(KNOB, [str(root)])
    assert third.counts["scanned"] == 1
    assert ("layer.py", 4) in {(Path(f.file).name, f.line) for f in third.findings("read")}
    uncached = scan(KNOB, [str(root)], use_cache=False)
    assert uncached.counts["cache_hits"] == 0


def test_missing_path_is_bad_input(tmp_path):
    from forensics.core.errors import BadInput

    with pytest.raises(BadInput) as e:
        scan(KNOB, [str(tmp_path / "nope")])
    assert "nope" in str(e.value)


def test_too_deeply_nested_file_falls_back_to_lines():
    # SYNTHETIC: an expression nested deeper than the parser allows
    src = b'X = "MY_KNOB" + ' + b" + ".join([b'"a"'] * 20000) + b"\n"
    r = scan_python_bytes(src, KNOB, "deep.py")
    assert r.parse_error and "Recursion" in r.parse_error
    assert [(f.line, f.kind) for f in r.findings] == [(1, "mention")]


# SYNTHETIC: the name on several lines of docstrings and multi-line strings (issue 13, knob item 4).
MULTILINE = textwrap.dedent('''\
    """Module docstring.

    Set MY_KNOB=1 for determinism.
    MY_KNOB=0 restores the default.
    """


    class Layer:
        """Class docstring.

        Attributes:
            det: read from MY_KNOB
        """

        def f(self):
            """One line about MY_KNOB.

            Another line about MY_KNOB.
            """
            msg = ("MY_KNOB first part "
                   "MY_KNOB second part")
            text = f"""header
            {1} MY_KNOB in an f-string
            and MY_KNOB again"""
            return msg, text
''')


def test_every_docstring_line_is_a_documentation_mention_never_other():
    result = scan_python_bytes(MULTILINE.encode(), KNOB, "multi.py")
    by_line = {f.line: (f.kind, f.form) for f in result.findings}
    lines = MULTILINE.splitlines()
    holding = [i for i, text in enumerate(lines, 1) if KNOB in text]
    assert sorted(by_line) == holding  # every line that holds the name, once
    assert all(kind == "mention" for kind, _ in by_line.values())
    forms = [by_line[i][1] for i in holding]
    assert forms == ["docstring", "docstring", "docstring", "docstring", "docstring",
                     "string", "string", "string (f-string)", "string (f-string)"]
    assert not any(form.startswith("other") for _, form in by_line.values())
    scopes = {f.line: f.scope for f in result.findings}
    assert scopes[holding[2]] == "Layer" and scopes[holding[3]] == "Layer.f"
