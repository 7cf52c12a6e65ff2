"""A private one-node SLURM cluster for the tests: bring-up, health check and tear-down.

Why a real cluster: the SLURM profile is only worth something if `sbatch`, the status
polling of snakemake-executor-plugin-slurm and the job environment really work, which a
mock cannot show. The Debian packages (SLURM 22.05, `bash .ci/install-slurm.sh`) are enough;
there is no systemd here, so the daemons are started by hand:

- everything lives in one temporary directory: `slurm.conf`, state, spool, logs, PID files,
  and munged's socket, so nothing under /etc is written and a user's own SLURM or munge
  is left alone;
- clients (sbatch, squeue, the snakemake subprocesses) find the cluster through the
  `SLURM_CONF` environment variable in `SlurmCluster.env`; it is never put into the test
  process's own environment, so the other tests never talk to it;
- free TCP ports are picked for slurmctld and slurmd, so two sessions can run side by side;
- daemons are stopped through their PID files (first SIGTERM, then SIGKILL), also when a
  test fails (the fixture's finalizer), and running jobs are cancelled first.

Without SLURM installed the fixture skips, unless `LNREPRO_REQUIRE_SLURM=1` (CI), in which
case a missing or failed cluster fails the test with the daemons' logs.

Also usable by hand while developing (`python tests/slurm_cluster.py up|down|status DIR`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PARTITION = "lnrepro"
"""Name of the test cluster's only partition (the test profile override uses it)."""

REQUIRE_ENV = "LNREPRO_REQUIRE_SLURM"
DAEMONS = ("slurmctld", "slurmd", "munged")


def _sbin(name: str) -> str | None:
    """Find a daemon binary: on PATH, or in /usr/sbin (not on a normal user's PATH)."""
    found = shutil.which(name)
    if found:
        return found
    candidate = Path("/usr/sbin") / name
    return str(candidate) if candidate.exists() else None


def missing_binaries() -> list[str]:
    """The SLURM/munge programs the cluster needs that are not installed."""
    needed = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol", "sinfo", "scancel")
    return [name for name in needed if _sbin(name) is None]


def slurm_required() -> bool:
    """CI sets LNREPRO_REQUIRE_SLURM=1: there a cluster that does not start is a failure."""
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0", "false", "no")


