"""How long a GPU worker takes to end after its last record, and whether the next worker
could start while it ends.

A parent imports torch and the demo's harness (as a side's fork server does) and forks
workers one after another; each starts CUDA, builds and graph-captures the suite's configs
(a worker's set-up, as lab/worker_setup.py times it), says it is done through a pipe, and
calls os._exit (as abdiff's reference worker ends). The parent times the worker's ending
(from "done" to the reap: the CUDA context's teardown) and, in turn:

- `after`: the next worker forked once the last one is reaped (abdiff today);
- `during`: the last one SIGKILLed at "done" (no code of it runs after) and the next one
  forked at once, while the kernel still tears the last one down;

and, for each, the next worker's CUDA start and context (does the teardown hold them up?)
and the time from one worker's "done" to the next one's context.

    python lab/worker_teardown.py [--suite mtp] [--repeats 6]     # on a GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import time


def child(configs: list[dict], runner_cls: type, out: int) -> None:
    import torch

    steps: dict[str, float] = {"forked": time.monotonic()}
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    steps["context"] = time.monotonic()
    for config in configs:
        params = config["params"]
        pack = runner_cls(params["backend"], device="cuda").create_run_pack(
            params["run_type"], batch_size=params["batch_size"], seq_len_q=params["seq_len_q"],
            seq_len_kv_cache=params["seq_len_kv_cache"])
        pack()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            pack()
        graph.replay()
    torch.cuda.synchronize()
    steps["done"] = time.monotonic()
    os.write(out, (json.dumps(steps) + "\n").encode())
    os._exit(0)


def fork_worker(configs: list[dict], runner_cls: type) -> tuple[int, int]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        child(configs, runner_cls, write)
    os.close(write)
    return pid, read


def read_steps(fd: int) -> dict[str, float]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="mtp")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    from worker_setup import demo_suite

    from abdiff.targets.reference.worker import _import_runner

    repo, configs = demo_suite(args.suite, "worker-teardown.")
    runner_cls = _import_runner(repo)
    rows: dict[str, dict[str, list[float]]] = {
        mode: {"ending": [], "start to context": [], "done to next context": []}
        for mode in ("after", "during")}
    pid, fd = fork_worker(configs, runner_cls)
    last = read_steps(fd)
    for i in range(2 * args.repeats):
        mode = ("after", "during")[i % 2]
        if mode == "during":
            os.kill(pid, signal.SIGKILL)
            old = pid
            pid, new_fd = fork_worker(configs, runner_cls)
            os.waitpid(old, 0)
            rows[mode]["ending"].append(time.monotonic() - last["done"])
        else:
            os.waitpid(pid, 0)
            rows[mode]["ending"].append(time.monotonic() - last["done"])
            pid, new_fd = fork_worker(configs, runner_cls)
        os.close(fd)
        fd = new_fd
        steps = read_steps(fd)
        rows[mode]["start to context"].append(steps["context"] - steps["forked"])
        rows[mode]["done to next context"].append(steps["context"] - last["done"])
        last = steps
    os.waitpid(pid, 0)
    print("mode    " + "  ".join(f"{name} (median, s)" for name in rows["after"]))
    for mode, row in rows.items():
        print(f"{mode:7} " + "  ".join(f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
                                      .ljust(len(name) + 11) for name, v in row.items()))


if __name__ == "__main__":
    main()
