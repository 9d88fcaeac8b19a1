/*
 * layout.c - the oracle of tests/test_record_layers.py: sizes and offsets of the structs
 * ibpath's ucma, umad and ACM layers describe, as gcc lays them out, printed one per line:
 *
 *   FIELD <struct> <member> <offset> <size>
 *   SIZE <struct> <size>
 *   SAMPLE acm_msg <hex>       a RESOLVE response built with the structs below
 *   SAMPLE acm_perf <hex>      a PERF_QUERY answer, as ibacm acm_svr_perf_query builds it
 *   SAMPLE acm_perf_query <hex> a PERF_QUERY for one endpoint's address, as libacm builds it
 *   SAMPLE acm_ep <hex>        an EP_QUERY answer, as ibacm acm_svr_ep_query builds it
 *
 * ucma and umad come from the kernel's own uapi headers as installed (linux-libc-dev:
 * <rdma/rdma_user_cm.h>, <rdma/ib_user_mad.h>).  librdmacm/acm.h is not installed with
 * them, so its structs are transcribed here from rdma-core librdmacm/acm.h (struct acm_hdr,
 * struct acm_ep_addr_data with union acm_ep_info, struct acm_ep_config_data; struct
 * ibv_path_record is 64 bytes, libibverbs/sa.h).  The samples swap what ibacm and libacm
 * swap (ibacm/src/acm.c, ibacm/src/libacm.c): PERF_QUERY and EP_QUERY in network order,
 * RESOLVE's header and entries not.
 */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <rdma/ib_user_mad.h>
#include <rdma/rdma_user_cm.h>

/* rdma-core librdmacm/acm.h */
struct acm_hdr {
	uint8_t version;
	uint8_t opcode;
	uint8_t status;
	uint8_t data[3];
	uint16_t length;
	uint64_t tid;
};

struct ibv_path_record_bytes {	/* libibverbs/sa.h struct ibv_path_record: 64 bytes, packed */
	uint8_t bytes[64];
};

union acm_ep_info {
	uint8_t addr[64];
	uint8_t name[64];
	struct ibv_path_record_bytes path;
};

struct acm_ep_addr_data {
	uint32_t flags;
	uint16_t type;
	uint16_t reserved;
	union acm_ep_info info;
};

#define ACM_MAX_PROV_NAME 64

struct acm_ep_config_data {
	uint64_t dev_guid;
	uint8_t port_num;
	uint8_t phys_port_cnt;
	uint8_t rsvd[2];
	uint16_t pkey;
	uint16_t addr_cnt;
	uint8_t prov_name[ACM_MAX_PROV_NAME];
	union acm_ep_info addrs[];
};

static void sample(const char *name, const void *msg, size_t len)
{
	const unsigned char *b = msg;
	size_t i;

	printf("SAMPLE %s ", name);
	for (i = 0; i < len; i++)
		printf("%02x", b[i]);
	printf("\n");
}

#define F(s, m) printf("FIELD %s %s %zu %zu\n", #s, #m, offsetof(struct s, m), \
		       sizeof(((struct s *)0)->m))
#define S(s) printf("SIZE %s %zu\n", #s, sizeof(struct s))