class SlurmClusterError(RuntimeError):
    """The cluster did not come up; the message carries the daemons' logs."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_config() -> str:
    """`slurmd -C`'s first line (NodeName=... CPUs=... RealMemory=...), the node as it is."""
    out = subprocess.run(
        [_sbin("slurmd"), "-C"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    line = out.splitlines()[0].strip()
    if not line.startswith("NodeName="):
        raise SlurmClusterError(f"unexpected `slurmd -C` output: {out!r}")
    return line


@dataclass
class SlurmCluster:
    """A running private cluster rooted at `root`."""

    root: Path
    partition: str = PARTITION
    node: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    # -- paths -----------------------------------------------------------------------
    def pid_file(self, daemon: str) -> Path:
        return self.root / "run" / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        return self.root / "log" / f"{daemon}.log"

    # -- state -----------------------------------------------------------------------
    def _pid(self, daemon: str) -> int | None:
        try:
            pid = int(self.pid_file(daemon).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # exists, owned by another user (munged runs as munge)
        return pid

    def run(self, *cmd: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        """Run a SLURM client command against this cluster."""
        return subprocess.run(
            list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def node_state(self) -> str:
        try:
            res = self.run("sinfo", "-h", "-N", "-o", "%T", timeout=15, check=False)
        except subprocess.TimeoutExpired:
            return "timeout"
        return res.stdout.strip() if res.returncode == 0 else f"error: {res.stderr.strip()}"

    def healthy(self) -> bool:
        """Controller and node daemons are running and the node accepts jobs."""
        if self._pid("slurmctld") is None or self._pid("slurmd") is None:
            return False
        state = self.node_state().rstrip("*")
        return state in ("idle", "mixed", "allocated", "completing")

    def logs(self, tail: int = 60) -> str:
        """The last lines of every daemon log, for failure messages."""
        parts = []
        for daemon in DAEMONS:
            path = self.log_file(daemon)
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                parts.append(f"---- {path} (last {len(lines)} lines) ----\n" + "\n".join(lines))
            else:
                parts.append(f"---- {path}: missing ----")
        return "\n".join(parts)

    # -- tear-down -------------------------------------------------------------------
    def stop(self, timeout: float = 20) -> None:
        """Cancel remaining jobs, then stop slurmd, slurmctld and munged by their PID files."""
        if self._pid("slurmctld") is not None:
            try:
                jobs = self.run("squeue", "-h", "-o", "%i", timeout=10, check=False).stdout.split()
                if jobs:
                    self.run("scancel", *jobs, timeout=10, check=False)
            except subprocess.TimeoutExpired:
                pass
        for daemon in ("slurmd", "slurmctld", "munged"):
            pid = self._pid(daemon)
            if pid is None:
                continue
            _terminate(pid, timeout)


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM, wait up to `timeout` s, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


CLIENTS = ("srun", "sbatch", "squeue", "scontrol", "sinfo", "scancel", "sacct")


def _client_env(cluster: SlurmCluster) -> dict[str, str]:
    """Environment for clients of this cluster: SLURM_CONF, and `bin/` first on PATH.

    `bin/` holds wrappers of the client commands that pin SLURM_CONF, because the SLURM
    plugin's job step (snakemake-executor-plugin-slurm-jobstep 0.6) removes every SLURM_*
    variable except the job's identity before it calls `srun` inside the job; without the
    wrapper that srun would look for /etc/slurm/slurm.conf, which this private cluster does
    not write. A real cluster has its config at the default place and needs none of this.
    """
    bindir = cluster.root / "bin"
    bindir.mkdir(exist_ok=True)
    for name in CLIENTS:
        real = shutil.which(name)
        if real is None:
            continue
        wrapper = bindir / name
        wrapper.write_text(f'#!/bin/sh\nSLURM_CONF="{cluster.conf}" exec "{real}" "$@"\n')
        wrapper.chmod(0o755)
    path = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "SLURM_CONF": str(cluster.conf), "PATH": path}


def _write_conf(cluster: SlurmCluster, node_line: str, ctld_port: int, slurmd_port: int, munge_socket: Path | None) -> None:
    """slurm.conf for one node that is also the controller, without cgroups or accounting."""
    r = cluster.root
    fields = dict(kv.split("=", 1) for kv in node_line.split())
    node = fields["NodeName"]
    cluster.node = node
    # Memory: leave the OS some room; jobs ask for little anyway.
    real_mb = int(fields.get("RealMemory", "2048"))
    node_fields = " ".join(
        f"{k}={v}" for k, v in fields.items() if k not in ("NodeName", "RealMemory", "UpTime")
    )
    auth_info = f"AuthInfo=socket={munge_socket}\n" if munge_socket else ""
    text = f"""# Generated by tests/slurm_cluster.py for a private one-node test cluster. Do not edit.
ClusterName=lnreprotest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
{auth_info}StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={cluster.pid_file('slurmctld')}
SlurmdPidFile={cluster.pid_file('slurmd')}
SlurmctldLogFile={cluster.log_file('slurmctld')}
SlurmdLogFile={cluster.log_file('slurmd')}
SlurmctldDebug=info
SlurmdDebug=info
# no systemd/cgroups here
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# finished jobs stay visible to squeue for 5 min: the plugin's squeue status polling needs it
MinJobAge=300
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
Waittime=0
SchedulerType=sched/backfill
NodeName={node} NodeAddr=127.0.0.1 {node_fields} RealMemory={real_mb} State=UNKNOWN
PartitionName={cluster.partition} Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
    cluster.conf.write_text(text)


def _munge_works(env: dict[str, str], socket_path: Path | None) -> bool:
    """Can a credential be made and decoded (through `socket_path`, or the default socket)?"""
    munge, unmunge = shutil.which("munge"), shutil.which("unmunge")
    if not munge or not unmunge:
        return False
    sock = ["--socket", str(socket_path)] if socket_path else []
    try:
        cred = subprocess.run([munge, "-n", *sock], capture_output=True, timeout=10, env=env)
        if cred.returncode != 0:
            return False
        dec = subprocess.run([unmunge, *sock], input=cred.stdout, capture_output=True, timeout=10, env=env)
        return dec.returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _start_munged(cluster: SlurmCluster) -> Path:
    """munged as the munge user, with socket, pid, log and seed files in `<root>/munge`
    (linked into run/ and log/ for stop() and logs()); returns the socket path."""
    import pwd

    try:
        pw = pwd.getpwnam("munge")
    except KeyError:
        raise SlurmClusterError("user 'munge' does not exist (is the munge package installed?)") from None
    mdir = cluster.root / "munge"
    mdir.mkdir(mode=0o755, exist_ok=True)
    # munged refuses directories it does not own or that others can write.
    os.chown(mdir, pw.pw_uid, pw.pw_gid)
    sock = mdir / "munge.socket"
    cmd = [
        _sbin("munged"),
        f"--socket={sock}",
        f"--pid-file={mdir / 'munged.pid'}",
        f"--log-file={mdir / 'munged.log'}",
        f"--seed-file={mdir / 'munged.seed'}",
    ]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "munge", "--", *cmd]
    for target, link in ((mdir / "munged.pid", cluster.pid_file("munged")),
                         (mdir / "munged.log", cluster.log_file("munged"))):
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise SlurmClusterError(f"munged failed to start: {' '.join(cmd)}\n{res.stdout}{res.stderr}")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if _munge_works(cluster.env, sock):
            return sock
        time.sleep(0.2)
    raise SlurmClusterError("munged started but `munge -n | unmunge` does not work")


def start_cluster(root: Path | None = None, timeout: float = 90) -> SlurmCluster:
    """Start munged, slurmctld and slurmd in `root` (a new temp dir by default) and wait
    until the node is idle. On failure everything started is stopped again and
    SlurmClusterError carries the daemons' logs."""
    missing = missing_binaries()
    if missing:
        raise SlurmClusterError(
            f"SLURM is not installed (missing: {', '.join(missing)}); run `bash .ci/install-slurm.sh`"
        )
    if os.geteuid() != 0:
        # slurmd must run as root to launch jobs; a user's real cluster is not touched.
        raise SlurmClusterError("the test cluster's daemons need root (CI runs as root)")
    if root is None:
        root = Path(tempfile.mkdtemp(prefix="lnrepro-slurm-"))
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # the munge user must reach its socket directory
    for sub in ("state", "spool", "log", "run"):
        (root / sub).mkdir(exist_ok=True)

    cluster = SlurmCluster(root=root)
    cluster.env = _client_env(cluster)
    try:
        munge_socket = _start_munged(cluster)
        _write_conf(cluster, _node_config(), _free_port(), _free_port(), munge_socket)
        for daemon in ("slurmctld", "slurmd"):
            cmd = [_sbin(daemon), "-f", str(cluster.conf)]
            if daemon == "slurmctld":
                cmd.append("-c")  # fresh state: never resume jobs of an earlier session
            res = subprocess.run(cmd, env=cluster.env, capture_output=True, text=True, timeout=60)
            if res.returncode != 0:
                raise SlurmClusterError(f"{daemon} exited with {res.returncode}: {res.stderr.strip()}")
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = cluster.node_state()
            if state.rstrip("*") == "idle":
                break
            if state.startswith(("down", "drain", "fail")):
                # a node that registered with a wrong size or came back: resume it once
                cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME", check=False)
            time.sleep(0.5)
        else:
            raise SlurmClusterError(f"node never became idle (last state: {state!r})")
        return cluster
    except BaseException as exc:
        logs = cluster.logs()
        cluster.stop()
        if isinstance(exc, SlurmClusterError):
            raise SlurmClusterError(f"{exc}\n{logs}") from None
        if isinstance(exc, (subprocess.SubprocessError, OSError)):
            raise SlurmClusterError(f"{type(exc).__name__}: {exc}\n{logs}") from exc
        raise


def _unavailable(reason: str) -> None:
    """Skip, or fail when CI requires SLURM."""
    if slurm_required():
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> SlurmCluster:
    """A running one-node cluster for the whole session, stopped at the end (also on failure)."""
    missing = missing_binaries()
    if missing:
        _unavailable(
            f"SLURM is not installed (missing {', '.join(missing)}; `bash .ci/install-slurm.sh` installs it)"
        )
    if os.geteuid() != 0:
        _unavailable("the test SLURM cluster's daemons need root")
    # Not under pytest's tmp dir: that one is 0700 and munged (as the munge user) must reach it.
    root = Path(tempfile.mkdtemp(prefix="lnrepro-slurm-"))

    def cleanup() -> None:
        # keep the daemons' logs next to pytest's temporary directories for inspection
        keep = tmp_path_factory.getbasetemp() / "slurm-logs"
        try:
            shutil.copytree(root / "log", keep, dirs_exist_ok=True, symlinks=False)
        except OSError:
            pass
        shutil.rmtree(root, ignore_errors=True)

    try:
        cluster = start_cluster(root)  # stops what it started when it fails
    except SlurmClusterError as exc:
        cleanup()
        _unavailable(f"the test SLURM cluster did not start:\n{exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
        cleanup()


def _main(argv: list[str]) -> int:
    """Developer entry point: `up DIR` starts a cluster and prints `export SLURM_CONF=...`,
    `down DIR` stops it, `status DIR` prints the node state and the logs' tails."""
    if len(argv) != 2 or argv[0] not in ("up", "down", "status"):
        print(_main.__doc__, file=sys.stderr)
        return 2
    action, root = argv[0], Path(argv[1]).resolve()
    if action == "up":
        cluster = start_cluster(root)
        print(f"export SLURM_CONF={cluster.conf} PATH={cluster.root / 'bin'}:$PATH")
        return 0
    cluster = SlurmCluster(root=root)
    cluster.env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
    if action == "down":
        cluster.stop()
        return 0
    print(cluster.node_state())
    print(cluster.logs(tail=10))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
