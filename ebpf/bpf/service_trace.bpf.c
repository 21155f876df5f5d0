// SPDX-License-Identifier: GPL-2.0
/* Service RC connection discovery (R-Pingmesh §4.2.2).
 *
 * user route:   uprobes on libibverbs ibv_modify_qp / ibv_destroy_qp
 * kernel route: kprobes on ib_core ib_modify_qp_with_udata / ib_destroy_qp_user,
 *               field offsets handed in as read-only globals (from ib_core BTF)
 * both:         sched_process_exit for processes that own a traced QP
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "flow_event.h"
#include "verbs_offsets.h"

char LICENSE[] SEC("license") = "GPL";

#define IB_QP_STATE_MASK 1 /* enum ib_qp_attr_mask IB_QP_STATE */
#define IB_QPS_RTR_VALUE 2 /* enum ib_qp_state IB_QPS_RTR */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} EVENTS SEC(".maps");

/* Processes that own at least one traced QP: only their exit is reported. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} TRACKED_PIDS SEC(".maps");

/* Index 0: events dropped because the ring buffer was full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} RING_DROPS SEC(".maps");

/* Kernel route offsets (bytes), written by user space before load. */
const volatile __u32 K_OFFSETS_VALID = 0;
const volatile __u32 K_QP_NUM_OFF = 0;        /* struct ib_qp.qp_num */
const volatile __u32 K_QP_STATE_OFF = 0;      /* struct ib_qp_attr.qp_state */
const volatile __u32 K_DEST_QP_NUM_OFF = 0;   /* struct ib_qp_attr.dest_qp_num */
const volatile __u32 K_DGID_OFF = 0;          /* ib_qp_attr.ah_attr.grh.dgid */
const volatile __u32 K_FLOW_LABEL_OFF = 0;    /* ib_qp_attr.ah_attr.grh.flow_label */

static __always_inline struct flow_event *reserve_event(__u32 kind, __u32 route)
{
	struct flow_event *e = bpf_ringbuf_reserve(&EVENTS, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *drops = bpf_map_lookup_elem(&RING_DROPS, &zero);
		if (drops)
			__sync_fetch_and_add(drops, 1);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	e->kind = kind;
	e->route = route;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->ktime_ns = bpf_ktime_get_ns();
	e->local_qpn = 0;
	e->dest_qpn = 0;
	e->flow_label = 0;
	e->reserved = 0;
	__builtin_memset(e->dgid, 0, sizeof(e->dgid));
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

static __always_inline void track_current_process(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u8 one = 1;
	bpf_map_update_elem(&TRACKED_PIDS, &tgid, &one, BPF_ANY);
}

/* ---------------------------------------------------------------- user route */

SEC("uprobe")
int BPF_KPROBE(uprobe_ibv_modify_qp, void *qp, void *attr, int attr_mask)
{
	__u32 state = 0;
	if (!(attr_mask & IBV_QP_STATE_MASK))
		return 0;
	if (bpf_probe_read_user(&state, sizeof(state), attr + IBV_ATTR_QP_STATE_OFF))
		return 0;
	if (state != IBV_QPS_RTR_VALUE)
		return 0;
	struct flow_event *e = reserve_event(FLOW_EVENT_RTR, FLOW_ROUTE_USER);
	if (!e)
		return 0;
	bpf_probe_read_user(&e->local_qpn, sizeof(e->local_qpn), qp + IBV_QP_QP_NUM_OFF);
	bpf_probe_read_user(&e->dest_qpn, sizeof(e->dest_qpn), attr + IBV_ATTR_DEST_QP_NUM_OFF);
	bpf_probe_read_user(&e->flow_label, sizeof(e->flow_label), attr + IBV_ATTR_FLOW_LABEL_OFF);
	bpf_probe_read_user(e->dgid, sizeof(e->dgid), attr + IBV_ATTR_DGID_OFF);
	bpf_ringbuf_submit(e, 0);
	track_current_process();
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(uprobe_ibv_destroy_qp, void *qp)
{
	struct flow_event *e = reserve_event(FLOW_EVENT_DESTROY, FLOW_ROUTE_USER);
	if (!e)
		return 0;
	bpf_probe_read_user(&e->local_qpn, sizeof(e->local_qpn), qp + IBV_QP_QP_NUM_OFF);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* -------------------------------------------------------------- kernel route */

SEC("kprobe")
int BPF_KPROBE(kprobe_ib_modify_qp_with_udata, void *qp, void *attr, int attr_mask)
{
	__u32 state = 0;
	if (!K_OFFSETS_VALID || !(attr_mask & IB_QP_STATE_MASK))
		return 0;
	if (bpf_probe_read_kernel(&state, sizeof(state), attr + K_QP_STATE_OFF))
		return 0;
	if (state != IB_QPS_RTR_VALUE)
		return 0;
	struct flow_event *e = reserve_event(FLOW_EVENT_RTR, FLOW_ROUTE_KERNEL);
	if (!e)
		return 0;
	bpf_probe_read_kernel(&e->local_qpn, sizeof(e->local_qpn), qp + K_QP_NUM_OFF);
	bpf_probe_read_kernel(&e->dest_qpn, sizeof(e->dest_qpn), attr + K_DEST_QP_NUM_OFF);
	bpf_probe_read_kernel(&e->flow_label, sizeof(e->flow_label), attr + K_FLOW_LABEL_OFF);
	bpf_probe_read_kernel(e->dgid, sizeof(e->dgid), attr + K_DGID_OFF);
	bpf_ringbuf_submit(e, 0);
	track_current_process();
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(kprobe_ib_destroy_qp_user, void *qp)
{
	if (!K_OFFSETS_VALID)
		return 0;
	struct flow_event *e = reserve_event(FLOW_EVENT_DESTROY, FLOW_ROUTE_KERNEL);
	if (!e)
		return 0;
	bpf_probe_read_kernel(&e->local_qpn, sizeof(e->local_qpn), qp + K_QP_NUM_OFF);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* ----------------------------------------------------------- process exits */

SEC("tracepoint/sched/sched_process_exit")
int tracepoint_sched_process_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if ((__u32)id != tgid)
		return 0; /* a thread, not the process */
	if (!bpf_map_lookup_elem(&TRACKED_PIDS, &tgid))
		return 0;
	bpf_map_delete_elem(&TRACKED_PIDS, &tgid);
	struct flow_event *e = reserve_event(FLOW_EVENT_EXIT, FLOW_ROUTE_SCHED);
	if (e)
		bpf_ringbuf_submit(e, 0);
	return 0;
}
