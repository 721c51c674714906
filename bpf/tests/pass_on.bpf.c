/* Passes every packet on to the next tc filter (TC_ACT_UNSPEC): what ferry's programs do
 * with a packet an upgrade's switch cannot place while the previous build's wait behind. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int pass_on(struct __sk_buff *skb)
{
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
