"""smarthome: a CPU-sized multi-turn tool-use environment (a default seal-platform plugin)."""
