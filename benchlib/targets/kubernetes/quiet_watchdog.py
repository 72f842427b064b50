"""The quiet windows' watchdog (benchlib.targets.kubernetes.quiet), run as its own process.

    python -I -S quiet_watchdog.py <cgroup version 1|2> <cgroup dir>

Reads one command a line on stdin and answers each with a line: ``arm {"seconds": S, "back":
{pid: dir}}`` (thaw and move the processes back unless disarmed within S seconds), ``disarm``.
When stdin closes (benchlib exited, by SIGKILL too) it thaws, moves every process back, removes
the cgroup and exits. Standard library only, so that it starts fast and depends on nothing.
"""

import json
import os
import select
import signal
import sys
import time

RMDIR_S = 2.0  # how long the last thaw moves stragglers out (quiet.RELEASE_S: this file imports nothing of benchlib)


def thaw(version, cgroup, back):
    try:
        if version == "2":
            with open(os.path.join(cgroup, "cgroup.freeze"), "w") as f:
                f.write("0")
        else:
            with open(os.path.join(cgroup, "freezer.state"), "w") as f:
                f.write("THAWED")
    except OSError:
        return  # the cgroup is gone: nothing is frozen in it
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as f:
            pids = f.read().split()
    except OSError:
        pids = []
    for pid in pids:
        try:
            with open(os.path.join(back.get(pid, os.path.dirname(cgroup)), "cgroup.procs"), "w") as f:
                f.write(pid)
        except OSError:
            pass  # it exited meanwhile


def main():
    version, cgroup = sys.argv[1], sys.argv[2]
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe's end stops it: it must thaw first
    deadline, back = None, {}
    stdin = sys.stdin.buffer
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([stdin], [], [], timeout)
        if not ready:  # the window outlived its deadline: benchlib hangs, or is stopped
            thaw(version, cgroup, back)
            deadline = None
            continue
        line = stdin.readline().decode()
        if not line:
            break
        command, _, arg = line.strip().partition(" ")
        if command == "arm":
            plan = json.loads(arg)
            deadline, back = time.monotonic() + float(plan["seconds"]), plan["back"]
        elif command == "disarm":
            deadline = None
        try:
            sys.stdout.write("ok\n")
            sys.stdout.flush()
        except OSError:
            break
    # a child a daemon forked as its pids were read (kube-proxy's iptables-restore) is born in the
    # cgroup and keeps it busy: move again until the cgroup is empty and goes, for up to RMDIR_S
    give_up = time.monotonic() + RMDIR_S
    while True:
        thaw(version, cgroup, back)
        try:
            os.rmdir(cgroup)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > give_up:
                return
            time.sleep(0.05)


if __name__ == "__main__":
    main()
