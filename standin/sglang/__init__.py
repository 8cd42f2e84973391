"""orch's SGLang stand-in -- this is NOT SGLang.

A small, stdlib-only fake of SGLang's HTTP server, used by orch's tests and its demo on machines
without GPUs. It parses SGLang's real command line (built from orch's argument tables), applies a
few of SGLang's real resolution rules, prints SGLang's real log formats, spawns children titled
``sglang::scheduler`` / ``sglang::detokenizer`` and answers SGLang's endpoints -- but it loads no
model and runs no kernel. It announces itself in its first log line and in ``/server_info``
(``"orch_standin": true``).

``__orch_standin__`` marks it, for whoever must tell it from SGLang (orch's planning probe labels
its answer ``"standin": true``). ``__version__`` is the SGLang release it imitates:
``ORCH_STANDIN_VERSION`` (default 0.5.23).
Run it as SGLang would be run, with ``standin/`` on ``PYTHONPATH``::

    PYTHONPATH=standin python -m sglang.launch_server --model-path Qwen/Qwen3-8B
    standin/bin/sglang serve --model-path Qwen/Qwen3-8B

See ``standin/README.md`` for the knobs and failure modes.
"""

from sglang.version import __version__

__orch_standin__ = True

__all__ = ["__orch_standin__", "__version__"]
