"""mpirun and srun launchers: command lines as upstream's mpi_launch.sh and slurm_launch.sh."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from abdiff.errors import InfrastructureError, InputError
from abdiff.launchers import make_launcher
from abdiff.launchers.mpirun import MpirunLauncher
from abdiff.launchers.process import run_process
from abdiff.launchers.ranked import launch_failure, launcher_available
from abdiff.launchers.slurm import SrunLauncher
from abdiff.launchers.spec import LaunchSpec

SPEC = LaunchSpec(["python", "-u", "run.py", "config.yaml", "--batch-size", "8,32"],
                  Path("/work/checkout/examples/layer_wise_benchmarks"),
                  {"PYTHONPATH": "/probe/site:/work/checkout", "ABDIFF_PROBE_JOB": "/w/plan.json",
                   "ABDIFF_RANK_PATHS": "/work/checkout:/w"})


def tool(folder: Path, name: str, body: str) -> Path:
    """An executable shell script standing in for a launcher on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holding a fake mpirun (drops its own options, then runs the command) and srun."""
    bin_dir = tmp_path / "bin"
    tool(bin_dir, "mpirun", """
while [ $# -gt 0 ]; do
  case "$1" in
    --allow-run-as-root) shift ;;
    --np|-x) shift 2 ;;
    *) break ;;
  esac
