"""A real single-node Slurm cluster for the srun tests, started as root and stopped after.

When `srun` already reaches a running cluster, that one is used. Otherwise, as
root with Debian's `slurm-wlm` and `munge` installed, the fixture starts
munged, slurmctld and slurmd with a generated slurm.conf for this host
(proctrack/linuxproc, no cgroups, every CPU in one partition), each daemon in
the foreground under its own process, state in a temporary folder; the tests
reach it through SLURM_CONF. Anything else: the tests that need it are skipped
with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
SLURM_CONF = """\
ClusterName=abdiff-test
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket}
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    env: dict[str, str]  # the test environment plus SLURM_CONF / MUNGE socket
    cpus: int


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "starting a Slurm cluster needs root"
    for tool in (*DAEMONS, "srun", "sinfo", "salloc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install slurm-wlm munge)"
    return None


def _wait_for_node(env: dict[str, str], root: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                              text=True, check=False)
        state = (done.stdout + done.stderr).strip()
        if state in ("idle", "mix", "alloc"):
            return
        time.sleep(0.5)
    logs = "; ".join((root / f"{d}.log").read_text(errors="replace")[-400:]
                     for d in ("slurmctld", "slurmd") if (root / f"{d}.log").exists())
    raise RuntimeError(f"the test Slurm node did not come up (sinfo: {state!r}); {logs}")


@contextlib.contextmanager
def slurm_cluster(root: Path, base_env: dict[str, str]) -> Iterator[SlurmCluster]:
    """munged, slurmctld and slurmd for this host under `root`; stopped on exit."""
    host = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    socket_path = root / "munge" / "munge.socket"
    conf.write_text(SLURM_CONF.format(host=host, cpus=cpus, root=root, socket=socket_path,
                                      ctld_port=_free_port(), slurmd_port=_free_port()),
                    encoding="utf-8")
    env = {**base_env, "SLURM_CONF": str(conf), "MUNGE_SOCKET": str(socket_path)}
    for name in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[name]
    # munged checks its key's and folders' owners: run it as root on a root-owned copy
    key = root / "munge" / "munge.key"
    if Path("/etc/munge/munge.key").is_file():
        shutil.copy("/etc/munge/munge.key", key)
    else:
        key.write_bytes(os.urandom(1024))  # one host: any key both ends share
    key.chmod(0o400)
    (root / "munge").chmod(0o700)
    commands = [
        ["munged", "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
         f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'munge.log'}",
         f"--seed-file={root / 'munge' / 'munged.seed'}"],
        ["slurmctld", "-D", "-i", "-f", str(conf)],
        ["slurmd", "-D", "-f", str(conf)],
    ]
    started: list[subprocess.Popen] = []
    try:
        for argv in commands:
            log = open(root / f"{argv[0]}.out", "wb")  # noqa: SIM115 - closed with the daemon
            started.append(subprocess.Popen(argv, env=env, stdout=log, stderr=log,
                                            stdin=subprocess.DEVNULL, start_new_session=True))
            time.sleep(1.0 if argv[0] == "munged" else 0.5)
        _wait_for_node(env, root)
        yield SlurmCluster(env, cpus)
    finally:
        for proc in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def running_cluster(env: dict[str, str]) -> bool:
    """Does `srun` here already reach a cluster with an idle node?"""
    if shutil.which("sinfo") is None:
        return False
    done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True,
                          check=False, timeout=30)
    return done.returncode == 0 and any(s in done.stdout for s in ("idle", "mix"))


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A Slurm cluster for srun: the running one, else one started for the session."""
    from conftest import git_env

    env = git_env()
    if running_cluster(env):
        yield SlurmCluster(env, os.cpu_count() or 1)
        return
    reason = _missing()
    if reason:
        pytest.skip(reason)
    with slurm_cluster(tmp_path_factory.mktemp("slurm"), env) as cluster:
        yield cluster
