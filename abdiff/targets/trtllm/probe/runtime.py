"""The probe inside each rank of upstream's run.py: wraps `create_run_pack`, records configs.

Activated by sitecustomize (site/), before run.py's first line. It installs an
import watcher and does nothing else until run.py imports TensorRT-LLM:

- when `tensorrt_llm` is imported, it checks that the package comes from the
  checkout under test (possibly through the compiled-parts overlay, whose
  Python files are links into the checkout); otherwise every config of the
  plan fails with the two paths named, because numbers from another tree
  would be silently wrong;
- when a module of `tensorrt_llm.tools.layer_wise_benchmarks` is executed,
  every class it defines with a `create_run_pack` method gets a wrapper.

The wrapper identifies the config of each run pack by (run_type, batch_size,
seq_len_q, seq_len_kv_cache), reads the facts from the `attn_metadata` the
pack closes over, and returns a timed run pack: CUDA events around every
call (and around `CUDAGraph.replay` when run.py replays a captured pack).
run.py creates a pack per shape for autotuning and warm-up, then one per
shape for its timed loop; a pack that received at least warmup+run calls is
the timed one, and its last `run_times` latencies become the config's record
when the next pack is created or the process ends. Calls made while
upstream's AutoTuner is in tuning mode are never counted, and nothing is
profiled before autotuning has finished: the kernels come from one extra
call under torch.profiler after the timed calls. So the record does not
depend on whether this run.py makes an untimed first call in its timed loop
(newer versions do, older ones do not).

Phase lines (`{"event": "phase", "phase": ...}`: build, autotune, prefill,
warm-up, timed) go to the record log as run.py moves on; each one restarts
the round runner's inactivity timeout, and the last one names the phase that
hung when it expires.

Events follow the worker protocol (targets/base.py RoundJob): a `start` line
whenever the config being executed changes (so the last start always names
what was running if the process dies), `facts` as soon as they are read, and
one `done` per config. Every rank writes its own log (protocol.rank_record_path);
the parent merges them (abdiff/run/ranks.py).
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from abdiff.errors import exception_line
from abdiff.run.protocol import KernelProfile
from abdiff.store.files import path_under_root
from abdiff.targets.layerwise import SHAPE_KEYS
from abdiff.targets.trtllm.probe import PLAN_ENV

PACKAGE = "tensorrt_llm"
TOOLS = "tensorrt_llm.tools.layer_wise_benchmarks"
AUTOTUNER = "tensorrt_llm._torch.autotuner"  # AutoTuner.get().is_tuning_mode inside autotune()
SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE", "WORLD_SIZE")


def _env_int(names: tuple[str, ...], default: int, environ: Any = None) -> int:
    env = os.environ if environ is None else environ
    for name in names:
        value = env.get(name, "")
        if value.strip().isdigit():
            return int(value)
    return default


def rank_from_env(environ: Any = None) -> int:
    """This process's global rank as mpirun, srun or torchrun announce it (0 alone)."""
    from abdiff.run.protocol import rank_from_env as ranks_from_env

    return ranks_from_env(environ)[0]


@dataclass
class ProbePlan:
    """What the probe of one worker process must record; written by the trtllm target."""

    record_path: str
    round: int
    facts: list[str]
    warmup_times: int
    run_times: int
    checkout: str
    run_type: str
    configs: list[dict[str, Any]]  # {"id", "batch_size", "seq_len_q", "seq_len_kv_cache"}
    backend: str | None = None
    profile_kernels: bool = True
    device: str = "auto"
    cuda_graph: bool = False
    nsys_pending: str | None = None  # done lines go here; the nsys wrapper adds kernels
    nsys_report: str | None = None  # report path prefix of `nsys profile -o`, per rank
    world_size: int = 1  # ranks of the launch: nsys reports are named as parse.py reads them
    env: dict[str, Any] = field(default_factory=dict)

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def read(cls, path: Path | str) -> ProbePlan:
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))


class ProbeError(RuntimeError):
    """The probe cannot measure this process at all (its configs are already failed)."""


