"""The test command's machinery: the table of environments and suites (``table``), how environments are built
(``environments``), the content-keyed cache (``cache``), the schedule over the cores (``schedule``), the
manifest of tests (``manifest``, and ``collected``, the pytest plugin that feeds it), and the run (``run``).

Standard library only (``collected`` imports pytest, in the test environments): scripts/test.sh runs it with
the machine's Python, before any environment exists.
"""

__all__ = ["cache", "collected", "environments", "manifest", "run", "schedule", "table"]
