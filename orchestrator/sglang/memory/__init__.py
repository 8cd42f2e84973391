"""GPU memory budget: what SGLang will carve out of each GPU, predicted before launch.  [pure]

SGLang sizes its pools at startup, per rank, in this order (docs/memory.md has the sources):
free memory before loading ``P`` -> weights -> ``rest = avail_after_weights - P*(1 - mfs)``
-> (hybrid models) the mamba state pool and its speculative reserve -> the KV pool from what
is left -> ``max_running_requests``, capped by the KV tokens and by the mamba slots. CUDA
graphs and activations must then fit in the slack ``P*(1 - mfs)``. The arithmetic mirrors
SGLang's own code release by release (``rules.rules_for``); the model's shapes (bytes per mamba
slot, per KV token) come from SGLang's own config classes where the probe could import them.

- ``shapes``: the model's and the GPUs' memory as the probe found them, and orch's mirror of
  SGLang's shape code for when its classes cannot be imported;
- ``rules``: what each SGLang release does when it sizes its pools, and the resolved server
  arguments the pools depend on;
- ``pools``: the pool arithmetic (the mamba state pool, max_running_requests, the reserve);
- ``budget``: one rank's budget step by step, and its verdict (fits, tight, will fail);
- ``measured``: what SGLang logged at startup, beside the prediction.

Values here are plain numbers in bytes unless a name says ``_gib`` (SGLang's "GB" is GiB).
"""
