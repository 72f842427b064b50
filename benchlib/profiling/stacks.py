"""CPU profile stacks: `perf script` output -> folded stacks, and each stack's category.

Folded stacks are the flamegraph tools' common format, one line per distinct
stack: ``cpu0;netperf;entry_SYSCALL_64;...;tcp_v4_rcv 12``, frames from the
root to the sampled leaf, then the number of samples. The first two frames
are the CPU the sample was taken on and the task's name, so a profile can be
split by side (by CPU) and by process. A task that is not the measurement's
(benchlib.host.disturbance) has its name marked (OTHER_TASK) and its samples form
the category "other processes". Where each side is a host of its own
(SSH targets), the CPU frame names the side too: ``server:cpu1``. Kernel frames are bare symbols;
user-space frames carry their object: ``__send [libc.so.6]``, or ``[netperf]``
where the binary has no symbols.

A stack's category is what a network engineer would call the work its
sampled leaf was doing: the leaf's own frame when it names a network layer,
else the nearest caller that does (so a memcpy inside tcp_sendmsg is TCP/IP).
"""

from __future__ import annotations

import gzip
import io
import re
from collections import Counter
from collections.abc import Iterable

from ..base import limits
from ..base.errors import ParseError

# what `perf script -F` must print for fold(): the sample line, then one line per frame
PERF_SCRIPT_FIELDS = "comm,pid,tid,cpu,event,ip,sym,dso"
UNKNOWN = "[unknown]"
OTHER_TASK = "[other] "  # before the name of a task that is not the measurement's
OTHER = "other processes"  # their samples' category: never the path's work

# comm  pid/tid  [cpu]  event:
_SAMPLE = re.compile(r"^(?P<comm>.+?)\s+(?P<pid>\d+)/\d+\s+\[(?P<cpu>\d+)\]\s+\S+:\s*$")
# address symbol+offset (object)
_FRAME = re.compile(r"^\s+[0-9a-f]+\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$")


def _frame_name(sym: str, dso: str) -> str:
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym).replace(";", ":") or UNKNOWN
    if dso.startswith("[") or dso.startswith("bpf_prog"):  # the kernel, a module, a BPF program
        return sym
    obj = dso.rsplit("/", 1)[-1] or UNKNOWN
    return f"[{obj}]" if sym == UNKNOWN else f"{sym} [{obj}]"


def fold(script: str | Iterable[str], own_pids: frozenset[int] | None = None) -> Counter:
    """Folded stack -> samples, from the text `perf script -F PERF_SCRIPT_FIELDS` printed. ``own_pids``:
    the measurement's processes (its tools, the datapath's, the kernel's threads); the task name of any
    other (idle, pid 0, aside) is marked OTHER_TASK. None: every task is the measurement's."""
    lines = script.splitlines() if isinstance(script, str) else script
    folded: Counter = Counter()
    head: str | None = None
    frames: list[str] = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if head is not None:
                folded[";".join([head, *reversed(frames)])] += 1
            head, frames = None, []
            continue
        if head is None:
            m = _SAMPLE.match(line)
            if m:
                pid = int(m["pid"])
                other = own_pids is not None and pid != 0 and pid not in own_pids
                head = f"cpu{int(m['cpu'])};{OTHER_TASK if other else ''}{m['comm'].replace(';', ':')}"
            continue
        m = _FRAME.match(line)
        if m:
            frames.append(_frame_name(m["sym"], m["dso"]))
    if head is not None:
        folded[";".join([head, *reversed(frames)])] += 1
    return folded


def folded_bytes(folded: Counter) -> bytes:
    """The folded stacks as a gzip file's bytes (the profile a raw record keeps)."""
    text = "".join(f"{stack} {n}\n" for stack, n in sorted(folded.items()))
    return gzip.compress(text.encode(), mtime=0)


def read_folded(data: bytes, name: str = "profile") -> Counter:
    """folded_bytes() back into stack -> samples; ParseError (naming ``name`` and the cap) for a profile
    beyond a cap of benchlib.base.limits: unpacked size, frames of a stack, samples."""
    folded: Counter = Counter()
    text = limits.gunzip(data, limits.PROFILE_BYTES, name, ParseError).decode()
    total = 0
    for number, line in enumerate(text.splitlines(), start=1):
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        if stack.count(";") + 1 > limits.STACK_DEPTH + 2:  # the CPU and task frames come on top
            raise ParseError(f"{name}: line {number}: a stack deeper than {limits.STACK_DEPTH} frames, the cap")
        count = int(n)
        total += count
        if count < 1 or total > limits.PROFILE_SAMPLES:
            raise ParseError(
                f"{name}: line {number}: a sample count under 1 or beyond the cap of "
                f"{limits.PROFILE_SAMPLES:,} samples per profile"
            )
        folded[stack] += count
    return folded


