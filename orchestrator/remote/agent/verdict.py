"""What ended a server (its exit class) and whether a restart can help (``Restart``): the
vocabulary of verdicts orch shows and the supervisor restarts by. Which class a crash is, read
from its last lines, is classify.py's."""

from __future__ import annotations

from dataclasses import dataclass

# Exit classes: what happened. Whether a restart can help is a separate verdict (Restart below),
# decided from the class and the evidence: the supervisor restarts by that, never by the class.
CONFIG_ERROR = "config-error"
CUDA_OOM = "cuda-oom"
KILLED = "killed"
PORT_IN_USE = "port-in-use"
IMPORT_ERROR = "import-error"
MODEL_NOT_FOUND = "model-not-found"
NCCL = "nccl"
# A GPU kernel failed: a CUDA error a kernel raised (illegal memory access, misaligned address,
# device-side assert), a kernel that cannot be built or loaded (Triton's compiler and its
# OutOfResources, a JIT build), a kernel's own shape check (Marlin's tiles).
KERNEL_ERROR = "kernel-error"
CRASHED = "crashed"
STOPPED = "stopped"
# Verdicts of the supervisor itself, not of classify_exit: it stopped a server that stopped
# answering /health after READY (HUNG) or never became READY in time (STARTUP_TIMEOUT); the
# server could not be started at all (SPAWN_FAILED: argv over the kernel's per-argument limit,
# exec format error, a missing interpreter: the same argv fails the same way).
HUNG = "hung"
STARTUP_TIMEOUT = "startup-timeout"
SPAWN_FAILED = "spawn-failed"
# The supervisor took over a running server whose own supervisor had died (``adopt``): it is
# not its child, so its exit status cannot be known.
LOST = "lost"
# The classes that repeat at this configuration whatever the phase (the same argv, install and
# model path fail the same way); a kernel error repeats when it happens during the startup.
DETERMINISTIC = (CONFIG_ERROR, IMPORT_ERROR, MODEL_NOT_FOUND, SPAWN_FAILED)
LOST_RETURNCODE = 255  # an adopted server's end: not our child, its status is unknown


@dataclass(frozen=True)
class Restart:
    """Whether starting the same argv again can end otherwise (``helps``), and the evidence."""

    helps: bool
    why: str


def restart_for(cls: str, *, was_ready: bool = False) -> Restart:
    """The restart verdict a class carries: what repeats at this configuration is never
    restarted (a restart loop proves nothing); what may not repeat is restarted by the policy,
    whose start limit bounds the rest."""
    if cls in DETERMINISTIC:
        return Restart(False, _REPEATS[cls])
    if cls == KERNEL_ERROR and not was_ready:
        # SGLang's startup runs the same kernels on the same shapes on every start: weight repacks
        # (Marlin's tile checks) and Triton/JIT builds are functions of the model, the GPU and the
        # parallel sizes, and CUDA-graph capture replays a fixed list of batch sizes.
        return Restart(
            False,
            "a GPU kernel failed during startup (loading, building kernels or "
            "capturing CUDA graphs runs the same kernels on the same shapes each "
            "start): it repeats at this configuration",
        )
    return Restart(
        True,
        _MAY_PASS.get(
            cls,
            "nothing shows a cause that repeats: restarted by "
            "the policy, bounded by its start limit",
        ),
    )


_REPEATS = {
    CONFIG_ERROR: "SGLang rejects this configuration: the same argv fails the same way",
    IMPORT_ERROR: "the install cannot import what SGLang needs: it fails the same way until the "
    "environment changes",
    MODEL_NOT_FOUND: "the model is not where the profile says: the same path or Hub id fails the "
    "same way",
    SPAWN_FAILED: "the program cannot be started: the same argv fails the same way",
}
_MAY_PASS = {
    KERNEL_ERROR: "a GPU kernel failed while serving (the request that triggered it is gone "
    "after a restart): it may not repeat",
    CUDA_OOM: "GPU memory depends on what else holds the GPU and on the load: it may not repeat",
    NCCL: "a collective failed or timed out (a peer, the network, another rank's end): it may "
    "not repeat",
    KILLED: "a signal from outside ended it: it may not repeat",
    PORT_IN_USE: "the port's holder may be gone: it may not repeat",
}


@dataclass(frozen=True)
class ExitVerdict:
    """What happened (``cls``, ``message``) and whether a restart can help (``restart``; None:
    what the class alone says)."""

    cls: str
    message: str
    restart: Restart | None = None

    @property
    def judged(self) -> Restart:
        return self.restart if self.restart is not None else restart_for(self.cls)

    @property
    def restart_helps(self) -> bool:
        return self.judged.helps

    @property
    def restart_why(self) -> str:
        return self.judged.why

    @property
    def deterministic(self) -> bool:
        """It repeats at this configuration: never restarted."""
        return not self.judged.helps