@dataclass
class _Pack:
    """One run pack handed to run.py, and what was measured of it."""

    config: dict[str, Any]
    facts: dict[str, Any]
    run_pack: Any = None  # upstream's own run pack, for the kernel-capture call
    spans: list[Any] = field(default_factory=list)  # (start, end) events or ns pairs
    clocks: dict[str, Any] = field(default_factory=dict)  # NVML: {"start", "end"} readings


class Probe:
    """State of the probe in one rank."""

    def __init__(self, plan: ProbePlan, rank: int) -> None:
        from abdiff.run.protocol import RecordWriter, rank_record_path

        self.plan = plan
        self.rank = rank
        self.by_key = {
            (plan.run_type, *(int(c[k]) for k in SHAPE_KEYS)): c for c in plan.configs
        }
        self.writer = RecordWriter(rank_record_path(plan.record_path, rank))
        self.done_writer = (RecordWriter(Path(plan.nsys_pending))
                            if rank == 0 and plan.nsys_pending else self.writer)
        self.device: str | None = None
        self.sensor: Any = None  # clocks.GpuSensor on an NVIDIA GPU with nvidia-ml-py
        self.done: set[str] = set()
        self.running: str | None = None
        self.current: _Pack | None = None
        self.depth = 0
        self.started = False
        self.attributed = False  # a config's own exception is ending the process
        self.unattributed: str | None = None  # an exception outside any config
        self.most_calls: dict[str, int] = {}
        self.patched: set[int] = set()
        self.warmed: set[str] = set()  # configs whose pack was called outside autotuning
        self.phase: tuple[str, str | None] | None = None
        self.set_phase("build")  # import, KV-cache manager and model build come first

    # -- records ---------------------------------------------------------------------
    def _start(self, config: dict[str, Any]) -> None:
        if config["id"] in self.done or self.running == config["id"]:
            return
        self.running = config["id"]
        if self.writer:
            self.writer.start(config["id"])

    def set_phase(self, phase: str, config_id: str | None = None) -> None:
        """Say that run.py entered `phase` (once per change), for the timeout and its report."""
        if self.phase == (phase, config_id):
            return
        self.phase = (phase, config_id)
        if self.writer:
            self.writer.phase(phase, config_id)

    def _done(self, config: dict[str, Any], record: Any) -> None:
        if config["id"] in self.done:
            return
        self.done.add(config["id"])
        if self.done_writer:
            self.done_writer.done(config["id"], record)

    def _failed(self, config: dict[str, Any], error: str, facts: dict | None = None) -> None:
        from abdiff.store.records import RoundRecord

        self._done(config, RoundRecord("failed", error, facts=facts or {}, round=self.plan.round))

    def fail_all(self, error: str) -> None:
        """Every config of the plan not finished yet fails with `error` (nothing can run)."""
        for config in self.plan.configs:
            self._failed(config, error)

    def fatal(self, error: str) -> ProbeError:
        self.fail_all(error)
        self.attributed = True
        print(f"abdiff probe: {error}", file=sys.stderr, flush=True)
        return ProbeError(error)

    # -- the import side ---------------------------------------------------------------
    def check_origin(self, what: str, origin: str | None) -> None:
        """Refuse code that does not come from the checkout under test."""
        if origin and not path_under_root(origin, self.plan.checkout):
            raise self.fatal(
                f"{what} was imported from {os.path.realpath(origin)}, not from the checkout "
                f"{self.plan.checkout}: the checkout must come first on PYTHONPATH "
                "(see docs/trtllm.md, 'Which code runs')")

    def patch_module(self, module: Any) -> None:
        """Wrap `create_run_pack` of every class defined in this module."""
        for value in list(vars(module).values()):
            if (isinstance(value, type) and value.__module__ == module.__name__
                    and "create_run_pack" in value.__dict__ and id(value) not in self.patched):
                self.patched.add(id(value))
                self._wrap_class(value)

    def _wrap_class(self, cls: type) -> None:
        original = cls.__dict__["create_run_pack"]
        probe = self

        @functools.wraps(original)
        def create_run_pack(runner: Any, *args: Any, **kwargs: Any) -> Any:
            return probe.on_create(original, runner, args, kwargs)

        create_run_pack.__abdiff_probe__ = True  # type: ignore[attr-defined]
        cls.create_run_pack = create_run_pack  # type: ignore[attr-defined]

    # -- the run side ------------------------------------------------------------------
    def _key(self, original: Any, runner: Any, args: tuple, kwargs: dict) -> tuple | None:
        try:
            bound = inspect.signature(original).bind_partial(runner, *args, **kwargs)
        except TypeError:
            return None
        values = dict(bound.arguments)
        for name, param in inspect.signature(original).parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                values.update(values.pop(name, {}))
        try:
            return (values["run_type"], *(int(values[k]) for k in SHAPE_KEYS))
        except (KeyError, TypeError, ValueError):
            return None

    def _first_call(self) -> None:
        """Set-up deferred until run.py has imported torch, tensorrt_llm and MPI."""
        from abdiff.worker.measure import environment, gpu_sensor, resolve_device

        self.started = True
        # registered now, after torch and mpi4py, so it runs before their exit handlers
        atexit.register(self.at_exit)
        self.device = resolve_device(self.plan.device)
        if self.device == "cuda":
            self._patch_graph_replay()
        self.sensor, clocks_env = gpu_sensor(self.device)  # as the reference worker does
        if self.writer:
            module = sys.modules.get(PACKAGE)
            env = {**environment(self.device, self.sensor), **self.plan.env,
                   "tensorrt_llm": getattr(module, "__version__", None),
                   "tensorrt_llm_file": getattr(module, "__file__", None),
                   "world_size": _env_int(SIZE_VARS, 1), "cuda_graph": self.plan.cuda_graph,
                   **clocks_env}
            self.writer.env(env)

    def on_create(self, original: Any, runner: Any, args: tuple, kwargs: dict) -> Any:
        if self.depth:  # a subclass calling super().create_run_pack
            return original(runner, *args, **kwargs)
        if not self.started:
            self._first_call()
        self.finish_current()
        key = self._key(original, runner, args, kwargs)
        config = self.by_key.get(key) if key else None
        if config is not None:
            self._start(config)
        self.depth += 1
        try:
            run_pack = original(runner, *args, **kwargs)
        except BaseException as exc:
            if config is not None:
                self._failed(config, exception_line(exc))
                self.attributed = True
            raise
        finally:
            self.depth -= 1
        if config is None:
            if key and key[0] == "CTX" and self.plan.run_type == "GEN":
                self.set_phase("prefill")  # run.py fills the KV cache with CTX packs first
            return run_pack  # a pack run.py builds for something else (e.g. the KV prefill)
        from abdiff.worker.measure import find_attn_metadata, read_facts

        metadata = find_attn_metadata(run_pack)
        facts = read_facts({"attn_metadata": metadata}, self.plan.facts)
        if self.writer:
            self.writer.facts(config["id"], facts)
        self._check_backend(metadata)
        if config["id"] in self.warmed:
            self.set_phase("timed", config["id"])
        pack = _Pack(config, facts, run_pack)
        self.current = pack
        return self._wrap_pack(pack, run_pack, metadata)

    def _check_backend(self, metadata: Any) -> None:
        """DSA configs must build DSA metadata, TRTLLM configs must not (the model decides)."""
        if metadata is None or self.plan.backend not in ("DSA", "TRTLLM"):
            return
        kind = type(metadata).__name__
        is_dsa = hasattr(metadata, "kv_lens_cuda_2d") or "DSA" in kind
        if self.plan.backend == "DSA" and not is_dsa:
            raise self.fatal(f"backend DSA, but the model builds {kind}: set the suite's "
                             "target.models.DSA to a DSA model (DeepSeek-V3.2 or V4)")
        if self.plan.backend == "TRTLLM" and is_dsa:
            raise self.fatal(f"backend TRTLLM, but the model builds {kind} (DSA): set the "
                             "suite's target.models.TRTLLM to a model without DSA "
                             "(e.g. DeepSeek-R1)")

    def _span_begin(self) -> Any:
        if self.device == "cuda":
            import torch

            start = torch.cuda.Event(enable_timing=True)
            start.record()
            return start
        return time.perf_counter_ns()

    def _span_end(self, pack: _Pack, begin: Any) -> None:
        if self.device == "cuda":
            import torch

            end = torch.cuda.Event(enable_timing=True)
            end.record()
            pack.spans.append((begin, end))
        else:
            pack.spans.append((begin, time.perf_counter_ns()))

    def _clocks_before(self, pack: _Pack) -> None:
        """Read the GPU's clocks before the pack's first timed call: the one after run.py's
        warm-up calls (`warmup_times`), outside the timing events."""
        if self.sensor is not None and len(pack.spans) == self.plan.warmup_times:
            pack.clocks = {"start": self.sensor.read()}

    def _capturing(self) -> bool:
        if self.device != "cuda":
            return False
        import torch

        return bool(torch.cuda.is_current_stream_capturing())

    def _tuning(self) -> bool:
        """Is upstream's AutoTuner in tuning mode (inside run.py's `with autotune():`)?"""
        module = sys.modules.get(AUTOTUNER)
        tuner = getattr(module, "AutoTuner", None)
        try:
            return bool(tuner.get().is_tuning_mode) if tuner is not None else False
        except Exception:  # noqa: BLE001 - an AutoTuner without that attribute: not tuning
            return False

    def _wrap_pack(self, pack: _Pack, run_pack: Any, metadata: Any) -> Any:
        probe = self

        def probed_run_pack(*args: Any, **kwargs: Any) -> Any:
            if probe.depth or probe._capturing():
                return run_pack(*args, **kwargs)
            probe._start(pack.config)
            tuning = probe._tuning()
            if tuning:
                probe.set_phase("autotune", pack.config["id"])
            elif pack.config["id"] not in probe.warmed:
                probe.set_phase("warm-up", pack.config["id"])
            probe.depth += 1
            try:
                if tuning:  # autotuning is not a sample, and nothing profiles it
                    return run_pack(*args, **kwargs)
                probe._clocks_before(pack)
                begin = probe._span_begin()
                result = run_pack(*args, **kwargs)
                probe._span_end(pack, begin)
                probe.warmed.add(pack.config["id"])
                return result
            except BaseException as exc:
                probe._failed(pack.config, exception_line(exc), pack.facts)
                probe.attributed = True
                raise
            finally:
                probe.depth -= 1

        probed_run_pack.attn_metadata = metadata  # type: ignore[attr-defined]
        probed_run_pack.__wrapped__ = run_pack  # type: ignore[attr-defined]
        return probed_run_pack

    def _patch_graph_replay(self) -> None:
        """Time `CUDAGraph.replay` for the current pack: run.py replays captured packs."""
        import torch

        graph_cls = torch.cuda.CUDAGraph
        if getattr(graph_cls.replay, "__abdiff_probe__", False):
            return
        original = graph_cls.replay
        probe = self

        @functools.wraps(original)
        def replay(graph: Any) -> Any:
            pack = probe.current
            if pack is None or probe.depth:
                return original(graph)
            probe._start(pack.config)
            probe._clocks_before(pack)
            begin = probe._span_begin()
            result = original(graph)
            probe._span_end(pack, begin)
            return result

        replay.__abdiff_probe__ = True  # type: ignore[attr-defined]
        graph_cls.replay = replay  # type: ignore[method-assign, assignment]  # the probe's patch

    def finish_current(self) -> None:
        """Turn the current pack into its config's record if it was the timed one."""
        from abdiff.store.records import RoundRecord

        pack, self.current = self.current, None
        if pack is None or pack.config["id"] in self.done:
            return
        cid = pack.config["id"]
        self.most_calls[cid] = max(self.most_calls.get(cid, 0), len(pack.spans))
        wanted = self.plan.warmup_times + self.plan.run_times
        if len(pack.spans) < wanted:
            return  # an autotune or warm-up pack: run.py times another one later
        spans = pack.spans[-self.plan.run_times:]
        try:
            if self.device == "cuda":
                import torch

                torch.cuda.synchronize()
                latencies = [start.elapsed_time(end) * 1000.0 for start, end in spans]
            else:
                latencies = [(end - start) / 1000.0 for start, end in spans]
        except RuntimeError as exc:
            self._failed(pack.config, f"cannot read the timing events: {exception_line(exc)}",
                         pack.facts)
            return
        latencies = [max(value, 1e-3) for value in latencies]  # a run file needs positive numbers
        if self.sensor is not None and "start" in pack.clocks:  # the timed calls have finished
            pack.clocks["end"] = self.sensor.read()
        kernels = KernelProfile({}, {})
        if self.plan.profile_kernels and not self.plan.nsys_pending:
            try:
                kernels = self._capture_kernels(pack)
            except Exception as exc:  # noqa: BLE001 - the config fails with the reason
                self._failed(pack.config, f"the kernel-capture call after the timed calls "
                                          f"raised {exception_line(exc)}", pack.facts)
                return
        self._done(pack.config, RoundRecord("ok", None, latencies, pack.facts, kernels.counts,
                                            self.plan.round, kernel_us=kernels.us,
                                            clocks=pack.clocks))

    def _capture_kernels(self, pack: _Pack) -> KernelProfile:
        """Kernels of one extra call after the timed ones: autotuning is long over, and
        the profiler's overhead reaches no latency sample. Every rank makes this call (it
        runs the same collectives as a timed one)."""
        from abdiff.worker.measure import profile_kernels

        self.depth += 1  # neither a sample nor a graph replay of the pack
        try:
            return profile_kernels(pack.run_pack, self.device or "cpu")
        finally:
            self.depth -= 1

    def at_exit(self) -> None:
        """Last records: the final timed pack, and the configs this process could not run."""
        try:
            self.finish_current()
        except Exception as exc:  # noqa: BLE001 - never let the probe hide run.py's own exit
            print(f"abdiff probe: {exception_line(exc)}", file=sys.stderr)
        if self.unattributed:
            self.fail_all(self.unattributed)
            return
        if self.attributed or not self.done:
            return  # the next worker takes the rest (or the launcher records why none ran)
        wanted = self.plan.warmup_times + self.plan.run_times
        for config in self.plan.configs:
            seen = self.most_calls.get(config["id"], 0)
            self._failed(config, f"run.py ended without timing this config ({seen} timed calls "
                                 f"seen in one run pack, {wanted} expected)")

    def on_exception(self, exc: BaseException) -> None:
        if not self.attributed and not isinstance(exc, KeyboardInterrupt | ProbeError):
            self.unattributed = exception_line(exc)