def empty(data: bytes) -> bool:
    """Whether a profile (folded_bytes) holds no stack at all, a zero-byte file included: only its first
    byte is unpacked. False for what is no gzip: read_folded names what is wrong with it."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            return not f.read(1)
    except (OSError, EOFError):
        return False


def split(stack: str) -> tuple[int, str, list[str]]:
    """(cpu, task name, frames root -> leaf) of a folded stack."""
    cpu, comm, *frames = stack.split(";")
    return int(cpu.rpartition(":")[2].removeprefix("cpu")), comm, frames


def on_host(folded: Counter, side: str) -> Counter:
    """A profile recorded on one side's own host, its CPU frames naming that side."""
    return Counter({f"{side}:{stack}": n for stack, n in folded.items()})


def host_side(stack: str) -> str | None:
    """The side a stack's CPU frame names (on_host), None where it names only a CPU."""
    side, sep, _ = stack.partition(";")[0].rpartition(":")
    return side if sep else None


def is_user(frame: str) -> bool:
    return frame.endswith("]") and frame != UNKNOWN


def kernel_symbols(folded: Counter) -> bool:
    """Whether any kernel frame has a symbol: none means kptr_restrict (or a perf without access to
    /proc/kallsyms) hid them, and a flamegraph of it would show only [unknown]."""
    return any(not is_user(f) and f != UNKNOWN for stack in folded for f in split(stack)[2])


# Categories in the order the report stacks them. Each frame rule is a regex on a kernel symbol;
# user-space frames are "application", or "proxy" in a proxy's task.
CATEGORIES = (
    "application",
    "proxy",
    "syscall/socket",
    "TCP/IP",
    "netfilter/conntrack",
    "eBPF",
    "devices",
    "softirq/backlog",
    "scheduler",
    "idle",
    "other",
    OTHER,
)
# kernel symbols of BPF programs and their helpers, and of netfilter and connection tracking
_EBPF = (
    r"bpf_prog_|__bpf_prog_run|bpf_dispatcher|bpf_trampoline|bpf_lwt|tcf_bpf|cls_bpf|"
    r"bpf_redirect|skb_do_redirect|bpf_skb_|bpf_sk_|bpf_map_|htab_map_|array_map_"
)
_NETFILTER = (
    r"nf_|__nf_|nft_|nft_do_chain|ipt_|ip6t_|iptable_|ip6table_|xt_|ipv4_conntrack|"
    r"ipv6_conntrack|ipv4_confirm|ipv6_confirm|hash_conntrack|init_conntrack|"
    r"ip_vs_|masquerade|nat_"
)


def _compiled(rules: tuple[tuple[str, str], ...]) -> tuple[tuple[str, re.Pattern], ...]:
    return tuple((name, re.compile(pattern)) for name, pattern in rules)


def _first_match(rules: tuple[tuple[str, re.Pattern], ...], frame: str) -> str | None:
    """The name of the first of ``rules`` whose pattern matches ``frame``."""
    return next((name for name, rule in rules if rule.match(frame)), None)


_RULES = _compiled(
    (
        (
            "idle",
            r"^(do_idle|cpu_idle|default_idle|cpuidle|native_safe_halt|arch_cpu_idle|acpi_idle|intel_idle|"
            r"poll_idle|cpu_startup_entry|pv_native_safe_halt)",
        ),
        ("eBPF", rf"^({_EBPF})"),
        ("netfilter/conntrack", rf"^({_NETFILTER})"),
        (
            "devices",
            r"^(veth_|br_|vxlan_|geneve_|udp_tunnel|tun_|ipvlan_|macvlan_|loopback_|netkit_|"
            r"dev_hard_start_xmit|__dev_queue_xmit|dev_queue_xmit|sch_direct_xmit|__qdisc_run|"
            r"pfifo_fast|fq_codel|tcf_|sch_handle_|skb_gso_|__skb_gso|validate_xmit|dev_forward_skb|"
            r"__dev_forward_skb|gro_cells|iptunnel_)",
        ),
        (
            "softirq/backlog",
            r"^(process_backlog|net_rx_action|__napi_poll|napi_|handle_softirqs|__do_softirq|"
            r"do_softirq|__local_bh_enable|local_bh_enable|irq_exit|__irq_exit|netif_rx|__netif_rx|"
            r"enqueue_to_backlog|__netif_receive_skb|netif_receive_skb|gro_|dev_gro_|"
            r"napi_gro_|run_ksoftirqd|ksoftirqd)",
        ),
        (
            "TCP/IP",
            r"^(tcp_|__tcp_|tcp4_|tcp6_|inet_|__inet_|inet6_|ip_|__ip_|ip6_|__ip6_|ipv6_|udp_|__udp|"
            r"udpv6_|icmp|raw_|dst_|fib_|fib6_|neigh_|__neigh|rt_|rt6_|sk_stream|tcp$)",
        ),
        (
            "syscall/socket",
            r"^(sock_|__sock_|sk_|__sk_|sys_|__sys_|__x64_sys_|__ia32_sys_|do_syscall|"
            r"entry_SYSCALL|syscall_|ksys_|do_sys_|__do_sys_|sockfd_|sock$|security_socket|"
            r"__skb_datagram|skb_copy_datagram|move_addr_to|import_|__sys_)",
        ),
        (
            "scheduler",
            r"^(schedule|__schedule|preempt_schedule|finish_task_switch|try_to_wake_up|ttwu_|"
            r"wake_up|__wake_up|pick_next|enqueue_task|dequeue_task|update_curr|update_load|"
            r"select_task_rq|psi_|sched_|context_switch|__switch_to|switch_mm|do_nanosleep|"
            r"hrtimer_nanosleep|futex_|ep_poll|do_epoll|do_select|do_sys_poll|core_sys_select)",
        ),
    )
)
_PROXIES = ("envoy", "haproxy", "wrk:worker", "ztunnel")


