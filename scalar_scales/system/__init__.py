"""What differs between operating systems, each with the path every OS has: the lock, file operations.

Each takes its OS's own way where the OS has it, and the portable way where
it does not; ``SCALAR_SCALES_PORTABLE=1`` asks for the portable way
everywhere, which is how the tests run on Linux what macOS and Windows run
(docs/migrate.md says what each OS guarantees).
"""

from scalar_scales.system.fileops import (
    copy_range,
    extended_attributes,
    no_follow,
    sync_folder,
    take_metadata,
    unkeepable,
    write_at,
)
from scalar_scales.system.lock import FolderLocked, folder_lock

__all__ = [
    "FolderLocked",
    "copy_range",
    "extended_attributes",
    "folder_lock",
    "no_follow",
    "sync_folder",
    "take_metadata",
    "unkeepable",
    "write_at",
]
