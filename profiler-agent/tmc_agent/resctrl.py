"""The one place the agent reads and writes resctrl (Intel RDT / AMD PQoS through the kernel's
`/sys/fs/resctrl`): discovery reads its capabilities, the hardware profiler makes a group per
reference run, and `serve` makes a group per placed pod. All three go through `ResctrlFs`.

The kernel's interface: `info/L3/{cbm_mask,min_cbm_bits,num_closids}` say what CAT can do; the
root `schemata` lists the L3 cache domains (`L3:0=7ff;1=7ff`); a group is a directory made with
mkdir(2) and removed with rmdir(2); its `schemata` takes the mask for every domain and its
`tasks` takes one thread id per write(2).
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tmc_agent.hostpaths import read_text


class ResctrlError(RuntimeError):
    """resctrl cannot do what was asked; the message says what the kernel or the mask refused."""


@dataclass(frozen=True)
class CatInfo:
    """What L3 CAT offers (None where the file is missing)."""

    cbm_mask: str | None = None
    min_cbm_bits: int | None = None
    num_closids: int | None = None

    @property
    def ways(self) -> int | None:
        return bin(int(self.cbm_mask, 16)).count("1") if self.cbm_mask else None


@dataclass(frozen=True)
class TaskMove:
    moved: int = 0
    errors: list[str] = field(default_factory=list)


def contiguous(mask: int) -> bool:
    low = mask & -mask
    return mask != 0 and (mask + low) & mask == 0


def way_mask(ways: int, cbm_mask: str) -> str:
    """The lowest `ways` bits of the CAT capacity mask, in hex (masks must be contiguous)."""
    total = bin(int(cbm_mask, 16)).count("1")
    if not 1 <= ways <= total:
        raise ResctrlError(f"{ways} ways outside 1..{total}")
    return f"{(1 << ways) - 1:x}"


@dataclass
class ResctrlFs:
    root: Path

    # -- what the hardware offers -----------------------------------------------------------------

    def has_cat(self) -> bool:
        return (self.root / "info" / "L3").is_dir()

    def info(self) -> CatInfo:
        info = self.root / "info" / "L3"
        mask = read_text(info / "cbm_mask")
        min_bits = read_text(info / "min_cbm_bits")
        closids = read_text(info / "num_closids")
        return CatInfo(
            mask or None,
            int(min_bits) if min_bits and min_bits.isdigit() else None,
            int(closids) if closids and closids.isdigit() else None,
        )

    def cbm_mask(self) -> str:
        mask = self.info().cbm_mask
        if mask is None:
            raise ResctrlError(f"no {self.root}/info/L3/cbm_mask: no L3 CAT")
        return mask

    def cache_ids(self) -> list[str]:
        """The L3 domains, from the default group's schemata line `L3:0=7ff;1=7ff` (with CDP the
        plain `L3` line is absent: this agent does not split code and data)."""
        m = re.search(r"^\s*L3:(.+)$", read_text(self.root / "schemata") or "", re.M)
        if not m:
            raise ResctrlError("resctrl schemata has no L3 line: no L3 CAT")
        return [part.split("=")[0].strip() for part in m.group(1).split(";") if "=" in part]

    def schemata(self, mask: int) -> str:
        return "L3:" + ";".join(f"{i}={mask:x}" for i in self.cache_ids())

    def check_mask(self, mask: int) -> None:
        info = self.info()
        if info.cbm_mask is None:
            raise ResctrlError("no L3 CAT through resctrl on this node")
        cbm = int(info.cbm_mask, 16)
        min_bits = info.min_cbm_bits or 1
        if mask & ~cbm or not contiguous(mask) or mask.bit_count() < min_bits:
            raise ResctrlError(
                f"mask {mask:#x} is not a contiguous run of at least {min_bits} ways within "
                f"cbm_mask {cbm:#x}"
            )

    # -- groups -------------------------------------------------------------------------------------

    def group(self, name: str) -> Path:
        return self.root / name

    def groups(self, prefix: str) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            d.name for d in self.root.iterdir() if d.is_dir() and d.name.startswith(prefix)
        )

    def ensure_group(self, name: str, mask: int) -> tuple[Path, str]:
        """The group `name` holding `mask` on every L3 domain; writes only what differs, so a
        repeated call does nothing. Returns the group and its schemata line."""
        schemata = self.schemata(mask)
        group = self.group(name)
        try:
            group.mkdir(exist_ok=True)
        except OSError as exc:
            # ENOSPC: every CLOSID is taken (info/L3/num_closids).
            raise ResctrlError(f"cannot create {group.name}: {exc.strerror}") from exc
        # The kernel lists every domain back, one line per resource: compare the L3 line.
        current = next(
            (
                ln.strip()
                for ln in (read_text(group / "schemata") or "").splitlines()
                if ln.strip().startswith("L3:")
            ),
            None,
        )
        if current != schemata:
            try:
                (group / "schemata").write_text(schemata + "\n")
            except OSError as exc:
                raise ResctrlError(f"schemata {schemata!r} refused: {exc.strerror}") from exc
        return group, schemata

    def create(self, name: str, ways: int) -> Path:
        """A group with the lowest `ways` ways (the profiler's reference runs and way sweep)."""
        group, _ = self.ensure_group(name, int(way_mask(ways, self.cbm_mask()), 16))
        return group

    def tasks(self, name: str) -> set[int]:
        text = read_text(self.group(name) / "tasks") or ""
        return {int(t) for t in text.split() if t.isdigit()}

    def add_tasks(self, name: str, tids: Iterable[int]) -> TaskMove:
        """Move threads into the group (those already there are skipped)."""
        have = self.tasks(name)
        moved, errors = 0, []
        for tid in tids:
            if tid in have:
                continue
            try:
                # One id per write(2): the kernel's tasks file takes a single thread at a time.
                with (self.group(name) / "tasks").open("a") as f:
                    f.write(f"{tid}\n")
                moved += 1
            except OSError as exc:
                if exc.errno != errno.ESRCH:  # a thread that exited meanwhile is fine
                    errors.append(f"thread {tid}: {exc.strerror}")
        return TaskMove(moved, errors)

    def remove(self, name: str) -> bool:
        """Delete the group (its threads return to the default one); False if it was not there."""
        group = self.group(name)
        if not group.is_dir():
            return False
        try:
            group.rmdir()  # how resctrl deletes a group
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # A plain directory (not resctrl's kernfs, e.g. a copied or fake tree) keeps its
            # files: remove them first.
            for f in group.iterdir():
                if f.is_file():
                    f.unlink()
            group.rmdir()
        return True
