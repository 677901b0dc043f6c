"""Load artifacts with SGLang's ``get_model`` in this process, as SGLang's scheduler loads a model in its own.

    python tests/sglang_loading/load_artifact.py ARTIFACT PORT [--plugins]
    python tests/sglang_loading/load_artifact.py --serve [--plugins]

The first loads one artifact and prints what happened as one JSON line. The
second is the tests' loader process (``scalar_scales_testkit.worker``): it
loads each artifact it is asked for (``{"artifact": PATH, "port": PORT}``),
answers with that line's object, and between loads takes down what a load
set up (``scalar_scales_testkit.sglang_cpu.unload``), so that each load finds
the process as the first did; where it cannot, it says so and exits.

``--plugins`` first runs SGLang's own ``load_plugins()`` as its scheduler
does, once, at the start of the process: after the scheduler's imports have
imported the model loader, and before it configures logging. So the plugin
is found through its entry point (and ``SGLANG_PLUGINS`` applies). The line
holds ``loaded``, ``error`` (type and message, as SGLang raised it) and, once
loaded, the model's class and the global scales of its fused MLA
a-projections, what the plugin patched, and where the ``sglang`` imported
lies; ``architecture``, once SGLang has resolved it, is the model class it
loads the artifact as. A request's ``draft`` loads the artifact as SGLang
loads a draft model (whose class is then its draft class, a NextN one); its
``weights`` adds, once loaded, how far the weights SGLang computes with are
from the reference weights (``scalar_scales_testkit.roundtrip.weights_compared``),
every NVFP4 module of the checkpoint's.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path


def start(plugins: bool) -> None:
    """What the process does once, before its first load."""
    if plugins:
        # The scheduler's imports have imported the model loader by the time it loads plugins.
        import sglang.srt.model_loader.loader  # noqa: F401
        from sglang.srt.plugins import load_plugins

        load_plugins()


def load(artifact: Path, port: int, draft: bool = False, weights: bool = False) -> dict[str, object]:
    """What SGLang did with ``artifact`` (as a draft model where ``draft``; with its weights compared where
    ``weights``): the JSON line's object."""
    import sglang

    from scalar_scales_testkit.roundtrip import reference_weights, weights_compared
    from scalar_scales_testkit.sglang_cpu import (
        FUSED,
        computed_weights,
        fused_global_scales,
        load_configured,
        loaded_parameter,
        model_class,
        model_config,
    )

    result: dict[str, object] = {"loaded": False, "error": None, "sglang": sglang.__file__}
    try:
        config = model_config(artifact, port=port, draft=draft)
        result["architecture"] = model_class(config)
        model = load_configured(config)
    except Exception as error:  # what SGLang raised is the observation
        result["error"] = f"{type(error).__name__}: {error}"
    else:
        result["loaded"] = True
        result["fused"] = fused_global_scales(model)
        alpha = FUSED.format(0, "alpha")
        result["alpha"] = {alpha: loaded_parameter(model, alpha)} if alpha in dict(model.named_parameters()) else {}
        if weights:
            computed = computed_weights(model)
            result["weights"] = weights_compared(computed, reference_weights(artifact, lambda module: True))
    import sglang_patch

    result["patched"] = sglang_patch.is_applied()
    return result


def reset() -> bool:
    """Take down what the last load set up; whether the process is as it was before its first load."""
    from scalar_scales_testkit.sglang_cpu import nothing_loaded, unload

    unload()
    return nothing_loaded()


def main() -> None:
    warnings.filterwarnings("ignore")
    args = sys.argv[1:]
    plugins = "--plugins" in args
    if "--serve" in args:
        from scalar_scales_testkit.worker import serve

        serve(
            lambda request: load(
                Path(request["artifact"]),
                int(request["port"]),
                bool(request.get("draft")),
                bool(request.get("weights")),
            ),
            start=lambda: start(plugins),
            reset=reset,
        )
        return
    start(plugins)
    print(json.dumps(load(Path(args[0]), int(args[1]))))


if __name__ == "__main__":
    main()
