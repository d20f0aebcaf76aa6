"""benchmarks/serve_load.py's CPU accounting: /proc parsing and the split of CPU seconds over the timed load."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from claims_scripts import load_benchmark

serve_load = load_benchmark("serve_load.py")
linux = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")


def test_ticks_reads_utime_and_stime_after_a_name_with_spaces_and_parentheses() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    # fields after "pid (comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    line = f"123 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 {3 * tick} {2 * tick} 0 0 20 0 1 0"
    assert serve_load._ticks(line) == pytest.approx(5.0)


def test_cpu_split_subtracts_each_counter() -> None:
    before = {"main_threads": 1.5, "other_threads": 12.0, "main 7": 1.0, "other 8": 6.0, "other 9": 4.0}
    before.update({"main 5": 0.5, "other 11": 2.0})  # threads that end during the load: left out on both sides
    after = {"main_threads": 4.5, "other_threads": 30.25, "main 7": 4.5, "other 8": 16.0, "other 9": 12.0}
    after["other 10"] = 2.25  # a thread started during the load: counted from 0
    split = serve_load.cpu_split(before, after, 2.0, (35.0, 40.0))
    assert split == {
        "server_main_threads_s": 3.5,
        "server_other_threads_s": 20.25,
        "server_busiest_threads_s": [["other", 10.0], ["other", 8.0], ["main", 3.5], ["other", 2.25]],
        "load_generator_s": 2.0,
        "machine_busy_s": 35.0,
        "machine_total_s": 40.0,
    }
    assert serve_load.cpu_split({}, after, 0.0, (0.0, 0.0)) == {}


@linux
def test_server_cpu_counts_a_busy_child_and_children_cpu_counts_it_once_waited() -> None:
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        deadline = time.monotonic() + 20
        while serve_load.server_cpu(child.pid).get("main_threads", 0.0) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        used = serve_load.server_cpu(child.pid)
        assert used["main_threads"] >= 0.25  # the spin runs on the interpreter's main thread
        assert used[f"main {child.pid}"] == used["main_threads"]
        assert used["other_threads"] == sum(v for k, v in used.items() if k.startswith("other "))
        assert child.pid in serve_load._children(os.getpid())
        waited_before = serve_load.children_cpu()
    finally:
        child.kill()
        child.wait()
    assert serve_load.children_cpu() - waited_before >= 0.25
    busy, total = serve_load.machine_cpu()
    assert 0 < busy <= total
