"""Texts written without their own fsync reach the disk before the listing that names them: each one when few."""

from __future__ import annotations

import os
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from bastion_agent.core import layout
from bastion_agent.core.layout import sync_to_disk, write_private


class SyncTests(unittest.TestCase):
    def setUp(self):
        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        self.folder = Path(holder.name)
        sync_to_disk()  # nothing left from another test
        self.fsynced: list[str] = []
        real_fsync = os.fsync

        def fsync(fd):
            self.fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        patches = [mock.patch.object(layout.os, "fsync", side_effect=fsync),
                   mock.patch.object(layout.os, "sync")]
        for patch in patches:
            self.addCleanup(patch.stop)
        self.fsync, self.sync = (patch.start() for patch in patches)

    def test_a_text_removed_before_the_sync_costs_nothing_and_stops_nothing(self):
        write_private(self.folder / "gone.txt", "x", durable=False)
        write_private(self.folder / "kept.txt", "y", durable=False)
        (self.folder / "gone.txt").unlink()
        sync_to_disk()
        self.assertEqual(self.fsynced, [str(self.folder / "kept.txt"), str(self.folder)])
        self.sync.assert_not_called()

    def test_a_few_texts_are_flushed_each_with_their_folder(self):
        names = [f"t{number}.txt" for number in range(3)]
        for name in names:
            write_private(self.folder / name, name, durable=False)
        sync_to_disk()
        self.assertEqual(self.fsynced, [str(self.folder / name) for name in names] + [str(self.folder)])
        self.sync.assert_not_called()
        self.fsynced.clear()
        sync_to_disk()  # flushed once: nothing is left to flush
        self.assertEqual(self.fsynced, [])

    def test_many_texts_are_flushed_by_one_sync_of_the_machine(self):
        for number in range(layout.SYNC_EACH_MAX + 1):
            write_private(self.folder / f"t{number}.txt", "z", durable=False)
        sync_to_disk()
        self.sync.assert_called_once_with()
        self.assertEqual(self.fsynced, [])


if __name__ == "__main__":
    unittest.main()
