"""Auto-tagged call sites named from the ELF symbol table: function and file:line with debug
info, function and offset without it, the shim's own name for a stripped program."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from tmc_agent import shim

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("addr2line") is None,
    reason="needs gcc and binutils",
)

SOURCE = """\
#include <stdlib.h>
__attribute__((noinline)) void *make_table(size_t n) {
    void *p = malloc(n);
    return p ? p : malloc(1);
}
int main(void) { return make_table(64) == 0; }
"""


def build(tmp_path: Path, name: str, *flags: str) -> Path:
    (tmp_path / "t.c").write_text(SOURCE)
    exe = tmp_path / name
    subprocess.run(["gcc", "-O1", *flags, "-o", str(exe), str(tmp_path / "t.c")], check=True)
    return exe


def function_address(exe: Path, name: str) -> int:
    table = subprocess.run(["nm", str(exe)], capture_output=True, text=True, check=True).stdout
    return next(int(line.split()[0], 16) for line in table.splitlines() if line.endswith(name))


def test_a_site_in_a_program_with_debug_info_has_its_file_and_line(tmp_path: Path) -> None:
    exe = build(tmp_path, "debug", "-g", "-fPIE", "-pie")
    # A return address just inside the function: its name and a line of t.c.
    site = function_address(exe, "make_table") + 8
    names = shim.site_names(exe, {f"site:debug:0x{site:x}": site})
    (name,) = names.values()
    assert name.startswith("site:make_table(t.c:") and name.endswith(")"), name


def test_without_debug_info_the_function_and_offset(tmp_path: Path) -> None:
    exe = build(tmp_path, "nodebug", "-fPIE", "-pie")
    site = function_address(exe, "make_table") + 8
    assert shim.site_names(exe, {"site:nodebug:0x1": site}) == {
        "site:nodebug:0x1": f"site:make_table[0x{site:x}]"
    }


def test_a_stripped_program_keeps_the_shims_names(tmp_path: Path) -> None:
    exe = build(tmp_path, "stripped", "-s")
    assert shim.site_names(exe, {"site:stripped:0x1149": 0x1149}) == {}


def test_a_log_is_renamed_everywhere_a_tag_appears(tmp_path: Path) -> None:
    exe = build(tmp_path, "debug", "-g", "-fPIE", "-pie")
    site = function_address(exe, "make_table") + 8
    raw = f"site:debug:0x{site:x}"
    log = shim.parse_region_log(
        f"# tmc-regions v1 pid 7 exe {exe}\n"
        f"T 1 {raw}\nT 2 site:libc.so.6:0x2a1b0\n"
        "R 1 0x7f0000000000 0x7f0000200000 -1\nP 1 4096 2097152\n"
    )
    named = shim.symbolized(log)
    (new,) = {t for t in named.tags.values() if t.startswith("site:make_table(")}
    assert named.tags[2] == "site:libc.so.6:0x2a1b0"  # a library's site keeps its name
    assert named.regions[0].tag == new and named.peak_bytes == {new: 4096}
    assert named.mapped_bytes == {new: 2097152} and named.sizes() == {new: 4096}


def test_a_program_linked_at_a_fixed_address(tmp_path: Path) -> None:
    """The shim's offsets are from where the program is loaded: a non-PIE program's first page."""
    exe = build(tmp_path, "fixed", "-g", "-no-pie")
    site = function_address(exe, "make_table") + 8
    assert site > 0x400000  # linked at a fixed address
    (name,) = shim.site_names(exe, {"site:fixed:0x1": site - 0x400000}).values()
    assert name.startswith("site:make_table(t.c:"), name
