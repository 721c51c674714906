/* Tags every frame for VLAN `vlan_id` in the skb's metadata, as a NIC that strips
 * (or inserts) tags in hardware hands them over, and passes it on to the next tc filter:
 * the VLAN tests put tagged traffic in front of ferry's programs with it. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

const volatile __u32 vlan_id = 100;

SEC("tc")
int vlan_tag(struct __sk_buff *skb)
{
	if (!skb->vlan_present)
		bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), vlan_id);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