int main(void)
{
	S(rdma_ucm_cmd_hdr);
	F(rdma_ucm_cmd_hdr, cmd); F(rdma_ucm_cmd_hdr, in); F(rdma_ucm_cmd_hdr, out);

	S(rdma_ucm_create_id);
	F(rdma_ucm_create_id, uid); F(rdma_ucm_create_id, response); F(rdma_ucm_create_id, ps);
	F(rdma_ucm_create_id, qp_type); F(rdma_ucm_create_id, reserved);
	S(rdma_ucm_create_id_resp);
	F(rdma_ucm_create_id_resp, id);

	S(rdma_ucm_resolve_ip);
	F(rdma_ucm_resolve_ip, src_addr); F(rdma_ucm_resolve_ip, dst_addr);
	F(rdma_ucm_resolve_ip, id); F(rdma_ucm_resolve_ip, timeout_ms);

	S(rdma_ucm_resolve_addr);
	F(rdma_ucm_resolve_addr, id); F(rdma_ucm_resolve_addr, timeout_ms);
	F(rdma_ucm_resolve_addr, src_size); F(rdma_ucm_resolve_addr, dst_size);
	F(rdma_ucm_resolve_addr, reserved); F(rdma_ucm_resolve_addr, src_addr);
	F(rdma_ucm_resolve_addr, dst_addr);

	S(rdma_ucm_resolve_route);
	F(rdma_ucm_resolve_route, id); F(rdma_ucm_resolve_route, timeout_ms);

	S(rdma_ucm_conn_param);
	F(rdma_ucm_conn_param, qp_num); F(rdma_ucm_conn_param, qkey);
	F(rdma_ucm_conn_param, private_data); F(rdma_ucm_conn_param, private_data_len);
	F(rdma_ucm_conn_param, srq); F(rdma_ucm_conn_param, responder_resources);
	F(rdma_ucm_conn_param, initiator_depth); F(rdma_ucm_conn_param, flow_control);
	F(rdma_ucm_conn_param, retry_count); F(rdma_ucm_conn_param, rnr_retry_count);
	F(rdma_ucm_conn_param, valid);

	S(ib_uverbs_ah_attr);
	F(ib_uverbs_ah_attr, dlid); F(ib_uverbs_ah_attr, sl); F(ib_uverbs_ah_attr, src_path_bits);
	F(ib_uverbs_ah_attr, static_rate); F(ib_uverbs_ah_attr, is_global);
	F(ib_uverbs_ah_attr, port_num); F(ib_uverbs_ah_attr, reserved);
	S(ib_uverbs_global_route);
	F(ib_uverbs_global_route, dgid); F(ib_uverbs_global_route, flow_label);
	F(ib_uverbs_global_route, sgid_index); F(ib_uverbs_global_route, hop_limit);
	F(ib_uverbs_global_route, traffic_class); F(ib_uverbs_global_route, reserved);

	S(rdma_ucm_ud_param);
	F(rdma_ucm_ud_param, qp_num); F(rdma_ucm_ud_param, qkey); F(rdma_ucm_ud_param, ah_attr);
	F(rdma_ucm_ud_param, private_data); F(rdma_ucm_ud_param, private_data_len);
	F(rdma_ucm_ud_param, reserved);

	S(rdma_ucm_ece);
	F(rdma_ucm_ece, vendor_id); F(rdma_ucm_ece, attr_mod);

	S(rdma_ucm_connect);
	F(rdma_ucm_connect, conn_param); F(rdma_ucm_connect, id); F(rdma_ucm_connect, reserved);
	F(rdma_ucm_connect, ece);

	S(rdma_ucm_query);
	F(rdma_ucm_query, response); F(rdma_ucm_query, id); F(rdma_ucm_query, option);
	S(rdma_ucm_query_path_resp);
	F(rdma_ucm_query_path_resp, num_paths); F(rdma_ucm_query_path_resp, reserved);
	printf("FIELD rdma_ucm_query_path_resp path_data %zu 0\n",
	       offsetof(struct rdma_ucm_query_path_resp, path_data));
	S(ib_path_rec_data);

	S(rdma_ucm_get_event);
	F(rdma_ucm_get_event, response);
	S(rdma_ucm_event_resp);
	F(rdma_ucm_event_resp, uid); F(rdma_ucm_event_resp, id); F(rdma_ucm_event_resp, event);
	F(rdma_ucm_event_resp, status); F(rdma_ucm_event_resp, param);
	F(rdma_ucm_event_resp, reserved); F(rdma_ucm_event_resp, ece);

	S(rdma_ucm_set_option);
	F(rdma_ucm_set_option, optval); F(rdma_ucm_set_option, id); F(rdma_ucm_set_option, level);
	F(rdma_ucm_set_option, optname); F(rdma_ucm_set_option, optlen);

	S(ib_user_mad_hdr);
	F(ib_user_mad_hdr, id); F(ib_user_mad_hdr, status); F(ib_user_mad_hdr, timeout_ms);
	F(ib_user_mad_hdr, retries); F(ib_user_mad_hdr, length); F(ib_user_mad_hdr, qpn);
	F(ib_user_mad_hdr, qkey); F(ib_user_mad_hdr, lid); F(ib_user_mad_hdr, sl);
	F(ib_user_mad_hdr, path_bits); F(ib_user_mad_hdr, grh_present);
	F(ib_user_mad_hdr, gid_index); F(ib_user_mad_hdr, hop_limit);
	F(ib_user_mad_hdr, traffic_class); F(ib_user_mad_hdr, gid); F(ib_user_mad_hdr, flow_label);
	F(ib_user_mad_hdr, pkey_index); F(ib_user_mad_hdr, reserved);

	S(acm_hdr);
	F(acm_hdr, version); F(acm_hdr, opcode); F(acm_hdr, status); F(acm_hdr, data);
	F(acm_hdr, length); F(acm_hdr, tid);
	S(acm_ep_addr_data);
	F(acm_ep_addr_data, flags); F(acm_ep_addr_data, type); F(acm_ep_addr_data, reserved);
	F(acm_ep_addr_data, info);
	S(acm_ep_config_data);
	F(acm_ep_config_data, dev_guid); F(acm_ep_config_data, port_num);
	F(acm_ep_config_data, phys_port_cnt); F(acm_ep_config_data, rsvd);
	F(acm_ep_config_data, pkey); F(acm_ep_config_data, addr_cnt);
	F(acm_ep_config_data, prov_name);
	printf("FIELD acm_ep_config_data addrs %zu 0\n", offsetof(struct acm_ep_config_data, addrs));

	{
		struct {
			struct acm_hdr hdr;
			struct acm_ep_addr_data data[2];
		} m = { 0 };
		const unsigned char *b = (const unsigned char *)&m;
		size_t i;

		m.hdr.version = 1;
		m.hdr.opcode = 0x81;		/* ACM_OP_RESOLVE | ACM_OP_ACK */
		m.hdr.status = 3;		/* ACM_STATUS_ENODATA */
		m.hdr.data[0] = 1;		/* src_out */
		m.hdr.data[1] = 2;		/* src_index */
		m.hdr.data[2] = 3;		/* dst_index */
		m.hdr.length = sizeof(m);
		m.hdr.tid = 0x0102030405060708ULL;
		m.data[0].flags = (1u << 1) | (1u << 30);	/* ACM_EP_FLAG_DEST | ACM_FLAGS_NODELAY */
		m.data[0].type = 0x0002;			/* ACM_EP_INFO_ADDRESS_IP */
		m.data[0].info.addr[0] = 192;
		m.data[0].info.addr[2] = 2;
		m.data[0].info.addr[3] = 1;
		m.data[1].flags = 0x2b;
		m.data[1].type = 0x0010;			/* ACM_EP_INFO_PATH */
		m.data[1].info.path.bytes[40] = 0x00;	/* DLID 58, big-endian (sa.h) */
		m.data[1].info.path.bytes[41] = 0x3a;
		m.data[1].info.path.bytes[50] = 0xff;	/* P_Key 0xffff */
		m.data[1].info.path.bytes[51] = 0xff;
		printf("SAMPLE acm_msg ");
		for (i = 0; i < sizeof(m); i++)
			printf("%02x", b[i]);
		printf("\n");
	}
	{
		/* acm_svr_perf_query: the request's header with ACK, src_out counters */
		struct {
			struct acm_hdr hdr;
			uint64_t perf_data[7];		/* ACM_MAX_COUNTER */
		} m = { 0 };
		int i;

		m.hdr.version = 1;
		m.hdr.opcode = 0x82;		/* ACM_OP_PERF_QUERY | ACM_OP_ACK */
		m.hdr.data[0] = 7;		/* src_out: the number of counters */
		m.hdr.data[1] = 1;		/* src_index: the request's endpoint index */
		m.hdr.length = htobe16(sizeof(m));
		m.hdr.tid = 0x1122334455667788ULL;
		for (i = 0; i < 7; i++)
			m.perf_data[i] = htobe64(0x0100000000000000ULL * (i + 1) + 1000 + i);
		sample("acm_perf", &m, sizeof(m));
	}
	{
		/* ib_acm_query_perf_ep_addr: resolve_data[0] as acm_format_ep_addr fills it */
		struct {
			struct acm_hdr hdr;
			struct acm_ep_addr_data data[1];
		} m = { 0 };

		m.hdr.version = 1;
		m.hdr.opcode = 0x02;		/* ACM_OP_PERF_QUERY */
		m.hdr.length = htobe16(sizeof(m));
		m.data[0].flags = 1u << 0;	/* ACM_EP_FLAG_SOURCE */
		m.data[0].type = 0x0002;	/* ACM_EP_INFO_ADDRESS_IP */
		m.data[0].info.addr[0] = 198;
		m.data[0].info.addr[1] = 51;
		m.data[0].info.addr[2] = 100;
		m.data[0].info.addr[3] = 7;
		sample("acm_perf_query", &m, sizeof(m));
	}
	{
		/* acm_svr_ep_query: ep_data after the header, two addresses' string_buf */
		static unsigned char buf[sizeof(struct acm_hdr) + sizeof(struct acm_ep_config_data)
					 + 2 * sizeof(union acm_ep_info)];
		struct acm_hdr *hdr = (struct acm_hdr *)buf;
		struct acm_ep_config_data *ep = (struct acm_ep_config_data *)(buf + sizeof(*hdr));

		hdr->version = 1;
		hdr->opcode = 0x83;		/* ACM_OP_EP_QUERY | ACM_OP_ACK */
		hdr->data[0] = 2;		/* src_out: the endpoint index asked */
		hdr->length = htobe16(sizeof(buf));
		ep->dev_guid = htobe64(0x0002c90300a1b2c3ULL);
		ep->port_num = 2;
		ep->phys_port_cnt = 2;
		ep->pkey = htobe16(0x8001);
		ep->addr_cnt = htobe16(2);
		snprintf((char *)ep->prov_name, ACM_MAX_PROV_NAME, "%s", "ibacmp");
		snprintf((char *)ep->addrs[0].name, 64, "%s", "192.0.2.1");
		snprintf((char *)ep->addrs[1].name, 64, "%s", "fe80::2:c903:a1:b2c3");
		sample("acm_ep", buf, sizeof(buf));
	}
	return 0;
}
