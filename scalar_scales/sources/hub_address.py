"""How a Hub repository can be named: ``hf://ORG/NAME[@REVISION]``, or the address of its page that a user copies
from a browser, ``https://huggingface.co/ORG/NAME`` or ``.../ORG/NAME/tree/REVISION``.

Recognising an address imports nothing: ``hf://`` and any ``http(s)://``
address are meant for the Hub (no local path starts so), and
``huggingface_hub`` is imported only once one is checked. The hosts taken for
the Hub are ``huggingface.co`` (``hf.co``, ``www.``) and the host of the
endpoint huggingface_hub reads from ``HF_ENDPOINT`` (its
``constants.ENDPOINT``), so that a mirror's page addresses work too; any other
host is refused in one line. Every form is read into one :class:`HubAddress`, whose
:attr:`~HubAddress.canonical` ``hf://`` form names the checkpoint in the
report, whatever form was given.

A page's revision is everything after ``/tree/``, percent-decoded: the Hub's
own links spell ``refs/pr/1`` as ``refs%2Fpr%2F1``, and a branch may hold a
``/``, so neither form is cut at a slash. A file's page (``/blob/...``,
``/resolve/...``) names one file, not a checkpoint, and is refused with the
address to check instead; so is a dataset's or a Space's.

A revision is a branch, a tag or a commit, and git's rules for their names
(``git check-ref-format``) say what none can hold; what of those would change
what is read is refused, in either form (:func:`_revision_problem`): a ``.``
or ``..`` segment, which an HTTP client removes from the model-info address
(``@..`` would check the default branch) and which, offline, would name a
``refs/`` file outside the repository's; an empty segment; a control
character or a backslash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from scalar_scales.environment import others_setting
from scalar_scales.errors import CheckpointError

__all__ = [
    "HUB_ENDPOINT",
    "HUB_HOSTS",
    "HUB_PREFIX",
    "HubAddress",
    "hub_author",
    "hub_endpoint",
    "is_hub_address",
    "parse_hub_address",
]

HUB_PREFIX = "hf://"
HUB_ENDPOINT = "https://huggingface.co"
"""huggingface_hub's endpoint where ``HF_ENDPOINT`` is unset."""
HUB_HOSTS = frozenset({"huggingface.co", "www.huggingface.co", "hf.co"})
"""The Hub's own hosts; the host of ``HF_ENDPOINT`` is taken too."""
_ADDRESS = re.compile(r"hf://(?P<repo>[^/@\s]+/[^/@\s]+)(?:@(?P<revision>\S+))?")
_AUTHOR = re.compile(r"hf://(?P<author>[^/@\s]+)/?")
_FORMS = "hf://ORG/NAME[@REVISION], https://huggingface.co/ORG/NAME or https://huggingface.co/ORG/NAME/tree/REVISION"


@dataclass(frozen=True)
class HubAddress:
    """A repository and the revision asked for (None: its default branch), and the address as the user gave it."""

    repo_id: str
    revision: str | None
    given: str

    @property
    def canonical(self) -> str:
        """``hf://ORG/NAME`` or ``hf://ORG/NAME@REVISION``: how the report names the checkpoint and its files."""
        return HUB_PREFIX + self.repo_id + ("" if self.revision is None else f"@{self.revision}")


def is_hub_address(path: str) -> bool:
    """``path`` is meant for the Hub: ``hf://...``, or an ``http(s)://`` address, which :func:`parse_hub_address`
    then reads, or refuses where its host is not the Hub's."""
    return path.startswith(HUB_PREFIX) or _host(path) is not None


def hub_author(address: str) -> str | None:
    """The user or organization ``hf://ORG`` names (every model of it is checked), or None for any other address.
    Its name is checked where the models are listed, as huggingface_hub checks a repository id's."""
    match = _AUTHOR.fullmatch(address) if address.startswith(HUB_PREFIX) else None
    return None if match is None else match["author"]


