"""orch's benchmarks: how fast orch reaches a verdict, side by side with the hand-written way.

Everything runs on loopback against real OpenSSH sshd instances and orch's SGLang stand-in
(standin/sglang, NOT SGLang). Every figure is a median over several runs; comparisons are ratios
measured in the same run. Figures are printed and written to ``bench/results.md``, never asserted
(tests/bench only checks that the benchmark runs). ``make bench``; ``python -m bench --quick``.
"""
