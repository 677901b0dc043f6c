"""Fingerprints of the upstream code the producer patch was tested against. Generated; do not edit.

Written by ``scripts/fingerprints.py`` in each test environment (see
``compressed_tensors_patch.versions``): target -> fingerprint -> releases.
"""

TESTED: dict[str, dict[str, tuple[str, ...]]] = {
    "compressed_tensors.compressors.model_compressors.model_compressor.ModelCompressor.add_decompress_hook": {
        "4c7022dca6aa83a5": ("compressed-tensors 0.20.0", "compressed-tensors 0.20.1"),
        "e57082b0bf1d3e95": ("compressed-tensors 0.19.0",),
    },
    "compressed_tensors.compressors.model_compressors.model_compressor.ModelCompressor.compress_model": {
        "5e8fb681d1ffe75a": ("compressed-tensors 0.19.0", "compressed-tensors 0.20.0", "compressed-tensors 0.20.1"),
    },
    "compressed_tensors.compressors.model_compressors.model_compressor.ModelCompressor.from_compression_config": {
        "8f223f0145a371c3": ("compressed-tensors 0.19.0", "compressed-tensors 0.20.0", "compressed-tensors 0.20.1"),
    },
    "compressed_tensors.compressors.model_compressors.model_compressor.ModelCompressor.update_config": {
        "5df0df83c66d0342": ("compressed-tensors 0.19.0", "compressed-tensors 0.20.0", "compressed-tensors 0.20.1"),
    },
    "compressed_tensors.compressors.nvfp4.base.NVFP4PackedCompressor.compress": {
        "cbbc71843eee8001": ("compressed-tensors 0.19.0",),
        "d4368f501d1b4121": ("compressed-tensors 0.20.0", "compressed-tensors 0.20.1"),
    },
    "compressed_tensors.compressors.nvfp4.base.NVFP4PackedCompressor.decompress": {
        "e0a5809e3094221d": ("compressed-tensors 0.19.0", "compressed-tensors 0.20.0", "compressed-tensors 0.20.1"),
    },
    "compressed_tensors.quantization.quant_config.QuantizationConfig": {
        "b80754e407a347cf": ("compressed-tensors 0.19.0",),
        "e828a35b09c29bd5": ("compressed-tensors 0.20.0", "compressed-tensors 0.20.1"),
    },
    "llmcompressor.entrypoints.model_free.update_config": {
        "fe5215c1c80e8833": ("llmcompressor 0.14.0.1",),
    },
    "transformers.utils.quantization_config.CompressedTensorsConfig.__init__": {
        "0fdb535631de0a87": ("transformers 5.17.0",),
    },
    "transformers.utils.quantization_config.CompressedTensorsConfig.to_dict": {
        "5a3475175bf621a2": ("transformers 5.17.0",),
    },
}
