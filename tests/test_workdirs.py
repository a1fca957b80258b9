"""`course_lib.envs.workdirs`: an episode's directory made, walked, measured and removed. What the agent can
do to it (locked, deep, unreadable trees, links out) is attacked in test_sandbox.py and test_attacks.py;
these are the plain behaviours, on real directories."""

from __future__ import annotations

import gc
import os
import stat

from course_lib.envs.workdirs import (
    ENTRY_BYTES,
    disk_usage,
    make_workdir,
    owned_workdir,
    remove_workdir,
    walk_tree,
)


def test_a_workdir_is_fresh_empty_and_private():
    first, second = make_workdir("test-wd-"), make_workdir("test-wd-")
    try:
        assert first != second and first.name.startswith("test-wd-")
        assert list(first.iterdir()) == [] and stat.S_IMODE(first.stat().st_mode) == 0o700
    finally:
        remove_workdir(first)
        remove_workdir(second)
    assert not first.exists() and not second.exists()
    remove_workdir(first)  # already gone: nothing to do


def test_removing_a_link_to_a_directory_removes_the_link_only(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    (tmp_path / "link").symlink_to(target)
    remove_workdir(tmp_path / "link")
    assert not (tmp_path / "link").is_symlink() and (target / "keep.txt").read_text() == "keep"


def test_an_owned_workdir_is_removed_once_by_its_remover_or_with_its_owner():
    class Owner:
        pass

    owner = Owner()
    path, remover = owned_workdir(owner, "test-owned-")
    (path / "file").write_text("x")
    remover()
    assert not path.exists() and not remover.alive
    remover()  # a second call does nothing

    dropped = Owner()
    path, remover = owned_workdir(dropped, "test-owned-")
    del dropped
    gc.collect()
    assert not path.exists() and not remover.alive


def test_walk_tree_lists_every_entry_sorted_without_following_links(tmp_path):
    (tmp_path / "b" / "deep").mkdir(parents=True)
    (tmp_path / "b" / "deep" / "f.txt").write_text("f")
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "skipme").mkdir()
    (tmp_path / "skipme" / "hidden").write_text("h")
    (tmp_path / "c").symlink_to(tmp_path / "b")
    walked = list(walk_tree(tmp_path, skip=("skipme",)))
    # each directory's entries sorted, then its subdirectories' (a link to a directory is not entered)
    assert [name for name, _ in walked] == ["a.txt", "b", "c", "b/deep", "b/deep/f.txt"]
    kinds = {name: st.st_mode for name, st in walked}
    assert stat.S_ISLNK(kinds["c"]) and stat.S_ISDIR(kinds["b"]) and stat.S_ISREG(kinds["a.txt"])


def test_disk_usage_counts_blocks_and_entries(tmp_path):
    empty = disk_usage(tmp_path)
    assert empty >= ENTRY_BYTES and empty % 512 == 0
    for i in range(3):
        (tmp_path / f"empty{i}").touch()
    assert disk_usage(tmp_path) == empty + 3 * ENTRY_BYTES  # an empty file holds no block, only its entry
    (tmp_path / "data").write_bytes(os.urandom(100_000))
    os.sync()
    assert disk_usage(tmp_path) >= empty + 4 * ENTRY_BYTES + 100_000
