"""Folding and classification of CPU profiles, on what `perf script` printed for a netperf TCP_RR in
the lab (tests/fixtures/perf: the host and veth-routed scenarios, client and server on CPU 0)."""

import gzip
from collections import Counter

import pytest

from benchlib.profiling import stacks
from tests.conftest import FIXTURES


def script(scenario: str) -> str:
    return gzip.decompress((FIXTURES / "perf" / f"tcp_rr-{scenario}.script.gz").read_bytes()).decode()


def sample_count(text: str) -> int:
    """Samples as perf script printed them: one header line (not indented) per sample."""
    return sum(1 for line in text.splitlines() if line and not line[0].isspace())


@pytest.fixture(scope="module", params=["host", "veth-routed"])
def folded(request) -> Counter:
    return stacks.fold(script(request.param))


def test_fold_keeps_every_sample_once():
    for scenario in ("host", "veth-routed"):
        text = script(scenario)
        assert sum(stacks.fold(text).values()) == sample_count(text) > 1000


def test_folded_stacks_start_with_cpu_and_task_and_end_at_the_sampled_leaf(folded):
    stack = max((s for s in folded if ";netperf;" in s and "tcp_sendmsg" in s), key=folded.get)
    cpu, comm, frames = stacks.split(stack)
    assert (cpu, comm) == (0, "netperf")
    # perf prints the leaf first; the folded stack runs from the root (user space) to the leaf
    assert stacks.is_user(frames[0]) and frames[0].endswith("[libc.so.6]")
    assert frames.index("entry_SYSCALL_64_after_hwframe") < frames.index("tcp_sendmsg")
    assert not stacks.is_user(frames[-1])


def test_folded_bytes_read_back_the_same(folded):
    data = stacks.folded_bytes(folded)
    assert stacks.read_folded(data) == folded
    assert len(data) < 100_000  # a 2.5 s profile at 499 Hz is a few kB compressed


def test_kernel_symbols_are_seen_and_their_absence_is_noticed(folded):
    assert stacks.kernel_symbols(folded)
    # what perf prints when kptr_restrict hides the kernel's addresses: [unknown] kernel frames
    hidden = Counter({";".join(["cpu0", "netperf", "__send [libc.so.6]", stacks.UNKNOWN, stacks.UNKNOWN]): 5})
    assert not stacks.kernel_symbols(hidden)


def test_every_sample_gets_a_known_category_and_the_network_layers_are_found(folded):
    shares = Counter()
    for row in stacks.rows(folded, {"client": [0], "server": [0]}):
        assert row["category"] in stacks.CATEGORIES
        shares[row["category"]] += row["samples"]
    total = sum(shares.values())
    assert total == sum(folded.values())
    for category in ("TCP/IP", "syscall/socket", "softirq/backlog", "devices", "scheduler", "idle"):
        assert shares[category] > 0, category
    assert shares["other"] / total < 0.02  # nearly every sample lands in a category an engineer knows


@pytest.mark.parametrize(
    "comm,frames,expected",
    [
        # a helper at the leaf belongs to its nearest caller that names a layer
        ("netperf", ["__send [libc.so.6]", "entry_SYSCALL_64", "tcp_sendmsg", "_copy_from_iter"], "TCP/IP"),
        ("netserver", ["process_backlog", "__netif_receive_skb_one_core", "_raw_spin_lock"], "softirq/backlog"),
        ("netperf", ["ip_finish_output2", "__dev_queue_xmit", "veth_xmit", "skb_clone"], "devices"),
        ("netperf", ["ip_rcv", "nf_hook_slow", "nft_do_chain", "memcmp"], "netfilter/conntrack"),
        (
            "netperf",
            ["__netif_receive_skb_core", "tcf_classify", "bpf_prog_3b185187f1855c4c_cil_from_container"],
            "eBPF",
        ),
        ("envoy", ["[envoy]"], "proxy"),
        ("netperf", ["main [netperf]", "send_omni_inner [netperf]"], "application"),
        ("swapper/0", ["secondary_startup_64", "cpu_startup_entry", "do_idle", "default_idle_call"], "idle"),
        ("kworker/0:1", ["ret_from_fork", "kthread", "worker_thread", "memset_orig"], "other"),
    ],
)
def test_classify(comm, frames, expected):
    assert stacks.classify(comm, frames) == expected


def test_sides_split_by_cpu_only_where_their_cpus_are_disjoint(folded):
    assert stacks.attribution({"client": [0], "server": [1]}) == "cpu"
    assert stacks.attribution({"client": [0], "server": [0, 1]}) == "shared"
    shared = stacks.rows(folded, {"client": [0], "server": [0]})
    assert {r["side"] for r in shared} == {"total"}
    split_rows = stacks.rows(folded, {"client": [0], "server": [1]})
    on_cpu0 = sum(n for s, n in folded.items() if s.startswith("cpu0;"))
    assert sum(r["samples"] for r in split_rows if r["side"] == "client") == on_cpu0


def test_samples_of_processes_not_the_measurements_are_their_own_category():
    # netperf, netserver and the kernel's thread are the measurement's; `sleep` (pid 6967) is not
    folded = stacks.fold(script("host"), own_pids=frozenset({6964, 6966, 77}))
    others = {stacks.split(s)[1] for s in folded if stacks.split(s)[1].startswith(stacks.OTHER_TASK)}
    assert others == {stacks.OTHER_TASK + "sleep"}
    rows = stacks.rows(folded, {"client": [0], "server": [0]})
    assert {r["category"] for r in rows if r["comm"] in others} == {stacks.OTHER}
    assert stacks.OTHER not in {r["category"] for r in rows if r["comm"] not in others}  # idle stays idle
    assert sum(folded.values()) == sum(stacks.fold(script("host")).values())


def test_what_a_frame_does_tells_datapaths_apart_and_frames_of_every_path_do_nothing_special():
    def works(scenario: str) -> set:
        return {stacks.frame_work(f) for stack in stacks.fold(script(scenario)) for f in stacks.split(stack)[2]} - {
            None
        }

    # both captured paths cross a veth pair and look sockets up; only veth-routed routes between namespaces
    assert works("host") == {"veth pairs", "socket lookup"}
    assert works("veth-routed") == {"veth pairs", "socket lookup", "routing and forwarding"}
    assert stacks.frame_work("vxlan_xmit") == "encapsulation"
    assert stacks.frame_work("br_handle_frame") == "bridge forwarding"
    # the bridge's netfilter hooks are netfilter, not forwarding; Cilium's programs are the BPF datapath
    assert stacks.frame_work("br_nf_pre_routing") == stacks.frame_work("nf_hook_slow") == "netfilter and conntrack"
    assert stacks.frame_work("bpf_prog_6deef7357e7b4530_cil_from_container") == "BPF datapath"
    assert {stacks.frame_work(f) for f in ("tcp_v4_rcv", "process_backlog", "ip_rcv", "net_rx_action")} == {None}
