"""The ``scalar-scales`` command: ``check``, ``rule`` and ``migrate``.

It never imports torch and has no dependency (``check hf://`` needs the
``hub`` extra). The demo, which needs llm-compressor, is the producer
package's own command (``scalar-scales-demo``).

``check`` prints text for people, or (``--output-format``) a versioned JSON
document, GitHub Actions annotations, or SARIF 2.1.0 (docs/check.md).

Exit codes (docs/check.md, docs/migrate.md), on every path:

- 0: done; ``check`` found no error (warnings may be present), or
  ``--exit-zero`` was given;
- 1: ``check`` found an error (with ``--strict``, also a warning), and
  ``--exit-zero`` was not given;
- 2: refused, and nothing changed: the command line, or a file, is wrong
  (``--exit-zero`` too); an unknown option or command is named with the
  nearest one, and an abbreviated option is refused;
- 3: ``migrate`` changed shards, then an error or an interrupt stopped it;
  the line says how many, and a rerun finishes;
- 130, 143: interrupted (SIGINT, SIGTERM) before anything changed.

Every refusal is one line on stderr. What the command prints cannot fail it
after a checkpoint changed: a name the terminal cannot encode is escaped,
and a reader that went away (``| head``) does not change the exit code.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, NoReturn

from scalar_scales.doctor import (
    RULES,
    SHOWN_PER_RULE,
    CheckReport,
    diagnose,
    reference_document,
    rule_reference,
    selected_codes,
)
from scalar_scales.doctor.report import (
    DEFAULT_FORMAT,
    FORMATS,
    FORMATS_TAKING,
    OUTPUT_FORMATS,
    PRINTING_OPTIONS,
    WIDTH,
    Context,
    formats_help,
)
from scalar_scales.environment import SwitchValueError, read_command_line_switches
from scalar_scales.errors import CheckpointError, Interrupted, StoppedAfterWriting, escaped
from scalar_scales.nvfp4 import MODELOPT
from scalar_scales.sources import HubShards, is_hub_address, open_checkpoint

if TYPE_CHECKING:
    from scalar_scales.migrate import MigrationReport

__all__ = ["finish_whatever_comes", "main"]

DESCRIPTION = (
    "Find what will break when a server loads an NVFP4 checkpoint, and fix per-tensor global scales of the "
    "wrong shape: NVFP4 artifacts that store *_global_scale as shape (1,) instead of 0-D (vLLM issue 43297)."
)


REFUSED = 2
STOPPED_AFTER_WRITING = 3


class _Parser(argparse.ArgumentParser):
    """A usage error is one line naming the command, and exit 2. No option is taken from an abbreviation
    (``--sh`` is not ``--show-all``): an option that a later release adds must not change what a script's
    abbreviation means."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(REFUSED, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def refuse_unknown(self, unknown: list[str]) -> None:
        """Refuse arguments no parser took, naming the first and, for an option, the nearest this command has."""
        first = unknown[0]
        if not first.startswith("-"):
            self.error(f"unrecognized argument {first!r}")
        options = [option for action in self._actions for option in action.option_strings]
        self.error(f"unrecognized argument {first}{_suggestion(first.partition('=')[0], options)}")


def _suggestion(given: str, known: Sequence[str]) -> str:
    """``; did you mean X?`` for the one known word ``given`` abbreviates, else the nearest, else nothing."""
    starting = [word for word in known if word.startswith(given)]
    near = starting if len(starting) == 1 else difflib.get_close_matches(given, known, n=1)
    return f"; did you mean {near[0]}?" if near else ""


