"""CPU accounting from /proc/stat, checked against a real busy loop on a known CPU."""

import os
import subprocess
import time

import pytest

from benchlib.collectors import ParseError
from benchlib.host import cpu


def test_parse_real_proc_stat_has_every_allowed_cpu():
    counters = cpu.parse_proc_stat(open("/proc/stat").read())
    assert set(os.sched_getaffinity(0)) <= set(counters)
    assert all(len(v) == len(cpu.FIELDS) for v in counters.values())


def test_busy_excludes_idle_iowait_and_guest_double_count():
    start = cpu.Snapshot(0, 0.0, {0: [0] * 10})
    # user nice system idle iowait irq softirq steal guest guest_nice
    end = cpu.Snapshot(1, 1.0, {0: [30, 10, 20, 25, 5, 5, 5, 0, 25, 5]})
    usage = cpu.side_usage(start, end, [0], ticks_per_s=100)
    assert usage["cpu_busy_cores"] == pytest.approx(0.70)  # 30+10+20+5+5 of 100, guest inside user/nice
    assert usage["cpu_busy_pct"] == pytest.approx(70.0)


def test_the_window_is_the_ticks_the_cpus_counted_not_the_wall_clock():
    """Busy time is counted at ticks, idle to the microsecond: a CPU busy through a 0.6 s window can
    show 63 busy ticks. Over the window its CPUs counted, it is 100 % busy, not 105 %."""
    start = cpu.Snapshot(0, 0.0, {0: [0] * 10, 1: [0] * 10})
    end = cpu.Snapshot(1, 0.6, {0: [60, 0, 3, 0, 0, 0, 0, 0, 0, 0], 1: [15, 0, 0, 45, 0, 0, 0, 0, 0, 0]})
    one = cpu.side_usage(start, end, [0], ticks_per_s=100)
    assert one["cpu_busy_pct"] == pytest.approx(100.0)
    both = cpu.side_usage(start, end, [0, 1], ticks_per_s=100)
    assert both["cpu_busy_cores"] == pytest.approx(78 / 61.5) and both["cpu_busy_pct"] == pytest.approx(78 / 123 * 100)


def test_side_usage_errors_are_parse_errors():
    s = cpu.Snapshot(0, 1.0, {0: [0] * 10})
    with pytest.raises(ParseError, match="window"):
        cpu.side_usage(s, s, [0], 100)
    with pytest.raises(ParseError, match="missing for CPUs \\[3\\]"):
        cpu.side_usage(s, cpu.Snapshot(1, 2.0, {0: [0] * 10}), [3], 100)
    with pytest.raises(ParseError, match="counted no tick"):
        cpu.side_usage(s, cpu.Snapshot(1, 2.0, {0: [0] * 10}), [0], 100)
    with pytest.raises(ParseError, match="went backwards"):
        cpu.side_usage(cpu.Snapshot(0, 1.0, {0: [5] * 10}), cpu.Snapshot(1, 2.0, {0: [9, 0] + [9] * 8}), [0], 100)


def test_a_busy_loop_shows_up_on_its_cpu_only():
    busy_cpu, other = sorted(os.sched_getaffinity(0))[-1], sorted(os.sched_getaffinity(0))[0]
    loop = subprocess.Popen(["taskset", "-c", str(busy_cpu), "python3", "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        first = cpu.read_local()
        time.sleep(1.0)
        last = cpu.read_local()
    finally:
        loop.kill()
        loop.wait()
    busy = cpu.side_usage(first, last, [busy_cpu], cpu.clk_tck())
    assert busy["cpu_busy_pct"] > 85
    both = cpu.side_usage(first, last, [busy_cpu, other], cpu.clk_tck())
    assert both["cpu_busy_cores"] >= busy["cpu_busy_cores"]
    assert both["cpu_busy_pct"] == pytest.approx(both["cpu_busy_cores"] / 2 * 100)


def test_a_nodes_machine_read_by_its_script_is_the_machine_read_here():
    """The Kubernetes target reads a node's machine with a shell script in a pod on it; the same script
    run on this machine gives what the lab records for it."""
    from benchlib.targets.kubernetes import MACHINE_SCRIPT, MACHINE_SEPARATOR

    text = subprocess.run(["sh", "-c", MACHINE_SCRIPT], capture_output=True, text=True, check=True).stdout
    cpuinfo, meminfo, cpus = text.split(MACHINE_SEPARATOR)
    facts = cpu.machine_facts(cpuinfo, meminfo, int(cpus))
    assert facts == cpu.machine()
    assert facts["cpu_model"] != "unknown" and facts["cpus"] >= 1 and str(facts["memory"]).endswith("kB")
