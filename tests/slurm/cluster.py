"""A real Slurm 22.05 cluster on this one machine, in a temporary directory (ROUND3-FACTS §3.4):
``munged`` as the ``munge`` user with its own key and socket, ``slurmctld`` and two ``slurmd -N
n1/n2`` on free ports, ``proctrack/pgid`` (a job's orphans die with it), ``task/none`` (no cgroup
plugins in a container), fake GPUs as character devices (``c 195 K``) in ``gres.conf``, and
``SLURM_CONF`` pointing at it. Everything started here is stopped by ``stop``."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = (
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "scontrol",
    "squeue",
    "scancel",
    "srun",
    "sinfo",
)
NODES = ("n1", "n2")
GPUS_PER_NODE = 8


def missing_programs() -> list[str]:
    """What this machine lacks for the tier: Slurm and munge programs, the munge user, root
    (the tier skips, naming them)."""
    search = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    missing = [name for name in DAEMONS if shutil.which(name, path=search) is None]
    try:
        pwd.getpwnam("munge")
    except KeyError:
        missing.append("the munge user")
    if os.geteuid() != 0:
        missing.append("root (the daemons run as root; the fake GPUs are mknod devices)")
    return missing


def _program(name: str) -> str:
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    assert found is not None, name
    return found


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _slurm_conf(root: Path, ports: list[int], gres: bool) -> str:
    ctld, slurmd, *node_ports = ports
    host = socket.gethostname().split(".")[0]
    gres_type = "GresTypes=gpu\n" if gres else ""
    nodes = "".join(
        f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=1 "
        f"RealMemory=1000{f' Gres=gpu:{GPUS_PER_NODE}' if gres else ''} State=UNKNOWN\n"
        for name, port in zip(NODES, node_ports, strict=True)
    )
    return f"""\
ClusterName=orchtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={slurmd}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
KillWait=5
MinJobAge=300
{gres_type}{nodes}PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    """One running cluster; ``env`` is what a client (sbatch, scontrol) needs."""

    root: Path
    env: Mapping[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=dict(self.env), capture_output=True, text=True, timeout=timeout
        )

    def spawn(self, argv: list[str], name: str, user: int | None = None) -> None:
        """Start one daemon in the foreground, its stderr in log/NAME.err."""
        with (self.root / "log" / f"{name}.err").open("wb") as stderr:
            self.processes.append(
                subprocess.Popen(
                    argv,
                    env=dict(self.env),
                    user=user,
                    group=None if user is None else pwd.getpwuid(user).pw_gid,
                    extra_groups=None if user is None else [],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    start_new_session=True,
                )
            )

    def stop(self) -> None:
        """TERM every daemon started here, then KILL what is left; nothing stays running."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in reversed(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace") if path.exists() else ""


def start(*, gres: bool = True, timeout_s: float = 30) -> SlurmCluster:
    """Start munged, slurmctld and two slurmd; return once both nodes are idle."""
    root = Path(tempfile.mkdtemp(prefix="orch-slurm-"))
    root.chmod(0o711)  # the munge user must reach its own directory below
    for sub in ("state", "spool", "log", "fakegpu"):
        (root / sub).mkdir()
    munge = pwd.getpwnam("munge")
    munge_dir = root / "munge"
    munge_dir.mkdir()
    munge_dir.chmod(0o711)  # munged: "execute permissions for all required" on its socket dir
    os.chown(munge_dir, munge.pw_uid, munge.pw_gid)
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    os.chown(key, munge.pw_uid, munge.pw_gid)
    for index in range(GPUS_PER_NODE):
        os.mknod(root / "fakegpu" / f"nvidia{index}", 0o666 | 0o020000, os.makedev(195, index))
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, _free_ports(2 + len(NODES)), gres))
    if gres:
        gpus = f"{root}/fakegpu/nvidia[0-{GPUS_PER_NODE - 1}]"
        (root / "gres.conf").write_text(f"NodeName=n[1-2] Name=gpu File={gpus}\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for name in list(env):  # a client inside a job of another cluster would talk to that one
        if name.startswith(("SLURM_", "SBATCH_", "SRUN_")) and name != "SLURM_CONF":
            del env[name]
    cluster = SlurmCluster(root, env)
    try:
        cluster.spawn(
            [
                _program("munged"),
                "--foreground",
                f"--socket={munge_dir}/munge.socket",
                f"--key-file={key}",
                f"--pid-file={munge_dir}/munged.pid",
                f"--log-file={munge_dir}/munged.log",
                f"--seed-file={munge_dir}/munged.seed",
            ],
            "munged",
            user=munge.pw_uid,
        )
        _wait_for(lambda: (munge_dir / "munge.socket").exists(), 10, "munged's socket", cluster)
        daemons = [[_program("slurmctld"), "-D"]] + [
            [_program("slurmd"), "-D", "-N", name] for name in NODES
        ]
        for argv in daemons:
            cluster.spawn(argv, f"{Path(argv[0]).name}-{argv[-1]}")
        _wait_for(lambda: _idle_nodes(cluster) == len(NODES), timeout_s, "idle nodes", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _idle_nodes(cluster: SlurmCluster) -> int:
    done = cluster.run("sinfo", "--noheader", "--Node", "--format=%N %T", timeout=10)
    return sum(line.split()[1:] == ["idle"] for line in done.stdout.splitlines())


def _wait_for(ready: object, timeout_s: float, what: str, cluster: SlurmCluster) -> None:
    assert callable(ready)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        for process in cluster.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{process.args!r} exited {process.returncode} before {what}: "
                    + cluster.log("slurmctld.log")[-2000:]
                )
        time.sleep(0.1)
    raise RuntimeError(f"no {what} after {timeout_s} s: {cluster.log('slurmctld.log')[-2000:]}")