def frame_category(frame: str) -> str | None:
    """The category a kernel frame names, or None for a helper (memcpy, locks, allocation) that
    belongs to whoever called it."""
    return _first_match(_RULES, frame)


# What a frame does, for the sentences that say what one datapath does and another does not: finer than
# the categories, and only the work that tells datapaths apart. The first rule that matches wins (the
# bridge's netfilter hooks are netfilter, not forwarding). The frames of every path (TCP, the softirq,
# the transmit chain) have none.
WORK = (
    "encapsulation",
    "bridge forwarding",
    "veth pairs",
    "routing and forwarding",
    "netfilter and conntrack",
    "BPF datapath",
    "socket lookup",
)
_WORK_RULES = _compiled(
    (
        ("netfilter and conntrack", rf"^(br_nf_|ip_sabotage|{_NETFILTER})"),
        (
            "encapsulation",
            r"^(vxlan_|geneve_|udp_tunnel|iptunnel_|__iptunnel|ip_tunnel_|gre_|ipgre_|ipip_|fou_|gro_cells)",
        ),
        ("bridge forwarding", r"^(br_|__br_|fdb_|nbp_)"),
        ("veth pairs", r"^veth_"),
        ("routing and forwarding", r"^(ip_forward|ip_route_|fib_|__fib_|fib4_)"),
        ("BPF datapath", rf"^({_EBPF})"),
        (
            "socket lookup",
            r"^(__inet_lookup|inet_lookup|inet_ehashfn|__udp4_lib_lookup|udp4_lib_lookup|"
            r"udp_v4_early_demux|tcp_v4_early_demux)",
        ),
    )
)


def frame_work(frame: str) -> str | None:
    """What a kernel frame does (one of WORK), or None for a frame every path runs."""
    return _first_match(_WORK_RULES, frame)


def classify(comm: str, frames: list[str]) -> str:
    """The category of a sample: its leaf's, or the nearest caller's that has one; OTHER for a task
    that is not the measurement's, whatever it was doing."""
    if comm.startswith(OTHER_TASK):
        return OTHER
    for frame in reversed(frames):
        if is_user(frame):
            return "proxy" if comm.startswith(_PROXIES) else "application"
        category = frame_category(frame)
        if category:
            return category
    if comm.startswith("swapper"):
        return "idle"
    return "other"


def attribution(cpus: dict[str, list[int]]) -> str:
    """How a profile's samples are split by side on one kernel: "cpu" where the sides' CPU sets are
    disjoint (each sample belongs to the side whose CPU took it), else "shared" (one profile of both
    sides). A profile of each side's own host is "host" (on_host)."""
    sets = [set(c) for c in cpus.values()]
    return "cpu" if all(a.isdisjoint(b) for i, a in enumerate(sets) for b in sets[i + 1 :]) else "shared"


def rows(folded: Counter, cpus: dict[str, list[int]], shared_side: str = "total") -> list[dict]:
    """A profile as tidy rows (side, comm, stack, category, samples), merged over CPUs. ``cpus``: each
    side's CPU set. A stack whose CPU frame names its side (on_host) counts for that side. Else, where
    the sets are disjoint a sample counts for the side whose CPU took it, and a sample on no side's
    CPU is dropped; where they overlap every sample counts for ``shared_side``."""
    by_cpu = attribution(cpus) == "cpu"
    side_of = {cpu: side for side, cs in cpus.items() for cpu in cs}
    merged: Counter = Counter()
    for stack, n in folded.items():
        cpu, comm, frames = split(stack)
        side = host_side(stack) or (side_of.get(cpu) if by_cpu else shared_side)
        if side is not None:
            merged[(side, comm, ";".join(frames))] += n
    return [
        {
            "side": side,
            "comm": comm,
            "stack": stack,
            "category": classify(comm, stack.split(";") if stack else []),
            "samples": n,
        }
        for (side, comm, stack), n in sorted(merged.items())
    ]
