"""Load one artifact with SGLang's ``get_model`` in this process; print what happened as one JSON line.

    python tests/sglang_loading/load_artifact.py ARTIFACT PORT [--plugins]

``--plugins`` first runs SGLang's own ``load_plugins()`` as its scheduler
does: after the scheduler's imports have imported the model loader, and
before it configures logging. So the plugin is found through its entry point
(and ``SGLANG_PLUGINS`` applies). The line holds ``loaded``, ``error`` (type and message, as SGLang
raised it) and, once loaded, the fused MLA a-projection's scales of each
layer, what the plugin patched, and where the ``sglang`` imported lies.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path


def main() -> None:
    warnings.filterwarnings("ignore")
    artifact, port = Path(sys.argv[1]), int(sys.argv[2])
    if "--plugins" in sys.argv[3:]:
        # The scheduler's imports have imported the model loader by the time it loads plugins.
        import sglang.srt.model_loader.loader  # noqa: F401
        from sglang.srt.plugins import load_plugins

        load_plugins()
    import sglang

    from scalar_scales_testkit.sglang_cpu import FUSED, GLOBAL_SCALES, load_model, loaded_parameter

    result: dict[str, object] = {"loaded": False, "error": None, "sglang": sglang.__file__}
    try:
        model = load_model(artifact, port=port)
    except Exception as error:  # what SGLang raised is the observation
        result["error"] = f"{type(error).__name__}: {error}"
    else:
        layers = model.config.num_hidden_layers
        result["loaded"] = True
        result["fused"] = {
            FUSED.format(layer, scale): loaded_parameter(model, FUSED.format(layer, scale))
            for layer in range(layers)
            for scale in GLOBAL_SCALES
        }
        result["alpha"] = {FUSED.format(0, "alpha"): loaded_parameter(model, FUSED.format(0, "alpha"))}
    import sglang_patch

    result["patched"] = sglang_patch.is_applied()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
