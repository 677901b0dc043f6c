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
  ``--exit-zero`` was not given; ``migrate --check`` would change something;
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
import gc
import io
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from scalar_scales.api import check_opened
from scalar_scales.doctor import (
    RULES,
    SHOWN_PER_RULE,
    CheckReport,
    reference_document,
    rule_data,
    rule_reference,
)
from scalar_scales.doctor.report import (
    FORMATS,
    FORMATS_TAKING,
    OUTPUT_FORMATS,
    PRINTING_OPTIONS,
    WIDTH,
    Context,
    Writer,
    formats_help,
)
from scalar_scales.doctor.settings import ConfigError, Settings, find_config, read_config, resolve
from scalar_scales.environment import SwitchValueError, others_setting, read_command_line_switches
from scalar_scales.errors import CheckpointError, Interrupted, StoppedAfterWriting, escaped
from scalar_scales.nvfp4 import MODELOPT
from scalar_scales.sources import CONFIG_NAME, INDEX_NAMES, MODELOPT_CONFIG_NAME, is_hub_address, open_checkpoint
from scalar_scales.sources.hub_address import hub_author

if TYPE_CHECKING:
    from scalar_scales.migration import MigrationReport

__all__ = ["finish_whatever_comes", "main"]

DESCRIPTION = (
    "Find what will break when a server loads an NVFP4 checkpoint, and fix per-tensor global scales of the "
    "wrong shape: NVFP4 artifacts that store *_global_scale as shape (1,) instead of 0-D (vLLM issue 43297)."
)


REFUSED = 2
STOPPED_AFTER_WRITING = 3

_NOT_FREED: list[object] = []
"""What a command in its own process leaves to the process's end, which is ``os._exit`` (:mod:`scalar_scales.start`):
a large checkpoint's report holds hundreds of thousands of objects, and freeing them one by one just before the
process ends took 4% of a check's time (benchmarks/check.md)."""


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
    """``; did you mean X?`` for the known words ``given`` abbreviates (``X or Y`` where it abbreviates several),
    else the nearest, else nothing."""
    starting = sorted({word for word in known if word.startswith(given)})
    near = starting
    if not near:
        import difflib  # only for a word no known one starts with

        near = difflib.get_close_matches(given, known, n=1)
    return f"; did you mean {' or '.join(near)}?" if near else ""


