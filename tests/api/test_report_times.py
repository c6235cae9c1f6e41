"""A report's time is its own: the last commit that changed it, unless it differs from that
commit or was never committed (then its file's time). A clone's files all carry the clone's."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.routes.reports import committed_times

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(folder: Path, *args: str, when: str = "2026-01-02T03:04:05+00:00") -> None:
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    who = ["-c", "user.name=tmc", "-c", "user.email=tmc@localhost"]
    subprocess.run(["git", "-C", str(folder), *who, *args], check=True, env=env, timeout=60)


def test_commit_times_for_committed_reports_only(tmp_path: Path) -> None:
    reports = tmp_path / "docs" / "reports"
    (reports / "study").mkdir(parents=True)
    for name in ("a.md", "b.md", "study/c.md"):
        (reports / name).write_text(f"# {name}\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "first")
    (reports / "b.md").write_text("# b, again\n")
    git(tmp_path, "commit", "-q", "-am", "second", when="2026-02-03T04:05:06+00:00")
    (reports / "a.md").write_text("# a, edited since\n")
    (reports / "new.md").write_text("# new\n")
    times = committed_times(reports)
    assert times == {
        "b.md": datetime(2026, 2, 3, 4, 5, 6, tzinfo=UTC),
        "study/c.md": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    }


def test_a_folder_outside_git_has_no_commit_times(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# a\n")
    assert committed_times(tmp_path) == {}
