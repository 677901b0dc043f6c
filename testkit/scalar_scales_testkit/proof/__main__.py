"""``python -m scalar_scales_testkit.proof run|envs|readme ...``: the test command, the environments, and the
README's list of them."""

from __future__ import annotations

import sys

from scalar_scales_testkit.proof import environments, run
from scalar_scales_testkit.proof.table import TableError, load


def _envs(names: list[str]) -> int:
    table = load()
    if not names or names == ["--list"]:
        for environment in table.environments.values():
            print(f"{environment.name:<16} {environment.summary}")
        return 0
    for name in names:
        if name not in table.environments:
            known = ", ".join(table.environments)
            print(f"envs: unknown environment '{name}' (known: {known})", file=sys.stderr)
            return 2
    for name in names:
        lines: list[str] = []
        try:
            path, _ = environments.build(table, name, lines)
        except environments.EnvironmentError_ as error:
            print("\n".join(lines), file=sys.stderr)
            print(f"envs: {name}: {error}", file=sys.stderr)
            return 1
        for line in lines:
            if line.startswith("envs: "):
                print(line, file=sys.stderr)
        print(path)
    return 0


def main() -> int:
    command, *rest = sys.argv[1:] or ["run"]
    try:
        if command == "run":
            return run.main(rest)
        if command == "envs":
            return _envs(rest)
        if command == "readme":
            from scalar_scales_testkit.proof.readme import write

            print("README.md: list of environments " + ("rewritten" if write(load()) else "already current"))
            return 0
    except TableError as error:
        print(f"scripts/suites.toml: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: every suite still running was ended", file=sys.stderr)
        return 130
    print("usage: python -m scalar_scales_testkit.proof run|envs ...", file=sys.stderr)
    return 2


sys.exit(main())
