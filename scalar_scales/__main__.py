from scalar_scales.start import run

run()
