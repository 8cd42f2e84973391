"""``python -m sglang.launch_server`` for orch's SGLang stand-in (NOT SGLang).

Like SGLang's own module it first warns that ``sglang serve`` is the recommended entry point (a
3-line UserWarning on stderr), then runs the server; the argument parser's prog is still
``sglang serve``.
"""

import sys
import warnings


def _warn() -> None:
    warnings.warn(
        "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
        "recommended entrypoint.\n  Example: sglang serve --model-path <model> [options]",
        UserWarning,
        stacklevel=1,
    )


if __name__ == "__main__":
    _warn()
    from sglang._standin.server import main

    sys.exit(main(sys.argv[1:], entry="launch_server"))
