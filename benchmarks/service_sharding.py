"""One epoch of TFRecord (or Arrow) shards through the tf.data service: one worker process against two.

    python -m benchmarks.service_sharding [--quick] [--files N] [--rows R] [--rounds K] [--format arrow]

Data: `tfdata_input.criteo_like` rows (label, 13 dense, 26 single-id
features) written as N TFRecord shards (`--format arrow`: Arrow shards,
read by the native Arrow op, whose record batches are handed out instead
of files). The epoch is
`make_dataset(num_epochs=1, shuffle=True, output="coo")` in batches of
4096, read through `transforms.distribute(processing_mode=
"distributed_epoch")`, which hands the files out to whichever worker asks.

Two clusters run side by side on loopback, each a dispatcher in this
process: one with one worker process, one with two. After one untimed read
each (start-up, first tracing), rounds alternate 1 worker, 2 workers, ...;
every read is a new job, so each worker builds its pipeline again. Per
read: the wall-clock seconds from asking for the first batch to the end of
the epoch ("epoch"), those from the first batch to the last ("first to
last": left out are the job's start-up, the workers learning of the job at
their heartbeat, and the client learning that the job ended, which it does
at its own heartbeat, about once a second, so "epoch" moves in steps of
about a second), and the CPU seconds each worker process spent (utime +
stime from /proc/<pid>/stat), which shows how the epoch was shared.

This process is the consumer: it receives every batch (gRPC, decompression)
and counts its rows; its CPU seconds are printed too. On a machine with few
cores it competes with the workers for them, so the ratio of 1-worker to
2-worker time is bounded by the cores free for the workers, not by the
split: read it with the CPU time per worker. Two regimes are measured:
tf.data's default threading (a worker's pipeline uses every core it can
get) and one thread per worker (`threading.private_threadpool_size=1`, as
if each worker had one core), where a worker, not the machine, is the
limit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data, 3 rounds (a smoke run)")
    parser.add_argument("--files", type=int, default=32, help="TFRecord shards (default 32)")
    parser.add_argument("--rows", type=int, default=16384, help="rows per shard (default 16384)")
    parser.add_argument("--rounds", type=int, default=5, help="timed reads per worker count and regime (default 5)")
    parser.add_argument("--format", choices=("tfrecord", "arrow"), default="tfrecord", help="the shard format")
    parser.add_argument("--serve", metavar="DISPATCHER", help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    _parser().parse_args()  # --help and a bad flag answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf

BATCH = 4096
HEARTBEAT_MS = 50  # workers learn of a new job at their heartbeat
STARTUP_S = 120


def write_data(directory: str, files: int, rows: int, shard_format: str = "tfrecord") -> str:
    """`files` shards of `rows` criteo-like rows each, with schema.json and manifest: the directory."""
    from benchmarks.tfdata_input import criteo_like
    from sparse_io import shard_name, write_arrow_shard, write_tfrecord_shard
    from sparse_io.manifest import commit_directory

    schema, table, _ = criteo_like(files * rows)
    path = os.path.join(directory, shard_format)
    os.makedirs(path)
    schema.save(path)
    write = write_arrow_shard if shard_format == "arrow" else write_tfrecord_shard
    for k in range(files):
        part = table.slice(k * rows, rows)
        write(os.path.join(path, shard_name(k, files, f".{shard_format}")), [part], schema)
    commit_directory(path)
    return path


def serve(dispatcher_address: str) -> None:
    """Run a tf.data service worker in this process until stdin closes (the worker program)."""
    from transforms.tfdata.service import load_reader_ops

    load_reader_ops()  # what a worker of ours loads: the native ops, the Arrow dataset op among them

    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher_address, heartbeat_interval_ms=HEARTBEAT_MS
    )
    worker = tf.data.experimental.service.WorkerServer(config)
    print(f"READY {os.getpid()}", flush=True)
    sys.stdin.read()
    del worker


class Cluster:
    """A dispatcher in this process and `workers` worker processes on loopback."""

    def __init__(self, workers: int):
        self.dispatcher = tf.data.experimental.service.DispatchServer(
            tf.data.experimental.service.DispatcherConfig(port=0)
        )
        address = self.dispatcher.target.split("://")[1]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "benchmarks.service_sharding", "--serve", address],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for _ in range(workers)
        ]
        deadline = time.monotonic() + STARTUP_S
        for p in self.processes:
            line = p.stdout.readline()
            if not line.startswith("READY "):
                self.close()
                raise RuntimeError(f"worker process {p.pid} did not start (exit status {p.poll()})")
        while self.dispatcher._num_workers() < workers:  # private, but the only view of registrations
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the workers did not register with the dispatcher")
            time.sleep(0.05)
        self.target = self.dispatcher.target

    def cpu_seconds(self) -> list[float]:
        """utime + stime of each worker process so far."""
        ticks = os.sysconf("SC_CLK_TCK")
        out = []
        for p in self.processes:
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out.append((int(fields[11]) + int(fields[12])) / ticks)
        return out

    def close(self) -> None:
        for p in self.processes:
            if p.stdin:
                p.stdin.close()
        for p in self.processes:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def read_epoch(cluster: Cluster, shards: str, threads: int | None) -> dict:
    """One epoch through `cluster`: rows, wall seconds (whole and after the first batch), CPU seconds.

    `threads`: each worker's pipeline runs on a private pool of that many
    threads, one op at a time (None: tf.data's defaults, all the cores).
    """
    from transforms import distribute, make_dataset

    dataset = make_dataset(shards, BATCH, shuffle=True, num_epochs=1, output="coo")
    if threads is not None:
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        options.threading.max_intra_op_parallelism = 1
        dataset = dataset.with_options(options)
    distributed = distribute(dataset, cluster.target, processing_mode="distributed_epoch")
    cpu_before = cluster.cpu_seconds()
    consumer_before = time.process_time()
    began = time.perf_counter()
    first = None
    rows = 0
    for _, label in distributed:
        rows += int(label.shape[0])
        last = time.perf_counter()
        if first is None:
            first = last
    ended = time.perf_counter()
    cpu = [after - before for before, after in zip(cpu_before, cluster.cpu_seconds())]
    consumer = time.process_time() - consumer_before
    return {
        "rows": rows,
        "epoch_s": ended - began,
        "first_to_last_s": last - first,
        "cpu_s": cpu,
        "consumer_s": consumer,
    }


def _median(reads: list[dict], key: str) -> str:
    values = [r[key] for r in reads]
    return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


REGIMES = {"default threads": None, "one thread per worker": 1}


def run(files: int, rows: int, rounds: int, shard_format: str = "tfrecord") -> None:
    tmp = tempfile.mkdtemp(prefix="sparseflow-service-sharding-")
    began = time.perf_counter()
    shards = write_data(tmp, files, rows, shard_format)
    print(f"data: {files} {shard_format} shards x {rows} rows = {files * rows} rows, batch {BATCH} "
          f"({time.perf_counter() - began:.0f} s to write); {os.cpu_count()} CPUs", flush=True)
    clusters = {1: Cluster(1), 2: Cluster(2)}
    try:
        for regime, threads in REGIMES.items():
            print(f"\n{regime}:", flush=True)
            for cluster in clusters.values():
                warm = read_epoch(cluster, shards, threads)
                assert warm["rows"] == files * rows, warm
            reads: dict[int, list[dict]] = {1: [], 2: []}
            for k in range(rounds):
                for n, cluster in clusters.items():
                    r = read_epoch(cluster, shards, threads)
                    assert r["rows"] == files * rows, r  # every row once: the epoch was split, not repeated
                    reads[n].append(r)
                    cpu = ", ".join(f"{c:.2f}" for c in r["cpu_s"])
                    print(f"  round {k + 1}, {n} worker(s): epoch {r['epoch_s']:.2f} s, first to last batch "
                          f"{r['first_to_last_s']:.2f} s, worker CPU [{cpu}] s, consumer CPU {r['consumer_s']:.2f} s",
                          flush=True)
            summarise(reads)
    finally:
        for cluster in clusters.values():
            cluster.close()


def summarise(reads: dict[int, list[dict]]) -> None:
    for n in (1, 2):
        cpu = [statistics.median(r["cpu_s"][w] for r in reads[n]) for w in range(n)]
        consumer = statistics.median(r["consumer_s"] for r in reads[n])
        print(f"  {n} worker(s): epoch {_median(reads[n], 'epoch_s')}; first to last batch "
              f"{_median(reads[n], 'first_to_last_s')}; median CPU per worker "
              f"{', '.join(f'{c:.2f}' for c in cpu)} s, consumer {consumer:.2f} s")
    for key, name in (("epoch_s", "epoch"), ("first_to_last_s", "first to last batch")):
        one = statistics.median(r[key] for r in reads[1])
        two = statistics.median(r[key] for r in reads[2])
        print(f"  ratio 1 worker / 2 workers ({name}): {one / two:.2f}")


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.serve:
        serve(args.serve)
        return
    if args.quick:
        run(8, 2048, 2, args.format)
    else:
        run(args.files, args.rows, args.rounds, args.format)


if __name__ == "__main__":
    main()
