"""benchlib: rerunnable container-network benchmarks."""
