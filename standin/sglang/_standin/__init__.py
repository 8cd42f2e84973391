"""The implementation of orch's SGLang stand-in (NOT SGLang); see ``sglang/__init__.py``.

One idea per module: ``knobs`` (ORCH_STANDIN_* settings), ``argtable`` (SGLang's command line from
orch's tables), ``model`` (model path and config), ``resolve`` (SGLang's resolution rules),
``render`` (the ``server_args=`` line), ``memory`` (startup figures), ``logs`` (log, uvicorn and
tqdm formats), ``tracebacks`` (failure texts), ``proc`` (titles, PDEATHSIG, spawning), ``child``
(scheduler and detokenizer processes), ``group`` (multi-node placement and rendezvous),
``endpoints`` (HTTP), ``server`` (the main process).
SGLang's own module names (``sglang.srt.server_args``, ``sglang.srt.plugins``) live beside, in
``sglang/srt/``: what orch's planning probe and the server run.
"""
