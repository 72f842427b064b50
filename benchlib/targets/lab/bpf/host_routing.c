// SPDX-License-Identifier: GPL-2.0
/* eBPF host-routing for the lab's ebpf-host-routing scenario.
 *
 * Two tc ingress programs per node. They ask the node's own routing and
 * neighbour tables (bpf_fib_lookup) where a pod packet goes, then hand it
 * straight to the next device, so the packet never enters the node's IP
 * forwarding path (ip_rcv -> ip_forward -> ip_output):
 *   from_pod  (on the pod veth's node end): to the wire with bpf_redirect_neigh
 *   from_wire (on the wire device): into the pod's namespace with bpf_redirect_peer
 * Anything the FIB will not forward (ARP, traffic for the node itself, an
 * unresolved pod neighbour) gets TC_ACT_OK and takes the normal stack.
 *
 * GPL because bpf_fib_lookup and the redirect helpers are GPL-only.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define AF_INET 2
#define IP_CSUM_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, check))

/* Fills *fib from the packet's IPv4 header and looks the destination up as a
 * forwarded packet arriving on this device would be. Returns the FIB verdict,
 * or -1 for anything that is not a forwardable IPv4 packet. */
static __always_inline int lookup(struct __sk_buff *skb, struct bpf_fib_lookup *fib)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + ETH_HLEN;

	if ((void *)(iph + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	if (iph->ttl <= 1)
		return -1; /* let the stack send the ICMP time-exceeded */
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->tos = iph->tos;
	fib->l4_protocol = iph->protocol;
	fib->ipv4_src = iph->saddr;
	fib->ipv4_dst = iph->daddr;
	fib->ifindex = skb->ingress_ifindex;
	/* tot_len stays 0: the kernel then checks the MTU against the skb, GSO
	 * aware. The IP header's tot_len of a 64 KB GSO packet would fail that
	 * check and send every TCP_STREAM segment back through the stack. */
	return bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
}

/* A router decrements the TTL; done here because ip_forward, which would, is
 * skipped. The IP checksum is fixed incrementally (RFC 1624). */
static __always_inline int decrement_ttl(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct iphdr *iph = data + ETH_HLEN;
	__be16 old, new;

	if ((void *)(iph + 1) > data_end)
		return -1;
	old = *(__be16 *)&iph->ttl; /* ttl and protocol share a 16-bit word */
	iph->ttl--;
	new = *(__be16 *)&iph->ttl;
	return bpf_l3_csum_replace(skb, IP_CSUM_OFF, old, new, sizeof(new));
}

SEC("tc/from_pod")
int from_pod(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib;
	int verdict = lookup(skb, &fib);

	if (verdict != BPF_FIB_LKUP_RET_SUCCESS && verdict != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_OK;
	if (decrement_ttl(skb) < 0)
		return TC_ACT_SHOT;
	/* Neighbour resolution (MACs, ARP if needed) is done by the kernel's
	 * neighbour layer on the egress device, for the next hop the FIB chose. */
	struct bpf_redir_neigh nh = { .nh_family = AF_INET, .ipv4_nh = fib.ipv4_dst };
	return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
}

SEC("tc/from_wire")
int from_wire(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib;

	/* Only a resolved neighbour gives the pod's MAC; redirect_peer needs it
	 * because the packet lands directly on the pod's ingress. */
	if (lookup(skb, &fib) != BPF_FIB_LKUP_RET_SUCCESS || fib.ifindex == skb->ingress_ifindex)
		return TC_ACT_OK;
	if (decrement_ttl(skb) < 0)
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect_peer(fib.ifindex, 0);
}

char _license[] SEC("license") = "GPL";
