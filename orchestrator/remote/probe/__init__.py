"""orch's planning probe: runs SGLang's own parsing and resolution on a command line, no server.

A package, standard library only, importing nothing of orch's but ``orchestrator.remote.host``:
orch ships it as ONE bundle (fleet/bundle.py: this package and host/, zipped deterministically),
pushed to the host like the agent or kept in a local cache, and runs it through the checking
bootstrap (fleet/bootstrap.py) with a python that has the target sglang; by hand::

    python probe-<digest>.pyz REQUEST.json   # answers one JSON document on stdout
    python -m orchestrator.remote.probe -    # from a source tree, the request on stdin

It starts again once under the request's environment (the server's), from the same checked
bytes (host/program.py), then removes the request file when asked to (it may hold tokens).

The request: ``{"args": [...SGLang arguments...], "env": {...}, "simulate_gpu": null | {...},
"model_config": null | {"path": P, "config": {...}}}``. What it does, as SGLang's entry points
do it (sglang/launch_server.py's ``__main__`` block, sglang/cli/serve.py's ``serve``):

- from 0.5.11, ``sglang.srt.plugins.load_plugins()`` first: SGLang's plugins (entry points of the
  group ``sglang.srt.plugins``) may add arguments or patch ServerArgs; the answer's ``plugins``
  names those loaded, ``plugin_hooks`` lists the hooks they registered (target, type, plugin);
- up to 0.5.18, ``prepare_server_args(args)`` parses and resolves (``ServerArgs.__post_init__``,
  sglang/srt/server_args.py); every attribute write during post-init is recorded with the
  function and line that made it;
- from 0.5.19, ``prepare_server_args`` returns the raw input and ``resolve_once()`` resolves;
  SGLang's own ``_resolved_overrides`` declarations (0.5.16+; sglang/srt/arg_groups/overrides.py,
  ``declare_resolution``) say which step changed what.

argparse errors (exit 2), exceptions raised during resolution (type, message, and the SGLang
function, file and line that raised) and everything SGLang logged are reported. With
``simulate_gpu`` (``{"name", "capability": [major, minor], "memory_mib"}``) the GPU facts SGLang
asks for are answered from it, so a machine without a GPU predicts what a given GPU would get;
without it, the host's real facts are used. No model weights are read: resolution reads the
model's ``config.json`` only (``model_config`` supplies one when the path is not on this
machine; the path is put back in the results).

A successful resolution's answer has a ``"memory"`` section for orch's GPU memory budget
(docs/agent.md, "The planning probe's answer"), found without a GPU and never failing the plan:
the model's shapes per rank from SGLang's own classes (``ModelConfig``, its mamba state's
``mamba2_cache_params``, ``DefaultPoolConfigurator._compute_cell_size``) or, where they cannot
run, the text config for orch to mirror them; the checkpoint's bytes from its safetensors
headers; each GPU's memory (NVML, or the simulated GPU); SGLang's default
``mem_fraction_static`` (a second resolution without ``--mem-fraction-static``).

orch's SGLang stand-in (standin/, NOT SGLang) provides the same modules, shaped as the release it
imitates, and goes through the same path; its package says what it is (``sglang.__orch_standin__``)
and the answer carries that as ``"standin": true``.
"""
