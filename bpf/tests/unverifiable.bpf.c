/* Deliberately rejected by the verifier: it reads the packet without a bounds check.
 * Used to test that load errors quote the verifier's failing line. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int read_unchecked(struct __sk_buff *skb)
{
	unsigned char *data = (void *)(long)skb->data;

	return data[14] == 0x45 ? TC_ACT_SHOT : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
