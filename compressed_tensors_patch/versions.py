"""Which compressed-tensors releases the runtime patch knows the internals of."""

from __future__ import annotations

from importlib import metadata

from scalar_scales.patching import UnsupportedUpstreamError

__all__ = ["SUPPORTED_VERSIONS", "check_installed", "check_supported", "installed_version", "native_support"]

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.19.0", "0.20.0")
"""Releases whose NVFP4 compressor, ModelCompressor and config handling we read and test."""


def installed_version() -> str | None:
    try:
        return metadata.version("compressed-tensors")
    except metadata.PackageNotFoundError:
        return None


def check_supported(version: str | None) -> None:
    """Refuse any compressed-tensors we have not read: a wrong guess would corrupt artifacts."""
    if version is None:
        raise UnsupportedUpstreamError("compressed_tensors_patch: compressed-tensors is not installed")
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedUpstreamError(
            f"compressed_tensors_patch: compressed-tensors {version} is not supported "
            f"(supported: {', '.join(SUPPORTED_VERSIONS)}); nothing was patched"
        )


def check_installed() -> str:
    """Check the installed release; describe it for the log line."""
    version = installed_version()
    check_supported(version)
    return f"compressed-tensors {version}"


def native_support() -> str | None:
    """The installed compressed-tensors, described, if it writes 0-D global scales itself; else None.

    A release with the change (upstream/compressed-tensors.patch) declares
    ``QuantizationConfig.format_version``; there is then nothing to patch, on
    any version, so this is checked before the version gate.
    """
    version = installed_version()
    if version is None:
        return None
    from compressed_tensors.quantization import QuantizationConfig

    if "format_version" not in QuantizationConfig.model_fields:
        return None
    return f"compressed-tensors {version}"