class _LoaderProxy:
    """Runs the real loader, then a callback on the fresh module."""

    def __init__(self, inner: Any, after: Any) -> None:
        self._inner = inner
        self._after = after

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _ImportWatcher:
    """A meta-path finder that only observes: it lets the other finders find the module."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != PACKAGE and not fullname.startswith(TOOLS):
            return None
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None:
            return None
        self.probe.check_origin(fullname, spec.origin)
        if fullname.startswith(TOOLS) and spec.loader is not None:
            spec.loader = _LoaderProxy(spec.loader, self.probe.patch_module)
        return spec


def activate() -> Probe:
    """Install the probe described by the plan in ABDIFF_PROBE_JOB (called by sitecustomize)."""
    plan = ProbePlan.read(os.environ[PLAN_ENV])
    probe = Probe(plan, rank_from_env())
    if _env_int(SIZE_VARS, 1) > 1:  # the launcher mixes the ranks' lines
        from abdiff.run.protocol import redirect_rank_stderr

        redirect_rank_stderr(plan.record_path, probe.rank)
    sys.meta_path.insert(0, _ImportWatcher(probe))
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        probe.on_exception(exc)
        previous(kind, exc, tb)

    sys.excepthook = excepthook
    for name, module in list(sys.modules.items()):
        if name == PACKAGE or name.startswith(TOOLS):
            probe.check_origin(name, getattr(module, "__file__", None))
            if name.startswith(TOOLS):
                probe.patch_module(module)
    return probe
