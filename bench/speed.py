"""How fast this machine is right now: the CPU time of a fixed pure-Python workload.

On the shared 2-core machines the benches run on, the same code's CPU figures swing by 1.6x
within a minute (this workload measured 41 to 69 ms back to back, the load average below 1):
the CPU a process is charged depends on its neighbours, not only on its own work. A bench that
prints CPU per mention prints this beside it, so two runs are compared at the same speed, or
not at all.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time

ROUNDS = 3000  # about 40 ms on a fast phase of the bench machine


def reference_ms(samples: int = 3) -> float:
    """The median CPU milliseconds of `samples` runs of the reference workload (lower: faster)."""
    doc = {"event": {"type": "app_mention", "text": "question number 17" * 4}, "n": list(range(50))}
    runs = []
    for _ in range(samples):
        started = time.process_time()
        for _ in range(ROUNDS):
            raw = json.dumps(doc).encode()
            hashlib.sha256(raw).hexdigest()
            json.loads(raw)
            sorted(str(i) for i in range(60))
        runs.append((time.process_time() - started) * 1000)
    return statistics.median(runs)
