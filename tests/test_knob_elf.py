"""ELF scanner on small shared libraries compiled here with gcc (SYNTHETIC C sources, real ELF)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from forensics.knobs import scan
from forensics.knobs.elf_scan import CANNOT_TELL, CONTAINS, NO_LITERAL, name_fragments, scan_elf_file

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc not installed: cannot build the test libraries")

# SYNTHETIC: reads a known name with getenv; neighbouring strings in .rodata.
LITERAL_C = r'''
#include <stdlib.h>
#include <stdio.h>
int knob_enabled(void) {
    const char *v = getenv("MY_LITERAL_KNOB");
    if (v && v[0] == '1') { puts("MY_LITERAL_KNOB is set: deterministic mode"); return 1; }
    return 0;
}
'''
# SYNTHETIC: builds the name at run time (snprintf "%s_%s" of "MY" and "KNOB"), then getenv.
BUILT_C = r'''
#include <stdio.h>
#include <stdlib.h>
static int read_knob(const char *prefix, const char *suffix) {
    char name[64];
    snprintf(name, sizeof name, "%s_%s", prefix, suffix);
    return getenv(name) != 0;
}
int knob_enabled(void) { return read_knob("MY", "KNOB"); }
'''
# SYNTHETIC: no environment access at all.
PLAIN_C = "int add(int a, int b) { return a + b; }\n"


def _build(tmp: Path, name: str, source: str) -> Path:
    src = tmp / f"{name}.c"
    src.write_text(source)
    out = tmp / f"lib{name}.so"
    subprocess.run([GCC, "-shared", "-fPIC", "-O1", "-o", str(out), str(src)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    if GCC is None:
        pytest.skip("gcc not installed: cannot build the test libraries")
    tmp = tmp_path_factory.mktemp("elf")
    return {n: _build(tmp, n, s) for n, s in (("literal", LITERAL_C), ("built", BUILT_C), ("plain", PLAIN_C))}


@needs_gcc
def test_literal_getenv_is_found_in_rodata_with_neighbours(libs):
    result, digest = scan_elf_file(str(libs["literal"]), "MY_LITERAL_KNOB")
    assert result.verdict == CONTAINS
    assert result.sections == [".rodata"]
    assert "getenv" in result.env_imports
    assert digest and len(digest) == 40
    by_string = {h.string: h for h in result.hits}
    assert set(by_string) == {"MY_LITERAL_KNOB", "MY_LITERAL_KNOB is set: deterministic mode"}
    assert by_string["MY_LITERAL_KNOB"].after[0] == "MY_LITERAL_KNOB is set: deterministic mode"


@needs_gcc
def test_name_built_at_run_time_is_cannot_tell(libs):
    result, _ = scan_elf_file(str(libs["built"]), "MY_KNOB")
    assert result.verdict == CANNOT_TELL
    assert result.hits == []
    assert "getenv" in result.env_imports
    assert {"MY", "KNOB", "%s_%s"} <= set(result.fragments)


@needs_gcc
def test_getenv_without_the_name_is_cannot_tell_never_does_not_read(libs):
    # reads MY_LITERAL_KNOB with getenv, holds no string MY_KNOB and no pieces of it: it could still
    # read MY_KNOB through a name built or hidden where a static scan cannot see
    other, _ = scan_elf_file(str(libs["literal"]), "MY_KNOB")
    assert other.verdict == CANNOT_TELL and other.fragments == [] and other.names == []
    assert "getenv" in other.env_imports
    assert other.family == ["MY_LITERAL_KNOB"]  # a same-prefix name it does spell out
    assert "no name pieces" in other.evidence() and "MY_LITERAL_KNOB" in other.evidence()


@needs_gcc
def test_no_environment_access_is_no_literal(libs):
    plain, _ = scan_elf_file(str(libs["plain"]), "MY_KNOB")
    assert plain.verdict == NO_LITERAL and plain.env_imports == [] and plain.hits == []


# SYNTHETIC: the name only inside a message (documentation), another variable read with getenv.
MESSAGE_C = r"""
#include <stdio.h>
#include <stdlib.h>
int hint(void) { puts("Run with MY_MSG_KNOB=1 to get more output"); return getenv("OTHER_VAR") != 0; }
"""
# SYNTHETIC: the same message in a library that cannot read the environment at all.
MESSAGE_ONLY_C = r"""
#include <stdio.h>
int hint(void) { return puts("Run with MY_MSG_KNOB=1 to get more output"); }
"""
# SYNTHETIC: a message ending with the name and a getenv of the name: the linker may merge the two
# strings (the name then being the tail of the message); either way the name ends a C string.
TAIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
int knob(void) { puts("unset MY_TAIL_KNOB"); return getenv("MY_TAIL_KNOB") != 0; }
"""


@needs_gcc
def test_name_inside_a_message_is_a_mention_not_a_getenv_string(tmp_path):
    msg, _ = scan_elf_file(str(_build(tmp_path, "msg", MESSAGE_C)), "MY_MSG_KNOB")
    assert msg.verdict == CANNOT_TELL  # imports getenv; the message cannot be its argument
    assert msg.names == [] and [h.terminal for h in msg.hits] == [False]
    assert "MY_MSG_KNOB=1" in msg.messages[0].string and "only inside text" in msg.evidence()
    only, _ = scan_elf_file(str(_build(tmp_path, "msgonly", MESSAGE_ONLY_C)), "MY_MSG_KNOB")
    assert only.verdict == NO_LITERAL and len(only.messages) == 1
    tail, _ = scan_elf_file(str(_build(tmp_path, "tail", TAIL_C)), "MY_TAIL_KNOB")
    assert tail.verdict == CONTAINS and tail.names


@needs_gcc
def test_tree_scan_reports_both_and_caches(libs, tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    root = libs["literal"].parent
    first = scan("MY_KNOB", [str(root)])
    verdicts = {Path(lib.file).name: lib.verdict for lib in first.libraries}
    assert verdicts == {"libbuilt.so": CANNOT_TELL, "libliteral.so": CANNOT_TELL}
    fragments = {Path(lib.file).name: lib.fragments for lib in first.libraries}
    assert fragments["libliteral.so"] == [] and {"MY", "KNOB", "%s_%s"} <= set(fragments["libbuilt.so"])
    assert first.counts["shared_libraries"] == 3 and first.counts["libraries_importing_getenv"] == 2
    again = scan("MY_KNOB", [str(root)])
    assert again.counts["cache_hits"] >= 3
    assert {Path(lib.file).name: lib.verdict for lib in again.libraries} == verdicts


def test_non_elf_and_truncated_files_do_not_crash(tmp_path):
    fake = tmp_path / "libfake.so"
    fake.write_bytes(b"not an elf file, but mentions MY_KNOB" + b"\0" * 64)
    result, _ = scan_elf_file(str(fake), "MY_KNOB")
    assert result.verdict == "not ELF"
    truncated = tmp_path / "libtrunc.so"
    truncated.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 57 + b"MY_KNOB\0")
    result, _ = scan_elf_file(str(truncated), "MY_KNOB")
    assert result.verdict == CONTAINS  # the name is there, outside any section the headers describe
    assert [h.section for h in result.hits] in (["(outside sections)"], ["?"])


def test_name_fragments_are_whole_components():
    prefixes, suffixes = name_fragments("NVTE_FUSED_ATTN")
    assert prefixes == ["NVTE", "NVTE_", "NVTE_FUSED", "NVTE_FUSED_"]
    assert suffixes == ["FUSED_ATTN", "_FUSED_ATTN", "ATTN", "_ATTN"]
    assert name_fragments("SINGLE") == ([], [])
