-- The tshark engine's helper postdissector (ibpath_scapy/tshark_engine.py), loaded beside the
-- plugin with a second -X lua_script. Package data: not part of the Wireshark plugin.
--
-- Capture facts the plugin cannot give and tshark's JSON output would drop, from a helper
-- postdissector loaded with a second -X lua_script (ibpath_scapy/tshark_engine.py's docstring):
-- - the netlink cooked header's pkttype (bytes 0-1: Wireshark 4.0's netlink dissector reads past
--   it without a field);
-- - the header fields of the netlink messages Wireshark dissects itself ("Netlink message": a
--   header-only message, or a control message; only longer non-control messages go to the
--   plugin). These are Wireshark's own netlink.hdr_* fields with their offsets, copied because
--   -J keeps protocol nodes only and "Netlink message" is a text item (its position shows as a
--   {"filtered": ...} stand-in);
-- - a RESOLVE message to the kernel (pkttype 7) that carries NLM_F_REQUEST: only resolvers send
--   RESOLVE to the kernel, so it is an answer, which the plugin (following the flag) dissected
--   as a request. The helper hands a copy with NLM_F_REQUEST cleared to the plugin's own RDMA
--   netlink dissector, which adds its response view under the helper's node.
local p = Proto("ibpath_engine", "ibpath audit engine: capture facts")
local F = {
  pkttype = ProtoField.uint16("ibpath_engine.nl_pkttype", "Netlink cooked pkttype"),
  len = ProtoField.uint32("ibpath_engine.nlmsg_len", "nlmsg_len"),
  type = ProtoField.uint16("ibpath_engine.nlmsg_type", "nlmsg_type"),
  flags = ProtoField.uint16("ibpath_engine.nlmsg_flags", "nlmsg_flags"),
  seq = ProtoField.uint32("ibpath_engine.nlmsg_seq", "nlmsg_seq"),
  pid = ProtoField.uint32("ibpath_engine.nlmsg_pid", "nlmsg_pid"),
  offset = ProtoField.uint32("ibpath_engine.nlmsg_offset", "nlmsghdr offset in the frame"),
}
p.fields = {F.pkttype, F.len, F.type, F.flags, F.seq, F.pid, F.offset}
local hatype = Field.new("netlink.hatype")
local H = {len = Field.new("netlink.hdr_len"), type = Field.new("netlink.hdr_type"),
           flags = Field.new("netlink.hdr_flags"), seq = Field.new("netlink.hdr_seq"),
           pid = Field.new("netlink.hdr_pid")}
local NL = {len = Field.new("ibpath.nl.nlmsg_len"), client = Field.new("ibpath.nl.rdma_client"),
            op = Field.new("ibpath.nl.rdma_op"), flags = Field.new("ibpath.nl.nlmsg_flags")}
local rdma = nil
function p.init()
  local tab = DissectorTable.get("netlink.protocol")
  if tab ~= nil then rdma = tab:get_dissector(20) end
end
function p.dissector(tvb, pinfo, tree)
  if hatype() == nil or tvb:len() < 2 then return end
  local t = tree:add(p, tvb(0, 2))
  t:add(F.pkttype, tvb(0, 2))
  for _, fi in ipairs({H.len()}) do t:add(F.offset, fi.offset):set_generated() end
  for _, k in ipairs({"len", "type", "flags", "seq", "pid"}) do
    for _, fi in ipairs({H[k]()}) do t:add(F[k], fi.value):set_generated() end
  end
  if tvb(0, 2):uint() ~= 7 or rdma == nil then return end
  local lens, clients, ops, flags = {NL.len()}, {NL.client()}, {NL.op()}, {NL.flags()}
  for i, fi in ipairs(lens) do
    if clients[i] and clients[i].value == 4 and ops[i].value == 0 and flags[i].value % 2 == 1 then
      local off = fi.offset
      local n = math.min(fi.value, tvb:len() - off)
      if n >= 16 then
        local ba = tvb(off, n):bytes()
        ba:set_index(6, ba:get_index(6) - 1)
        rdma:call(ba:tvb("RESOLVE answer read as a response"), pinfo, t)
      end
    end
  end
end
register_postdissector(p)
