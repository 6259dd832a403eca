"""SHA-256 verification throughput of a checkpoint blob against ``hashlib`` on the same bytes.

    .venv/bin/python bench/verify.py [--reps N] [--dir DIR] [--sizes 1,10,100]

"verify" is checking a stored blob against its SHA-256: ``RunFiles.verify_blob(ref)``, which
hashes the file in place through ``FileStorage.digest`` (a read-only memory map). "load+verify" is
what a resume does: ``RunFiles.read_blob(ref, verify=True)`` — read the bytes into memory (it
needs them to decode) and check them. "hashlib" is ``hashlib.sha256(data).hexdigest()`` of the
same bytes already in memory; "read" is the read without the check. The arms alternate, medians are compared.
Target: verify throughput >= 0.8 x hashlib. Prints a table; exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

from nnx_core.commit import RunFiles
from nnx_adapters.storage.fs import FileStorage

RUN_ID = "v" * 32


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=0, help="repetitions per arm (default: by size)")
    parser.add_argument("--dir", default=None, help="folder on the file system to measure (default: a temp folder)")
    parser.add_argument("--sizes", default="1,10,100", help="blob sizes in MB")
    args = parser.parse_args(argv)
    print(f"# blob verification vs hashlib.sha256 — {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.system()} {platform.machine()}, OpenSSL via hashlib")
    print(f"{'blob':>7} {'reps':>4} {'verify MB/s':>12} {'load+verify MB/s':>17} {'hashlib MB/s':>13} "
          f"{'read MB/s':>10} {'ratio':>6} {'load ratio':>10}")
    for size in (int(s) for s in args.sizes.split(",")):
        reps = args.reps or (41 if size <= 1 else 21 if size <= 10 else 9)
        folder = tempfile.mkdtemp(prefix="nnx-bench-verify-", dir=args.dir)
        try:
            files = RunFiles(FileStorage(folder), RUN_ID)
            data = os.urandom(size * 1024 * 1024)
            ref = files.put_blob(data)
            files.read_blob(ref)  # warm the page cache, as a resume right after a commit finds it
            arms = {
                "verify": lambda files=files, ref=ref: files.verify_blob(ref),
                "load+verify": lambda files=files, ref=ref: files.read_blob(ref, verify=True),
                "hashlib": lambda data=data: hashlib.sha256(data).hexdigest(),
                "read": lambda files=files, ref=ref: files.read_blob(ref, verify=False),
            }
            times: dict[str, list[float]] = {name: [] for name in arms}
            names = list(arms)
            for rep in range(reps):
                for name in names[rep % len(names) :] + names[: rep % len(names)]:
                    times[name].append(timed(arms[name]))
            mbps = {name: size / statistics.median(t) for name, t in times.items()}
            print(f"{size:>5}MB {reps:>4} {mbps['verify']:>12.0f} {mbps['load+verify']:>17.0f} {mbps['hashlib']:>13.0f} "
                  f"{mbps['read']:>10.0f} {mbps['verify'] / mbps['hashlib']:>6.2f} "
                  f"{mbps['load+verify'] / mbps['hashlib']:>10.2f}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
