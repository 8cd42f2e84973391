"""The commands: each builds its ``Launch`` once (``context.py``) and walks the stages with it.

``up.py`` (preflight, plan gate, start, follow, verify), ``preflight.py``, ``follow.py``,
``effective.py`` (diff-effective), ``planning.py`` (plan, lock), ``ops.py`` (down, status, logs).
Commands yield events or return values; ``cli/show/`` turns them into text and ``cli/`` prints.
"""