def _build_parser() -> _Parser:
    parser = _Parser(prog="scalar-scales", description=DESCRIPTION)
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = commands.add_parser(
        "check",
        help="find what will go wrong when a server loads an NVFP4 checkpoint (local or hf://)",
        description="Apply every rule (docs/rules.md; scalar-scales rule CODE) to a checkpoint's headers, scale "
        "values and config: legacy (1,) scales and the marker (NV1), missing tensors (NV2), invalid values, the "
        "other producer's convention and fused partners with different scales (NV3), weight_scale shapes and "
        "dtypes (NV4), an index that disagrees with its shards (NV5), and what config.json declares against what "
        "the shards hold: ignored or untargeted NVFP4 modules, input scales of weight-only groups, KV-cache scales, "
        "undeclared NVFP4 (NV6). Exit 0 when no error is found (or with --exit-zero), 1 when one is (with --strict, "
        "also a warning), 2 when the checkpoint is unreadable or the command line is wrong.",
    )
    check.set_defaults(parser=check)
    check.add_argument("path", help="checkpoint folder, .safetensors file, or hf://ORG/NAME[@REVISION]")
    check.add_argument(
        "--select", action="append", default=[], metavar="CODE", help="only these rules (codes or prefixes: NV1, NV301)"
    )
    check.add_argument("--ignore", action="append", default=[], metavar="CODE", help="not these rules")
    check.add_argument("--output-format", choices=OUTPUT_FORMATS, default=None, help=formats_help())
    check.add_argument("--json", action="store_true", help="the same as --output-format json")
    check.add_argument(
        "--exit-zero", action="store_true", help="exit 0 even when errors are found (2 still means refused)"
    )
    check.add_argument("--strict", action="store_true", help="also exit 1 on warnings")
    check.add_argument(
        "--list",
        action="store_true",
        help=f"also list every per-tensor scale with its shape and value ({', '.join(FORMATS_TAKING['--list'])})",
    )
    check.add_argument(
        "--show-all", action="store_true", help=f"every finding, not the first {SHOWN_PER_RULE} of each rule"
    )
    check.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help=f"print only the summary line ({', '.join(FORMATS_TAKING['--quiet'])})",
    )
    check.add_argument("--include", action="append", default=[], metavar="GLOB", help="also these per-tensor scales")
    check.add_argument(
        "--staged",
        action="store_true",
        help="check the folder as git's staging area holds it, what the next commit holds (the pre-commit hook); "
        "nothing to check where the staged changes touch none of its files",
    )

    rule = commands.add_parser(
        "rule",
        help="print a rule's reference: what it finds, its severity, the effect vLLM was seen to have (docs/check-"
        "evidence.md), its fix, what it is applied to, its explanation and its example",
        description="Print the reference of each rule named (docs/rules.md is --all). Exit 2 for an unknown code.",
    )
    rule.set_defaults(parser=rule)
    rule.add_argument("codes", nargs="*", metavar="CODE", help="a rule's code, such as NV101")
    rule.add_argument("--all", action="store_true", help="every rule: the reference docs/rules.md holds")

    migrate = commands.add_parser(
        "migrate",
        help="rewrite shard headers so scales are 0-D (or back to legacy (1,)), no tensor data touched",
        description="Change NVFP4 global scales (and the per-tensor scales --include names) between (1,) and 0-D "
        "by editing each shard's header: in place where it keeps its length, else in a new file renamed over "
        "the shard (no tensor data changes either way), then set config.json's format_version. Crash-safe and "
        "idempotent.",
    )
    migrate.set_defaults(parser=migrate)
    migrate.add_argument("path", help="checkpoint folder or .safetensors file")
    migrate.add_argument(
        "--to",
        choices=["scalar", "legacy"],
        default="scalar",
        help="scalar: 0-D scales and format_version 2 (the default); legacy: (1,) scales and no format_version",
    )
    migrate.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    migrate.add_argument("--json", action="store_true", help="machine-readable output, no progress bar")
    migrate.add_argument(
        "--include", action="append", default=[], metavar="GLOB", help="also these per-tensor scales (any format)"
    )
    migrate.add_argument(
        "--materialize",
        action="store_true",
        help="replace shards that are links (Hugging Face cache) with edited real copies",
    )

    return parser


class _Version(argparse.Action):
    """``--version``, which reads the installed version only when asked (package metadata is slow to read)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        import scalar_scales

        print(f"scalar-scales {scalar_scales.__version__}")
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    """The command; ``argv`` None: this process's arguments, and, when interrupted, an exit that does not wait for
    requests still under way (a hung Hub server).

    A command of its own runs without the cyclic garbage collector: it builds
    hundreds of thousands of small objects (a large MoE's header entries and
    findings), none in a cycle, and the collections they would set off cost
    it about a third of its time (``benchmarks/check.py``). Reference
    counting still frees everything.
    """
    if argv is None:
        gc.disable()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from scalar_scales.start's, now that it can run
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # a text stream (not one a caller put there)
            stream.reconfigure(errors="backslashreplace")
    parser = _build_parser()
    arguments = sys.argv[1:] if argv is None else list(argv)
    _refuse_unknown_command(parser, arguments)
    args, unknown = parser.parse_known_args(arguments)
    if unknown:
        command_parser: _Parser = getattr(args, "parser", parser)
        command_parser.refuse_unknown(unknown)
    args.own_process = argv is None
    if args.command is None:
        parser.print_help()
        return REFUSED
    try:
        with _sigterm_raises():
            return _run(args)
    except (KeyboardInterrupt, Interrupted) as interrupt:
        number = interrupt.signal_number if isinstance(interrupt, Interrupted) else signal.SIGINT
        print(f"scalar-scales: interrupted ({signal.Signals(number).name}); nothing was changed", file=sys.stderr)
        code = 128 + number
        if argv is None:
            sys.stderr.flush()
            os._exit(code)
        return code


def _refuse_unknown_command(parser: argparse.ArgumentParser, arguments: list[str]) -> None:
    """Refuse a command that is not one, naming the nearest (``chek``: did you mean check?). The command is the
    first argument that is not an option: the command line's own options take no value."""
    commands = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    names = list(commands[0].choices) if commands else []
    given = next((argument for argument in arguments if not argument.startswith("-")), None)
    if given is not None and given not in names:
        suggestion = _suggestion(given, names) or f"; the commands are {', '.join(names)}"
        parser.error(f"unknown command {given!r}{suggestion}")


