/* Host program run by build.rs: prints the libibverbs ABI offsets the user
 * route reads, taken from the real <infiniband/verbs.h>. */
#include <stddef.h>
#include <stdio.h>
#include <infiniband/verbs.h>

int main(void)
{
	printf("#define IBV_QP_QP_NUM_OFF %zu\n", offsetof(struct ibv_qp, qp_num));
	printf("#define IBV_ATTR_QP_STATE_OFF %zu\n", offsetof(struct ibv_qp_attr, qp_state));
	printf("#define IBV_ATTR_DEST_QP_NUM_OFF %zu\n", offsetof(struct ibv_qp_attr, dest_qp_num));
	printf("#define IBV_ATTR_DGID_OFF %zu\n", offsetof(struct ibv_qp_attr, ah_attr.grh.dgid));
	printf("#define IBV_ATTR_FLOW_LABEL_OFF %zu\n",
	       offsetof(struct ibv_qp_attr, ah_attr.grh.flow_label));
	printf("#define IBV_QP_STATE_MASK %d\n", (int)IBV_QP_STATE);
	printf("#define IBV_QPS_RTR_VALUE %d\n", (int)IBV_QPS_RTR);
	return 0;
}