done
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 exec "$@"
""")
    tool(bin_dir, "srun", 'echo "srun $*"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def test_mpirun_command_line_mirrors_mpi_launch_sh(fake_path: Path) -> None:
    environ = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "n1", "PMIX_RANK": "3",
               "OMPI_MCA_foo": "1", "HOME": "/root", "TLLM_AUTOTUNER_CACHE_PATH": "/cache"}
    wrapped = MpirunLauncher(8, environ=environ).wrap(SPEC)
    assert wrapped.argv == [
        "env", "-u", "OMPI_MCA_foo", "-u", "PMIX_RANK", "-u", "SLURMD_NODENAME",
        "-u", "SLURM_JOB_ID",
        "mpirun", "--allow-run-as-root", "--np", "8",
        "-x", "TLLM_AUTOTUNER_CACHE_PATH", "-x", "ABDIFF_PROBE_JOB", "-x", "ABDIFF_RANK_PATHS",
        "-x", "PYTHONPATH", *SPEC.argv]
    assert wrapped.cwd == SPEC.cwd
    assert wrapped.env == {**SPEC.env, "TLLM_AUTOTUNER_CACHE_PATH": "/cache"}  # past the allow-list


def test_mpirun_without_slurm_variables_has_no_env_prefix(fake_path: Path) -> None:
    wrapped = MpirunLauncher(2, extra_args=["--bind-to", "none"], environ={"HOME": "/"}).wrap(SPEC)
    assert wrapped.argv[:4] == ["mpirun", "--allow-run-as-root", "--np", "2"]
    assert wrapped.argv[-len(SPEC.argv) - 2:-len(SPEC.argv)] == ["--bind-to", "none"]


def test_mpirun_runs_the_command_through_the_shared_process_runner(
        fake_path: Path, tmp_path: Path) -> None:
    script = ("import os, sys; open(sys.argv[1], 'w').write("
              "os.environ['ABDIFF_PROBE_JOB'] + ' ' + os.environ['OMPI_COMM_WORLD_RANK'])")
    out = tmp_path / "out.txt"
    spec = LaunchSpec([sys.executable, "-c", script, str(out)], tmp_path,
                      {"ABDIFF_PROBE_JOB": "plan.json"})
    outcome = run_process(MpirunLauncher(1).wrap(spec), tmp_path / "logs", tmp_path / "rec",
                          timeout_s=60)
    assert outcome.returncode == 0
    assert out.read_text() == "plan.json 0"


def test_missing_mpirun_is_an_infrastructure_error(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "mpirun is not on PATH" in launcher_available("mpirun")
    with pytest.raises(InfrastructureError, match="mpirun is not on PATH"):
        MpirunLauncher(8).wrap(SPEC)
    with pytest.raises(InfrastructureError):
        make_launcher("mpirun", 8).wrap(SPEC)


def test_srun_command_line_mirrors_slurm_launch_sh(fake_path: Path) -> None:
    environ = {"SLURM_JOB_ID": "1234"}
    wrapped = SrunLauncher(16, 2, environ=environ).wrap(SPEC)
    assert wrapped.argv == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "-N", "2",
                            "--ntasks-per-node", "8", "--ntasks", "16", *SPEC.argv]
    assert wrapped.env == SPEC.env  # srun exports the whole environment to the tasks


def test_srun_in_a_container_mounts_what_the_ranks_read(fake_path: Path) -> None:
    environ = {"SLURM_JOB_ID": "1234", "CONTAINER_NAME": "layer_wise_benchmarks"}
    wrapped = SrunLauncher(8, 2, container_mounts=["/models:/models"], environ=environ).wrap(SPEC)
    i = wrapped.argv.index("--container-name")
    assert wrapped.argv[i + 1] == "layer_wise_benchmarks"
    mounts = wrapped.argv[wrapped.argv.index("--container-mounts") + 1].split(",")
    assert mounts == ["/models:/models", "/work/checkout:/work/checkout", "/w:/w",
                      f"{SPEC.cwd}:{SPEC.cwd}"]
    assert wrapped.argv[wrapped.argv.index("--container-workdir") + 1] == str(SPEC.cwd)


def test_srun_outside_an_allocation_is_refused(fake_path: Path) -> None:
    reason = launcher_available("srun", {})
    assert reason and "SLURM_JOB_ID is not set" in reason
    with pytest.raises(InfrastructureError, match="SLURM_JOB_ID"):
        SrunLauncher(8, 1, environ={}).wrap(SPEC)
    assert launcher_available("srun", {"SLURM_JOB_ID": "7"}) is None


def test_srun_missing_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InfrastructureError, match="srun is not on PATH"):
        SrunLauncher(8, 1, environ={"SLURM_JOB_ID": "7"}).wrap(SPEC)


def test_bad_rank_counts_are_input_errors() -> None:
    with pytest.raises(InputError, match="not a multiple"):
        SrunLauncher(6, 4)
    with pytest.raises(InputError):
        MpirunLauncher(0)
    with pytest.raises(InputError, match="--nodes needs --launcher srun"):
        make_launcher("mpirun", 8, 2)


def test_make_launcher_builds_these_launchers(fake_path: Path) -> None:
    assert isinstance(make_launcher("mpirun", 8), MpirunLauncher)
    srun = make_launcher("srun", 16, 2)
    assert isinstance(srun, SrunLauncher) and (srun.np, srun.nodes) == (16, 2)
    assert launcher_available("local") is None


def test_launch_failures_are_told_apart_from_rank_deaths() -> None:
    slots = ("--------------------------------------------------------------------------\n"
             "There are not enough slots available in the system to satisfy the 8\n"
             "slots that were requested by the application:\n")
    assert launch_failure(slots).startswith("There are not enough slots available")
    assert launch_failure("srun: error: Unable to allocate resources: Invalid node name") \
        == "srun: error: Unable to allocate resources: Invalid node name"
    death = ("DG_HOST_ASSERT(batch_size == __batch_size and next_n == _next_n)\n"
             "mpirun noticed that process rank 0 with PID 7 on node n1 exited on signal 6 "
             "(Aborted).\n")
    assert launch_failure(death) is None


def test_an_mpirun_that_cannot_launch_is_exit_3_with_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round whose launcher never started the job fails the whole run (exit 3), naming
    mpirun's own line, instead of blaming every config."""
    from abdiff.run.rounds import RoundSettings, run_round
    from abdiff.suites import Config
    from abdiff.targets.reference.target import ReferenceTarget

    bin_dir = tmp_path / "bin"
    tool(bin_dir, "mpirun", "echo 'There are not enough slots available in the system' >&2\n"
         "exit 1\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    settings = RoundSettings(facts=[], warmup_times=0, run_times=1)
    config = Config("GEN-TRTLLM-bs1-q1-kv8", {"backend": "TRTLLM", "run_type": "GEN",
                                              "batch_size": 1, "seq_len_q": 1,
                                              "seq_len_kv_cache": 8})
    with pytest.raises(InfrastructureError,
                       match="mpirun could not launch the worker: There are not enough slots"):
        run_round(ReferenceTarget(), MpirunLauncher(8), tmp_path, [config], settings, 0,
                  tmp_path / "round", lambda _cid, _record: None)


def _launcher_imports(path: Path) -> set[str]:
    """The abdiff.launchers modules `path` imports, at run time or for type checking alike."""
    import ast

    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        imported |= {n.split(".")[2] for n in names
                     if n.startswith("abdiff.launchers.") and n.count(".") == 2}
    return imported - {path.stem}


def test_launcher_modules_import_one_way() -> None:
    """No circle among the launcher modules (type-only imports included): implementations
    know the interfaces (spec.py, base.py, ranked.py, pool.py, process.py), never each other;
    warm.py alone picks between the pools."""
    import abdiff.launchers

    folder = Path(abdiff.launchers.__file__).parent
    graph = {p.stem: _launcher_imports(p) for p in folder.glob("*.py") if p.stem != "__init__"}
    assert graph["pool"] <= {"spec"} and "warm" not in graph["base"] | graph["process"]
    assert not graph["standby"] & {"forkserver", "warm"}
    assert not graph["forkserver"] & {"standby", "warm"}
    launchers = {"local", "mpirun", "slurm", "torchrun"}
    assert all(not graph[name] & launchers for name in launchers)
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " -> ".join([*path, module])
        if module not in done:
            for imported in graph.get(module, ()):
                visit(imported, (*path, module))
            done.add(module)

    for module in graph:
        visit(module, ())
