/* Layout of one ring-buffer record, shared by the BPF programs and the Rust
 * decoder (src/event.rs mirrors these offsets; a test keeps them in step). */
#ifndef ROCEMESH_FLOW_EVENT_H
#define ROCEMESH_FLOW_EVENT_H

#include <linux/types.h>

#define FLOW_EVENT_RTR 1
#define FLOW_EVENT_DESTROY 2
#define FLOW_EVENT_EXIT 3

#define FLOW_ROUTE_USER 1
#define FLOW_ROUTE_KERNEL 2
#define FLOW_ROUTE_SCHED 3

struct flow_event {
	__u32 kind;       /* FLOW_EVENT_* */
	__u32 route;      /* FLOW_ROUTE_* */
	__u32 pid;        /* tgid */
	__u32 tid;
	__u64 cgroup_id;
	__u64 ktime_ns;
	__u32 local_qpn;
	__u32 dest_qpn;   /* RTR only */
	__u32 flow_label; /* RTR only */
	__u32 reserved;
	__u8 dgid[16];    /* RTR only */
	char comm[16];
};

_Static_assert(sizeof(struct flow_event) == 80, "flow_event layout changed");

#endif
