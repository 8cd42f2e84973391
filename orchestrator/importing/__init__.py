"""Launch scripts -> profiles, and --check. Pure: no I/O (the caller reads and writes files).

Read bottom up (pyproject.toml's "importing's own layers" contract keeps this order):

- the bash reader: ``shell_words`` (the values), ``shell_syntax`` (tree-sitter-bash read as bash
  reads), ``shell_quoting``, ``shell_arith``, ``shell_expansion`` (a word -> the words bash
  passes), ``shell_commands`` (a simple command), ``shell_conditions``, ``shell_script`` (the
  statements; ``parse_script`` is the entry);
- what runs a server: ``wrappers`` (nohup/env/sudo, ssh, docker run, kubectl exec),
  ``server_arguments`` (SGLang's flags by argparse's rules), ``launches`` (the finder);
- what a script holds: ``breaks`` (lines bash never passes), ``script_secrets`` (with
  ``credentials``, the one secret classifier), ``scripts`` (what one import reads);
- ``orch import``: ``profile_notes``, ``profile_values``, ``profile_hosts``, ``profile_groups``,
  ``profiles``; ``orch import --check``: ``pitfalls``, ``check``. ``budget`` bounds the work.
"""
