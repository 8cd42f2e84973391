"""One SGLang server over several nodes (a launch group): rank 0's supervisor coordinates the
others' over a signed TCP control channel (control.py); any rank's end stops every rank and the
group starts again whole, by rank 0's restart policy (coordinator.py); a member never restarts
on its own and stops its server when its coordinator is lost (member.py)."""