def _build_parser() -> _Parser:
    parser = _Parser(prog="scalar-scales", description=DESCRIPTION)
    parser.add_argument("-V", "--version", action=_Version, nargs=0, help="print the version and exit")
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
        "also a warning, an engine observed not to load the checkpoint, or nothing checked), 2 when the checkpoint "
        "is unreadable, a configuration file is wrong, a report file cannot be written or the command line is "
        "wrong. Settings come from the nearest scalar-scales.toml, or pyproject.toml with [tool.scalar-scales], "
        "upward from the checkpoint, under the command line's (--show-settings prints them).",
    )
    check.set_defaults(parser=check)
    check.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="checkpoint folder, .safetensors file, hf://ORG/NAME[@REVISION] (or its page's address, "
        "https://huggingface.co/ORG/NAME[/tree/REVISION]), or hf://ORG (each model the Hub lists of it); several "
        "are checked one after another, into one output, and the command exits with the worst exit code (2 where "
        "one was refused)",
    )
    check.add_argument(
        "--select", action="append", default=[], metavar="CODE", help="only these rules (codes or prefixes: NV1, NV301)"
    )
    check.add_argument(
        "--extend-select",
        action="append",
        default=[],
        metavar="CODE",
        help="these rules as well as those the configuration file selects",
    )
    check.add_argument("--ignore", action="append", default=[], metavar="CODE", help="not these rules")
    check.add_argument("--output-format", choices=OUTPUT_FORMATS, default=None, help=formats_help())
    check.add_argument(
        "--config",
        metavar="PATH",
        help="the configuration file to read (a scalar-scales.toml, or a pyproject.toml's [tool.scalar-scales]), "
        "instead of the nearest one found upward from PATH",
    )
    check.add_argument("--isolated", action="store_true", help="read no configuration file")
    check.add_argument(
        "--show-settings",
        action="store_true",
        help="print the settings the check would run with, and the file each came from; check nothing",
    )
    check.add_argument("--json", action="store_true", help="the same as --output-format json")
    check.add_argument(
        "--exit-zero", action="store_true", help="exit 0 even when errors are found (2 still means refused)"
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="also exit 1 on warnings, on an engine observed not to load the checkpoint, and where nothing was checked",
    )
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
        help="print the findings, and the engines observed not to load the checkpoint, and nothing else: no "
        f"heading, no summary line, as ruff's --quiet ({', '.join(FORMATS_TAKING['--quiet'])})",
    )
    check.add_argument(
        "-s",
        "--silent",
        action="store_true",
        help="print nothing; the exit code says what was found (a refusal's one line still goes to standard error, "
        "and --output-file is still written)",
    )
    check.add_argument(
        "--statistics",
        action="store_true",
        help="print a count per rule (count, code, name) instead of the findings, as ruff's --statistics "
        f"({', '.join(FORMATS_TAKING['--statistics'])})",
    )
    check.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the severities in the text: auto (the default) where standard output is a terminal, unless "
        "NO_COLOR is set, or where FORCE_COLOR is set",
    )
    check.add_argument(
        "-o",
        "--output-file",
        metavar="FILE",
        help="write the report to FILE instead of standard output: a new file, or one that replaces FILE whole "
        "(a link is replaced, not written through)",
    )
    for name in OUTPUT_FORMATS:
        check.add_argument(
            f"--{name}-output",
            metavar="FILE",
            help=f"also write the whole report as --output-format {name} writes it to FILE, from the same check "
            "(as semgrep's --FORMAT-output), with --list and --show-all where it takes them, not --quiet or "
            "--statistics; FILE is replaced as --output-file replaces it",
        )
    check.add_argument("--include", action="append", default=[], metavar="GLOB", help="also these per-tensor scales")
    check.add_argument(
        "--staged",
        action="store_true",
        help="check the folder as git's staging area holds it, what the next commit holds (the pre-commit hook); "
        "nothing to check where staged changes touch none of its files; with no staged change at all (pre-commit "
        "run outside a commit), what is staged is the last commit, and that is checked",
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
    rule.add_argument(
        "--output-format",
        choices=("text", "json"),
        default="text",
        help="text (the default: the reference, in Markdown) or json (each rule's data: an object for one rule, a "
        "list for several or --all)",
    )

    migrate = commands.add_parser(
        "migrate",
        help="rewrite shard headers so scales are 0-D (or back to legacy (1,)), no tensor data touched",
        description="Change NVFP4 global scales (and the per-tensor scales --include names) between (1,) and 0-D "
        "by editing each shard's header: in place where it keeps its length, else in a new file renamed over "
        "the shard (no tensor data changes either way), then set config.json's format_version. A ModelOpt "
        "checkpoint's scales go to 0-D only, its configs unchanged (they have no marker); --to legacy and --include "
        "refuse it. Crash-safe and idempotent. --check changes nothing and exits 1 where it would change something.",
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
    migrate.add_argument(
        "--check",
        action="store_true",
        help="say what would change and change nothing, as --dry-run, then exit 1 if anything would change, 0 if "
        "nothing would (as ruff format --check)",
    )
    migrate.add_argument("--json", action="store_true", help="machine-readable output, no progress bar")
    migrate.add_argument(
        "--include", action="append", default=[], metavar="GLOB", help="also these per-tensor scales (any format)"
    )
    migrate.add_argument(
        "--materialize",
        action="store_true",
        help="replace shards and config.json that are links (Hugging Face cache) with edited real copies",
    )

    return parser


class _Version(argparse.Action):
    """``--version``, which reads the installed version only when asked (package metadata is slow to read)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        from scalar_scales.version import installed_version

        print(f"scalar-scales {installed_version()}")
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
    if args.command == "check" and unknown:  # paths after an option (check A --strict B), as ruff takes them
        cut = unknown.index("--") if "--" in unknown else len(unknown)
        if not any(argument.startswith("-") for argument in unknown[:cut]):
            args.paths += unknown[:cut] + unknown[cut + 1 :]
            unknown = []
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
    except (CheckpointError, SwitchValueError, ConfigError) as exc:
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
    """SIGTERM ends the run as Ctrl-C does, where this is the main thread: a signal handler can be set only there,
    and elsewhere setting one is refused (ValueError), which tells the thread without importing ``threading``."""

    def raise_interrupted(number: int, frame: object) -> None:
        raise Interrupted(number)

    try:
        previous = signal.signal(signal.SIGTERM, raise_interrupted)
    except ValueError:  # not the main thread
        yield
        return
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


def _emit_report(reports: list[CheckReport], output_format: str, context: Context, *, several: bool) -> None:
    """Write the reports as their format writes them, in pieces as it goes; a reader that went away does not fail
    the command (and cannot be told)."""
    try:
        _render(sys.stdout, reports, output_format, context, several=several)
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone()


def _render(out: Writer, reports: list[CheckReport], output_format: str, context: Context, *, several: bool) -> None:
    """One checkpoint's report as its format's ``emit`` writes it; the reports of a check of several paths as its
    renderer of several does (even where one was refused and one is left); nothing where no checkpoint was
    checked."""
    if not reports:
        return
    row = FORMATS[output_format]
    if several and row.several is not None:
        row.several[0](out, reports, context)
    else:
        row.emit(out, reports[0], context)


def _reader_gone() -> None:
    """Standard output's reader went away: what is still written, and the interpreter's last flush, go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _emit_lines(lines: list[str]) -> None:
    """Print lines of text output, each escaped: a name from a checkpoint or a server is printed as it is unless
    it holds a character a terminal acts on."""
    _emit("\n".join(map(escaped, lines)))


MAX_SARIF_RUNS = 20
"""The most runs GitHub code scanning takes in one SARIF file: a check of more checkpoints is refused in SARIF."""


def _check(args: argparse.Namespace) -> int:
    if args.json and args.output_format not in (None, "json"):
        args.parser.error(
            f"--json is --output-format json; it cannot be given with --output-format {args.output_format}"
        )
    given = list(dict.fromkeys(args.paths))  # a path given twice is checked once
    several = len(given) > 1 or any(map(hub_author, given))
    settings, refused = _settings_of(args, given, several=several)
    if args.show_settings:
        if args.output_file is not None or args.silent:
            option = "--silent" if args.silent else "--output-file"
            args.parser.error(f"--show-settings prints the settings; it cannot be given with {option}")
        _emit_lines([line for path, each in settings.items() for line in (f"Settings for {path}:", *each.lines())])
        return REFUSED if refused else 0
    if not settings:  # every path's configuration file refused, each in its line
        return REFUSED
    output_format, named = _one_output_format(args, settings)
    for option in PRINTING_OPTIONS:
        given_option = getattr(args, option.removeprefix("--").replace("-", "_"))
        if given_option and output_format not in (formats := FORMATS_TAKING[option]):
            args.parser.error(
                f"{option} is for --output-format {' or '.join(formats)}; it cannot be given with {named}"
            )
    if args.color == "always" and output_format != "text":
        args.parser.error(f"--color always colours the text; it cannot be given with {named}")
    if args.statistics and (args.list or args.show_all):
        args.parser.error(
            "--statistics prints a count per rule instead of the findings; it cannot be given with "
            f"{'--list' if args.list else '--show-all'}"
        )
    copies = _copies(args)
    for name, shown in ((output_format, named), *((copy, f"--{copy}-output") for copy in copies)):
        if several and FORMATS[name].several is None:
            args.parser.error(
                f"{shown} reports one checkpoint a run (GitHub shows 10 annotations of a level in a step); check "
                "each checkpoint in a run of its own"
            )
    if args.output_file is not None:
        _check_writable(args.output_file, "--output-file", given)
    for name, file in copies.items():
        _check_writable(file, f"--{name}-output", given)
    paths, listing_refused = _expanded(list(settings))  # the Hub is asked only once the command line is right
    refused = refused or listing_refused
    if several and "sarif" in (output_format, *copies) and len(paths) > MAX_SARIF_RUNS:
        raise CheckpointError(
            "--output-format sarif",
            f"GitHub code scanning takes at most {MAX_SARIF_RUNS} runs in a SARIF file, and {len(paths)} checkpoints "
            "were given: check fewer at a time",
        )
    text_out = output_format == "text" and args.output_file is None
    reports: list[CheckReport] = []
    for path, origin in paths.items():
        try:
            report = _check_one(args, path, settings[origin], said_on_stdout=text_out)
        except CheckpointError as exc:
            refused = _refused_alone(exc, several=several)
            continue
        if report is not None:
            reports.append(report)
    import shutil  # here, not at the top: its own imports (bz2, lzma) serve commands that copy files

    width = min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
    context = Context(
        show_all=args.show_all,
        with_scales=args.list,
        quiet=args.quiet,
        statistics=args.statistics,
        colour=output_format == "text" and _colour(args.color, to_file=args.output_file is not None),
        width=width,
    )
    for name, file in copies.items():  # each replaced even where nothing was checked: an old report never stays
        _write_report(file, reports, name, _taken_by(name, context), several=several)
    if args.output_file is not None:
        _write_report(args.output_file, reports, output_format, context, several=several)
    elif reports and not args.silent:
        _emit_report(reports, output_format, context, several=several)
    if args.own_process:
        _NOT_FREED.append(reports)
    return REFUSED if refused else max((report.exit_code for report in reports), default=0)


def _copies(args: argparse.Namespace) -> dict[str, str]:
    """The files ``--FORMAT-output`` names, by format; a file named twice (or also by ``--output-file``) is a usage
    error: one of the two reports would silently replace the other."""
    copies = {name: file for name in OUTPUT_FORMATS if (file := getattr(args, f"{name}_output")) is not None}
    files = [*copies.values(), *([args.output_file] if args.output_file is not None else [])]
    for file in files:
        if files.count(file) > 1:
            args.parser.error(f"{file} is named as the file of two reports; give each its own")
    return copies


def _taken_by(name: str, context: Context) -> Context:
    """``context`` as the format ``name``'s copy takes it (``--NAME-output``): a copy is the whole report, so it
    takes the printing options that add to it (``--list``, ``--show-all``) where its format takes them, and not
    those that cut it to the terminal's need (``--quiet``, ``--statistics``); no colour."""
    options = FORMATS[name].options
    return replace(
        context,
        show_all=context.show_all and "--show-all" in options,
        with_scales=context.with_scales and "--list" in options,
        quiet=False,
        statistics=False,
        colour=False,
    )


def _refused_alone(error: CheckpointError | ConfigError, *, several: bool) -> bool:
    """A path's refusal: where several are checked, its one line, and the others are still checked (the command
    then exits 2: this returns True); else the command's refusal, raised."""
    if not several:
        raise error
    _say_error(str(error))
    return True


def _settings_of(args: argparse.Namespace, paths: list[str], *, several: bool) -> tuple[dict[str, Settings], bool]:
    """Each path's settings (:func:`_settings`); and whether a path's configuration file was refused, in its one
    line, where several are checked (its path is then not checked, the others are)."""
    found: dict[str, Settings] = {}
    refused = False
    for path in paths:
        try:
            found[path] = _settings(args, path)
        except ConfigError as exc:
            refused = _refused_alone(exc, several=several)
    return found, refused


def _expanded(paths: list[str]) -> tuple[dict[str, str], bool]:
    """The paths to check, each with the path given that it comes from: each as given, but ``hf://ORG``, which is
    each model the Hub lists of that user or organization (``hf://ORG/NAME``), each once; and whether a listing was
    refused (its line said), where other paths are given."""
    found: dict[str, str] = {}
    refused = False
    for path in paths:
        author = hub_author(path)
        if author is None:
            found.setdefault(path, path)
            continue
        from scalar_scales.sources.hub import author_models  # the Hub's client, only where a check reads the Hub

        try:
            listed = author_models(path, author)
            if not listed:
                raise CheckpointError(path, f"the Hub lists no model of {author}")
        except CheckpointError as exc:
            refused = _refused_alone(exc, several=len(paths) > 1)
            continue
        for model in listed:
            found.setdefault(model, path)
    return found, refused


def _check_one(args: argparse.Namespace, path: str, settings: Settings, *, said_on_stdout: bool) -> CheckReport | None:
    """One checkpoint's report; None for a staged folder whose staged changes touch none of its files, which a
    line says (on stdout in the text output, else on stderr, so that a document or a file holds nothing else), but
    with ``--quiet`` or ``--silent``."""
    if args.staged:
        from scalar_scales.sources.staged import open_staged  # git's reader, which a check of a folder never needs

        opened = open_staged(path)
    else:
        opened = open_checkpoint(path)
    if opened is None:
        if not (args.quiet or args.silent):
            line = escaped(f"{path}: nothing to check: the staged changes touch none of its files")
            if said_on_stdout:
                _emit(line)
            else:
                with suppress(OSError):
                    print(line, file=sys.stderr, flush=True)
        return None
    return check_opened(
        opened,
        codes=settings.codes,
        include=args.include,
        strict=settings.strict,
        exit_zero=args.exit_zero,
        module_ignores=settings.per_module_ignores,
    )


def _one_output_format(args: argparse.Namespace, settings: dict[str, Settings]) -> tuple[str, str]:
    """The output format of a check of every path given: the command line's, else their configuration files'
    (which then must agree, since one output holds every report); and how a refusal names it (the option given,
    or the file's setting)."""
    formats = dict.fromkeys(each.output_format for each in settings.values())
    if len(formats) > 1:
        args.parser.error(
            f"the configuration files of the paths given set several output formats ({', '.join(formats)}); "
            "name one with --output-format"
        )
    first = next(iter(settings.values()))
    return first.output_format, first.output_format_named


def _colour(when: str, *, to_file: bool) -> bool:
    """Whether the text is coloured, as ruff and most tools decide it: ``--color always`` or ``never``; else
    (``auto``) not where ``NO_COLOR`` is set (not empty), yes where ``FORCE_COLOR`` is, else where standard output is
    a terminal (a file, ``--output-file``, is not)."""
    if when != "auto":
        return when == "always"
    if others_setting("NO_COLOR"):
        return False
    if others_setting("FORCE_COLOR"):
        return True
    return not to_file and sys.stdout.isatty()


def _check_writable(path: str, option: str, checked: Sequence[str]) -> None:
    """Refuse, before anything is read, a report file that cannot be written: a folder, one of the files of a
    checkpoint ``checked`` names (the file given, or a shard, config or index in a folder given: a report written
    there would replace what it reports on), or a file in a folder where a file cannot be created and renamed
    (which :func:`_write_report` does), each in one line."""
    from scalar_scales.files.durable import try_replacing_in

    if os.path.isdir(path):
        raise CheckpointError(path, f"is a folder: {option} names the file to write the report to")
    report = os.path.realpath(path)
    folder, name = os.path.split(report)
    for given in checked:
        if is_hub_address(given):
            continue
        own = report == os.path.realpath(given) or (
            folder == os.path.realpath(given) and (name in _CHECKPOINT_FILES or name.endswith(".safetensors"))
        )
        if own:
            raise CheckpointError(
                path, f"is a file of the checkpoint {given}: {option} would replace it with the report on it"
            )
    try_replacing_in(Path(os.path.dirname(path) or os.curdir))


_CHECKPOINT_FILES = frozenset({CONFIG_NAME, MODELOPT_CONFIG_NAME, *INDEX_NAMES})
"""The files, beside its shards, a folder's checkpoint is read from."""


def _write_report(
    path: str, reports: list[CheckReport], output_format: str, context: Context, *, several: bool
) -> None:
    """Write the report to ``path``, UTF-8, as ruff's ``--output-file`` does, through the project's one way of
    replacing a file (:func:`scalar_scales.files.durable.replaced`): a temporary file created exclusively, never
    through a link, renamed over ``path``, so a reader sees the old report or the new one whole, and a link at
    ``path`` is replaced, never written through. A new file takes the mode the umask gives (the temporary file is
    created private); one replaced keeps its own."""
    from scalar_scales.files.durable import os_errors_named, replaced

    new = not os.path.lexists(path) or os.path.islink(path)
    with os_errors_named(path, "write the report"), replaced(path, durable=False) as binary:
        if new and hasattr(os, "fchmod"):
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(binary.fileno(), 0o666 & ~umask)
        text = io.TextIOWrapper(binary, encoding="utf-8", newline="\n")
        _render(text, reports, output_format, context, several=several)
        text.flush()
        text.detach()


def _settings(args: argparse.Namespace, path: str) -> Settings:
    """The settings the check runs with: the command line's over the configuration file's (``--config``, else the
    nearest upward from the checked path, or from the current folder for a Hub repository; none with
    ``--isolated``). A wrong option is a usage error; a wrong file is a :class:`ConfigError`, one line naming it."""
    if args.isolated and args.config is not None:
        args.parser.error("--isolated reads no configuration file; it cannot be given with --config")
    if args.isolated:
        file = None
    elif args.config is not None:
        file = read_config(args.config)
    else:
        file = find_config(os.curdir if is_hub_address(path) else path)
    try:
        return resolve(
            file,
            select=args.select,
            extend_select=args.extend_select,
            ignore=args.ignore,
            strict=args.strict,
            output_format=args.output_format or ("json" if args.json else None),
        )
    except ConfigError:
        raise
    except ValueError as exc:
        parser: _Parser = args.parser
        parser.error(str(exc))


def _rule(args: argparse.Namespace) -> int:
    if args.all == bool(args.codes):
        args.parser.error("name one or more rule codes, or --all")
    codes = list(RULES) if args.all else [code.upper() for code in args.codes]
    if unknown := [code for code in codes if code not in RULES]:
        args.parser.error(f"unknown rule code {unknown[0]!r}; the rules are {', '.join(RULES)}")
    if args.output_format == "json":
        data = [rule_data(RULES[code]) for code in codes]
        _emit(json.dumps(data if args.all or len(data) > 1 else data[0], indent=2))
    elif args.all:
        _emit(reference_document().rstrip("\n"))
    else:
        _emit("\n".join(_rule_with_consumers(code) for code in codes).rstrip("\n"))
    return 0


def _rule_with_consumers(code: str) -> str:
    """A rule's reference, what each consumer run here was seen to do with its defect, and what each consumer the
    round trip does not run does with it."""
    from scalar_scales.consumers.by_rule import observed_lines
    from scalar_scales.consumers.read import consequence_lines

    parts = [lines for lines in (observed_lines(RULES[code].name), consequence_lines(RULES[code].name)) if lines]
    return rule_reference(RULES[code]) + "".join("\n" + "\n".join(lines) + "\n" for lines in parts)


def _migrate(args: argparse.Namespace) -> int:
    if is_hub_address(args.path):
        raise CheckpointError(
            args.path,
            "migrate edits files in place, so it needs a local copy (hf download ORG/NAME --local-dir DIR); "
            "check reads hf:// addresses",
        )
    from scalar_scales.migration import migrate_checkpoint

    show_progress = not args.json and sys.stderr.isatty()
    report = migrate_checkpoint(
        args.path,
        to=args.to,
        dry_run=args.dry_run or args.check,
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
    return 1 if args.check and report.changed else 0


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