def _run(args: argparse.Namespace) -> int:
    try:
        read_command_line_switches()
        if args.command == "check":
            return _check(args)
        if args.command == "rule":
            return _rule(args)
        return _migrate(args)
    except (CheckpointError, SwitchValueError) as exc:
        _say_error(str(exc))
        return REFUSED
    except StoppedAfterWriting as exc:
        _say_error(str(exc))
        return STOPPED_AFTER_WRITING
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        _say_error(f"{where}{exc.strerror or exc}")
        return REFUSED


def _say_error(message: str) -> None:
    """The one line of an error, on stderr; a stderr that cannot take it (full, gone) does not change the exit
    code, which is then all that tells how the command ended."""
    with suppress(OSError):
        print(escaped(f"scalar-scales: error: {message}"), file=sys.stderr, flush=True)


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM ends the run as Ctrl-C does, where this is the main thread (a signal handler can be set only there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(number: int, frame: object) -> None:
        raise Interrupted(number)

    previous = signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is raise_interrupted:  # not ignored since: see finish_whatever_comes
            signal.signal(signal.SIGTERM, previous)


def finish_whatever_comes() -> None:
    """From here the command finishes, and its exit code and last line say how it ended: SIGINT and SIGTERM are
    caught and do nothing. Only a command in its own process does this (a caller's handlers are the caller's)."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _ignored)


def _ignored(number: int, frame: object) -> None:
    """A handler that does nothing: unlike SIG_IGN, a signal already received and not yet handled lands here."""


def _emit(text: str) -> None:
    """Print the command's output; a reader that went away does not fail the command (and cannot be told)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _reader_gone()


def _emit_report(report: CheckReport, output_format: str, context: Context) -> None:
    """Write the report as its format writes it, in pieces as it goes; a reader that went away does not fail the
    command (and cannot be told)."""
    try:
        FORMATS[output_format].emit(sys.stdout, report, context)
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone()


def _reader_gone() -> None:
    """Standard output's reader went away: what is still written, and the interpreter's last flush, go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _emit_lines(lines: list[str]) -> None:
    """Print lines of text output, each escaped: a name from a checkpoint or a server is printed as it is unless
    it holds a character a terminal acts on."""
    _emit("\n".join(map(escaped, lines)))


def _check(args: argparse.Namespace) -> int:
    try:
        codes = selected_codes(args.select, args.ignore)
    except ValueError as exc:
        args.parser.error(str(exc))
    output_format: str = args.output_format or ("json" if args.json else DEFAULT_FORMAT)
    if args.json and output_format != "json":
        args.parser.error(f"--json is --output-format json; it cannot be given with --output-format {output_format}")
    for option in PRINTING_OPTIONS:
        given = getattr(args, option.removeprefix("--").replace("-", "_"))
        if given and output_format not in (formats := FORMATS_TAKING[option]):
            args.parser.error(
                f"{option} is for --output-format {' or '.join(formats)}; it cannot be given with --output-format "
                f"{output_format}"
            )
    if args.quiet and (args.list or args.show_all):
        args.parser.error(
            f"--quiet prints the summary line alone; it cannot be given with {'--list' if args.list else '--show-all'}"
        )
    if args.staged:
        from scalar_scales.sources.staged import open_staged  # git's reader, which a check of a folder never needs

        opened = open_staged(args.path)
    else:
        opened = open_checkpoint(args.path)
    if opened is None:
        _emit_lines([f"{args.path}: nothing to check: the staged changes touch none of its files"])
        return 0
    fetched = opened.source if isinstance(opened.source, HubShards) else None
    diagnosis = diagnose(opened, include=args.include, codes=codes)
    report = CheckReport(diagnosis, args.strict, fetched, exit_zero=args.exit_zero, include=tuple(args.include))
    width = min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
    context = Context(show_all=args.show_all, with_scales=args.list, quiet=args.quiet, width=width)
    _emit_report(report, output_format, context)
    return report.exit_code


def _rule(args: argparse.Namespace) -> int:
    if args.all == bool(args.codes):
        args.parser.error("name one or more rule codes, or --all")
    if args.all:
        _emit(reference_document().rstrip("\n"))
        return 0
    codes = [code.upper() for code in args.codes]
    if unknown := [code for code in codes if code not in RULES]:
        args.parser.error(f"unknown rule code {unknown[0]!r}; the rules are {', '.join(RULES)}")
    _emit("\n".join(rule_reference(RULES[code]) for code in codes).rstrip("\n"))
    return 0


def _migrate(args: argparse.Namespace) -> int:
    if is_hub_address(args.path):
        raise CheckpointError(
            args.path,
            "migrate edits files in place, so it needs a local copy (hf download ORG/NAME --local-dir DIR); "
            "check reads hf:// addresses",
        )
    from scalar_scales.migrate import migrate_checkpoint

    show_progress = not args.json and sys.stderr.isatty()
    report = migrate_checkpoint(
        args.path,
        to=args.to,
        dry_run=args.dry_run,
        include=args.include,
        materialize=args.materialize,
        progress=_progress_bar if show_progress else None,
        announce=None if args.json else _announce,
        finishing=finish_whatever_comes if args.own_process else None,
    )
    if args.own_process:
        finish_whatever_comes()
    try:  # the migration is done: what is left cannot change that, or its exit code
        if show_progress and report.edits:
            _progress_bar_ended()
        if args.json:
            _emit(json.dumps(report.as_dict(), indent=2))
        else:
            _emit_lines([_migration_summary(report)])
    except (KeyboardInterrupt, Interrupted):
        pass
    except OSError as exc:
        if report.dry_run or not report.changed:
            raise _stdout_refused(exc) from None
        _say_report_lost(report, exc)
    return 0


def _stdout_refused(error: OSError) -> CheckpointError:
    """A report that could not be written while nothing had changed (before the first write, or with nothing to
    write): a refusal, naming standard output, since no file is to blame."""
    return CheckpointError("standard output", f"cannot write: {error.strerror or error}; nothing was changed")


def _say_report_lost(report: MigrationReport, error: OSError) -> None:
    """Say on stderr what a finished migration changed, since its report could not be written (stdout full, say);
    the exit code stays 0. A stderr that fails too leaves nothing to say it on."""
    lost = f"the report could not be written to standard output: {error.strerror or error}"
    with suppress(OSError):
        print(escaped(f"scalar-scales: {_migration_summary(report)}; {lost}"), file=sys.stderr, flush=True)


def _announce(report: MigrationReport) -> None:
    """Say, before anything is written, what the change does for each consumer the round trip observed."""
    if lines := report.announcement():
        try:
            _emit_lines(lines)
        except OSError as exc:  # before anything is written
            raise _stdout_refused(exc) from None


def _migration_summary(report: MigrationReport) -> str:
    target = "0-D" if report.to == "scalar" else "(1,)"
    if report.producer == MODELOPT and not report.changed:
        return (
            f"{report.checkpoint.root}: nothing to migrate: a ModelOpt NVFP4 checkpoint, whose "
            f"{report.scales_total} scales are 0-D, as ModelOpt writes them"
        )
    if not report.changed:
        return f"{report.checkpoint.root}: nothing to change: all {report.scales_total} scales are already {target}" + (
            f" and config.json declares format_version {report.format_version_after}"
            if report.format_version_after is not None
            else ""
        )
    verb = "would change" if report.dry_run else "changed"
    line = (
        f"{report.checkpoint.root}: {verb} {report.scales_changed} of {report.scales_total} scales to {target} "
        f"in {len(report.edits)} of {len(report.checkpoint.files)} shards"
    )
    growing = [edit for edit in report.edits if not edit.in_place]
    if report.dry_run:
        if growing:
            line += f" ({len(growing)} need a longer header and would be rewritten to new files)"
    elif report.rewritten:
        in_place = len(report.edits) - len(report.rewritten)
        line += f" ({len(report.rewritten)} rewritten to new files" + (f", {in_place} in place)" if in_place else ")")
    elif report.edits:
        line += " in place (header only)"
    if report.config_changed:
        before, after = (
            "absent" if v is None else v for v in (report.format_version_before, report.format_version_after)
        )
        line += f"; config.json format_version {before} -> {after}"
    elif report.producer == MODELOPT:
        line += "; ModelOpt's configs have no marker to update"
    elif report.checkpoint.config is None:
        line += "; no config.json to update"
    return line


def _progress_bar(done: int, total: int) -> None:
    """Show how many shards are done. It is shown while shards are written, so a terminal that went away (EIO
    once it hung up) cannot stop the migration: the bar is then not shown."""
    width = 30
    filled = width * done // total
    with suppress(OSError):
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} shards", end="", file=sys.stderr, flush=True)


def _progress_bar_ended() -> None:
    with suppress(OSError):
        print(file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
