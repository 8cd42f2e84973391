"""Generated SGLang argument tables (data only); see scripts/gen_sglang_argtable.py."""