def parse_hub_address(address: str) -> HubAddress:
    """The repository and revision ``address`` names, or a one-line :class:`CheckpointError` saying which forms
    are understood. The repository id is not validated here: huggingface_hub's rules are, once it is imported."""
    if address.startswith(HUB_PREFIX):
        match = _ADDRESS.fullmatch(address)
        if match is None:
            raise CheckpointError(
                address, "not a Hub address; the forms are hf://ORG/NAME, hf://ORG/NAME@REVISION and hf://ORG"
            )
        return _checked(HubAddress(match["repo"], match["revision"], address))
    host = _host(address)
    if host is None or host not in _hub_hosts():
        raise CheckpointError(
            address, f"not a Hub address: its host is neither the Hub's nor HF_ENDPOINT's; the forms are {_FORMS}"
        )
    parts = urlsplit(address)
    segments = parts.path.strip("/").split("/") if parts.path.strip("/") else []
    if segments[:1] in (["datasets"], ["spaces"]):
        kind = "a dataset" if segments[0] == "datasets" else "a Space"
        raise CheckpointError(address, f"names {kind}, not a model repository")
    if len(segments) < 2 or any(not segment for segment in segments[:2]):
        raise CheckpointError(address, f"not a repository's address; the forms are {_FORMS}")
    repo_id = unquote(segments[0]) + "/" + unquote(segments[1])
    rest = segments[2:]
    if not rest:
        return HubAddress(repo_id, None, address)
    if rest[0] == "tree" and len(rest) > 1:
        revision = unquote("/".join(rest[1:]))
        if not revision.strip() or any(ord(c) < 32 for c in revision):
            raise CheckpointError(address, "names no revision after /tree/")
        return _checked(HubAddress(repo_id, revision, address))
    if rest[0] in ("blob", "resolve") and len(rest) > 2:
        revision = unquote(rest[1])
        raise CheckpointError(
            address, f"names one file, not a checkpoint; check the repository: hf://{repo_id}@{revision}"
        )
    raise CheckpointError(address, f"not a repository's address; the forms are {_FORMS}")


def _revision_problem(revision: str) -> str | None:
    """Why ``revision`` can name no branch, tag or commit, in the terms of git's rules for their names; None where
    it may name one (the Hub, or the cache offline, then says whether it does)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in revision):
        return "it holds a control character"
    if "\\" in revision:
        return "it holds a backslash"
    segments = revision.split("/")
    if any(segment in (".", "..") for segment in segments):
        return "it has a '.' or '..' segment"
    if "" in segments:
        return "it has an empty segment (a '/' at its start or end, or '//')"
    return None


def _checked(hub: HubAddress) -> HubAddress:
    """``hub``, or a one-line refusal where its revision can name nothing (:func:`_revision_problem`)."""
    problem = None if hub.revision is None else _revision_problem(hub.revision)
    if problem is not None:
        raise CheckpointError(hub.given, f"the revision {hub.revision!r} can name no branch, tag or commit: {problem}")
    return hub


def _host(path: str) -> str | None:
    """The lowercased host (with its port) of an ``http(s)://`` address; None for anything else."""
    if not path.lower().startswith(("http://", "https://")):
        return None
    try:
        return urlsplit(path).netloc.lower() or None
    except ValueError:  # an address urllib refuses (an unclosed IPv6 bracket)
        return None


def hub_endpoint() -> str:
    """The endpoint huggingface_hub sends its requests to, without a trailing ``/`` (``constants.ENDPOINT``, from
    ``HF_ENDPOINT``), where a Hub repository's files are; without huggingface_hub, or where it refuses its settings
    (a timeout of ``abc``), ``HF_ENDPOINT`` itself, or the Hub's where that is unset."""
    try:
        from huggingface_hub import constants

        endpoint = str(constants.ENDPOINT)
    except Exception:  # not installed, or refusing its settings: open_hub_checkpoint says which, in one line
        endpoint = others_setting("HF_ENDPOINT") or HUB_ENDPOINT
    return endpoint.rstrip("/")


def _hub_hosts() -> frozenset[str]:
    """The Hub's hosts and the host of huggingface_hub's endpoint (:func:`hub_endpoint`): without huggingface_hub,
    checking the address then says what to install, or which setting is refused, rather than that a mirror's
    address is not the Hub's."""
    host = _host(hub_endpoint())
    return HUB_HOSTS | ({host} if host else set())
