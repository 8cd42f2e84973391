"""What a pushed program reads of the host it runs on, shared by the agent and the probe (both
bundles include this package): the GPUs through NVML (``gpus``), and how the program runs itself
again from the same checked bytes (``program``). Standard library only (pynvml when present),
Python 3.9+."""
