"""The README's list of the test environments, generated from the table (tests/proof checks it is current).

python -m scalar_scales_testkit.proof readme     rewrite the README's list from scripts/suites.toml
"""

from __future__ import annotations

from scalar_scales_testkit.proof.table import PROJECT, Table

__all__ = ["BEGIN", "END", "environment_list", "readme_block", "write"]

README = PROJECT / "README.md"
BEGIN = (
    "<!-- The test environments: generated from scripts/suites.toml (python -m scalar_scales_testkit.proof readme). -->"
)
END = "<!-- End of the test environments. -->"


def environment_list(table: Table) -> str:
    rows = [f"| `{environment.name}` | {environment.summary} |" for environment in table.environments.values()]
    return "\n".join(["| environment | what it holds |", "|---|---|", *rows])


def readme_block() -> str:
    text = README.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip()


def write(table: Table) -> bool:
    """Rewrite the README's list; return whether it changed."""
    text = README.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = f"{text[:start]}\n{environment_list(table)}\n{text[end:]}"
    README.write_text(new)
    return new != text
