"""Python publish and delivery rates next to the C ABI's, in one run.

    python3 bindings/python/bench.py [messages]

Python: `publish` one message per call, `publish_batch` (1,000 per call),
and delivery to a Python handler (per-message and batch=True), 64-byte
payloads, every payload read. C: ffi/bench/bench_ffi.c through the same
library (built here if missing). Prints msgs/s and the Python/C ratio.
"""

import statistics
import subprocess
import sys
import time
from pathlib import Path

import rill

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = b"\x5a" * 64


def rate(n, seconds):
    return n / seconds


def py_publish(n):
    with rill.Broker() as b:
        b.create_topic("bench", retention_bytes=64 << 20)
        t = time.perf_counter()
        for _ in range(n):
            b.publish("bench", PAYLOAD)
        return rate(n, time.perf_counter() - t)


def py_publish_batch(n):
    batch = [PAYLOAD] * 1000
    with rill.Broker() as b:
        b.create_topic("bench", retention_bytes=64 << 20)
        t = time.perf_counter()
        for _ in range(n // 1000):
            b.publish_batch("bench", batch)
        return rate(n // 1000 * 1000, time.perf_counter() - t)


def py_deliver(n, batch):
    total = [0]

    def one(m):
        total[0] += len(m.payload)

    def many(msgs):
        total[0] += sum(len(m.payload) for m in msgs)

    with rill.Broker() as b:
        b.create_topic("bench", retention_bytes=256 << 20)
        chunk = [PAYLOAD] * 1000
        for _ in range(n // 1000):
            b.publish_batch("bench", chunk)
        t = time.perf_counter()
        sub = b.subscribe("bench", many if batch else one, start="earliest", batch=batch)
        sub.wait_idle(timeout=120)
        seconds = time.perf_counter() - t
        assert total[0] == n // 1000 * 1000 * len(PAYLOAD), "every payload was read"
        sub.close()
        return rate(n // 1000 * 1000, seconds)


def c_rates(n):
    exe = ROOT / "target" / "release" / "bench_ffi"
    if not exe.exists():
        subprocess.run(["bash", str(ROOT / "ffi" / "bench" / "run.sh"), "1000", "1"], check=True, capture_output=True)
    out = subprocess.run([str(exe), str(n)], check=True, capture_output=True, text=True).stdout
    return {mode: float(v) for mode, v in (line.split() for line in out.splitlines() if len(line.split()) == 2)}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    rounds = 3
    py = {"publish": [], "publish_batch": [], "deliver": [], "deliver_batch": []}
    c = {"publisher": [], "batch64": []}
    for _ in range(rounds):  # interleaved, so both see the same machine state
        py["publish"].append(py_publish(n // 2))
        py["publish_batch"].append(py_publish_batch(n))
        py["deliver"].append(py_deliver(n, batch=False))
        py["deliver_batch"].append(py_deliver(n, batch=True))
        for mode, v in c_rates(n).items():
            if mode in c:
                c[mode].append(v)
    med = {k: statistics.median(v) for k, v in {**py, **c}.items()}
    print(f"{'python':<28} {'msgs/s':>12}   {'C ABI (same run)':<26} {'msgs/s':>12} {'py/C':>6}")
    rows = [
        ("publish (one per call)", "publish", "publisher_publish", "publisher"),
        ("publish_batch (1000/call)", "publish_batch", "publisher_publish_batch(64)", "batch64"),
        ("deliver, handler(msg)", "deliver", "publish -> C handler", "publisher"),
        ("deliver, batch=True", "deliver_batch", "publish -> C handler", "publisher"),
    ]
    for label, key, c_label, c_key in rows:
        print(f"{label:<28} {med[key]:>12.0f}   {c_label:<26} {med[c_key]:>12.0f} {med[key] / med[c_key]:>6.2f}")
    print("(C ABI figures are publish -> one subscriber end to end; medians of", rounds, "rounds)")


if __name__ == "__main__":
    main()
