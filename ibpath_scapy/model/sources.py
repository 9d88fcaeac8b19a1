"""The documents rules and kernel profiles rest on, cited by name: a mailing-list thread by
subject and date, kernel, rdma-core and OpenSM code by file and function, the IBA by section.
One spelling each, so `--list-rules`, the JSON kernel view and the HTML report agree."""

SEED_THREAD = ('linux-rdma thread "Re: [PATCH 1/2] rdma/cm: support option to allow manually '
               'setting IB path" (Jason Gunthorpe, October 2009)')
# ibpath's own contract with its users, where no protocol document says more.
CATALOGUE = "ibpath rule catalogue"
UAPI_SA = "include/uapi/rdma/ib_user_sa.h (IB_PATH_*, struct ib_path_rec_data)"
UCMA_SET_PATH = "drivers/infiniband/core/ucma.c ucma_set_ib_path"
# the layout the seed thread proposes, which the blob rules hold arrays to
SEED_LAYOUT = SEED_THREAD + " (GMP_PRIMARY | FORWARD_PRIMARY | RETURN_PRIMARY_REV)"
LS_RESPONSE = ("drivers/infiniband/core/sa_query.c ib_nl_handle_resolve_resp / "
               "ib_nl_process_good_resolve_rsp")
OPENSM_PR = "OpenSM osm_sa_path_record.c osm_pr_rcv_process, pr_rcv_build_pr"
OPENSM_PR_SELECTED = ("OpenSM osm_sa_path_record.c pr_rcv_get_path_parms (MTU, rate and "
                      "PacketLifeTime judged only when a query sets both the value's and the "
                      "selector's ComponentMask bits: \"we silently ignore cases where only the "
                      "MTU selector is defined\"), osm_pr_rcv_process (rate and MTU validated "
                      "only then); IBA 15.2.5.16 Table 205 (MTUSelector, RateSelector, "
                      "PacketLifeTimeSelector: how the MTU, Rate, PacketLifeTime asked compare)")
SA_STATUS = "OpenSM ib_types.h IB_SA_MAD_STATUS_*; IBA 15.2.4 SA MAD status"
SAQUERY_TABLE = ("infiniband-diags ibdiag_sa.c sa_query (result_cnt: payload / (AttributeOffset "
                 "x 8); none for AttributeOffset 0), sa_get_query_rec")
ACM_VERBATIM = "rdma-core ibacm prov/acmp/src/acmp.c acmp_process_sa_resp (memcpy of the SA record)"
