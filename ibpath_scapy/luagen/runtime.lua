----------------------------------------------------------------------------------------------
-- ibpath runtime: checks and state that span packets (ICRC/VCRC, transaction matching, RMPP
-- reassembly) and the registration that chains Wireshark's own InfiniBand dissector. Layer
-- code above is generated; this part is the same for every generation.
----------------------------------------------------------------------------------------------

local UD_SEND_ONLY = 0x64
local MAD_SIZE, SA_HDR, SA_MAD_HDR, SA_DATA = 256, 20, 56, 200

local RT = {
  icrc = ProtoField.uint8("ibpath.check.icrc", "ICRC", base.DEC, {[0] = "Bad", [1] = "Good"}),
  vcrc = ProtoField.uint8("ibpath.check.vcrc", "VCRC", base.DEC, {[0] = "Bad", [1] = "Good"}),
  icrc_calc = ProtoField.uint32("ibpath.check.icrc_calculated", "ICRC calculated", base.HEX),
  response_in = ProtoField.framenum("ibpath.mad.response_in", "Response in", base.NONE, frametype.RESPONSE),
  request_in = ProtoField.framenum("ibpath.mad.request_in", "Request in", base.NONE, frametype.REQUEST),
  response_time = ProtoField.relative_time("ibpath.mad.response_time", "Response time"),
  reassembled_in = ProtoField.framenum("ibpath.rmpp.reassembled_in", "Reassembled in", base.NONE),
  segment = ProtoField.framenum("ibpath.rmpp.segment", "RMPP segment", base.NONE),
  record_count = ProtoField.uint32("ibpath.sa.record_count", "Records", base.DEC),
}
ib_main.fields = {RT.icrc, RT.vcrc, RT.icrc_calc, RT.response_in, RT.request_in,
                  RT.response_time, RT.reassembled_in, RT.segment, RT.record_count}
local EX_CRC = ProtoExpert.new("ibpath.check.crc_bad", "CRC mismatch", expert.group.CHECKSUM, expert.severity.ERROR)
local EX_RMPP = ProtoExpert.new("ibpath.rmpp.incomplete", "RMPP segment of a transfer not (yet) complete", expert.group.REASSEMBLE, expert.severity.NOTE)
-- Dissector:call turns the built-in dissector's bounds exception into a Lua error; keep the
-- verdict as a malformed-packet expert and go on with ibpath's own (bounds-checked) view.
local EX_BUILTIN = ProtoExpert.new("ibpath.builtin_malformed", "Wireshark's dissector found the packet malformed", expert.group.MALFORMED, expert.severity.ERROR)
EXPERT_LIST[#EXPERT_LIST + 1] = EX_BUILTIN
EXPERT_LIST[#EXPERT_LIST + 1] = EX_CRC
EXPERT_LIST[#EXPERT_LIST + 1] = EX_RMPP

-- CRC-32 (IEEE, reflected) and CRC-16/0x100B (reflected), table driven ------------------------
local CRC32_T, CRC16_T = {}, {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if ib_band(c, 1) ~= 0 then c = ib_bxor(ib_rshift(c, 1), 0xEDB88320) else c = ib_rshift(c, 1) end
  end
  CRC32_T[i] = c
  local d = i
  for _ = 1, 8 do
    if ib_band(d, 1) ~= 0 then d = ib_bxor(ib_rshift(d, 1), 0xD008) else d = ib_rshift(d, 1) end
  end
  CRC16_T[i] = d
end

local bxor, band, rshift = ib_bxor, ib_band, ib_rshift
if ib_bitlib then bxor, band, rshift = ib_bitlib.bxor, ib_bitlib.band, ib_bitlib.rshift end

-- Works on raw byte strings; BitOp's signed results are fine in between (it reduces its
-- inputs modulo 2^32) and folded to unsigned at the end.
local function crc32(s, crc)
  crc = crc or 0xFFFFFFFF
  local byte = string.byte
  for i = 1, #s do
    crc = bxor(rshift(crc, 8), CRC32_T[band(bxor(crc, byte(s, i)), 0xFF)])
  end
  return crc % 4294967296
end

local function crc16(s)
  local crc = 0xFFFF
  local byte = string.byte
  for i = 1, #s do
    crc = bxor(rshift(crc, 8), CRC16_T[band(bxor(crc, byte(s, i)), 0xFF)])
  end
  return bxor(crc, 0xFFFF) % 65536
end

-- ICRC bytes are little-endian on the wire; Scapy's (and the generated field's) value reads
-- them big-endian: compare in that form.
local function byteswap32(x)
  return ib_bor(ib_bor(ib_lshift(ib_band(x, 0xFF), 24), ib_lshift(ib_band(ib_rshift(x, 8), 0xFF), 16)),
                ib_bor(ib_lshift(ib_band(ib_rshift(x, 16), 0xFF), 8), ib_band(ib_rshift(x, 24), 0xFF)))
end

-- RoCEv2 (Linux rxe_icrc.c): 8 bytes 0xFF for the LRH, IP TOS/TTL/checksum (v4) or traffic
-- class/flow label/hop limit (v6), UDP checksum and BTH Resv8a taken as ones. The IP and UDP
-- headers are outside the UDP payload tvb ibpath is given, so this runs in a postdissector on
-- the frame, for the frames the BTH hook marked (field extractors for ip/udp would make
-- Wireshark build a tree for every frame).
local function rocev2_icrc(frame, bth_off, icrc_at)
  local udp_off = bth_off - 8
  local ip, ip_off
  if udp_off >= 20 and frame(udp_off - 20, 1):uint() == 0x45 and frame(udp_off - 11, 1):uint() == 17 then
    ip_off = udp_off - 20
    ip = frame(ip_off, 20):bytes()
    ip:set_index(1, 0xFF); ip:set_index(8, 0xFF); ip:set_index(10, 0xFF); ip:set_index(11, 0xFF)
  elseif udp_off >= 40 and ib_rshift(frame(udp_off - 40, 1):uint(), 4) == 6 and frame(udp_off - 34, 1):uint() == 17 then
    ip_off = udp_off - 40
    ip = frame(ip_off, 40):bytes()
    ip:set_index(0, ib_bor(ip:get_index(0), 0x0F))
    ip:set_index(1, 0xFF); ip:set_index(2, 0xFF); ip:set_index(3, 0xFF); ip:set_index(7, 0xFF)
  else
    return nil
  end
  local udp = frame(udp_off, 8):bytes()
  udp:set_index(6, 0xFF); udp:set_index(7, 0xFF)
  local rest = frame(bth_off, icrc_at - bth_off):bytes()
  rest:set_index(4, 0xFF)
  local crc = crc32(string.rep("\255", 8))
  crc = crc32(ip:raw(), crc)
  crc = crc32(udp:raw(), crc)
  crc = crc32(rest:raw(), crc)
  return ib_bxor(crc, 0xFFFFFFFF)
end

-- Native IB (checked against a real ibdump capture): the LRH VL nibble, or the whole LRH when
-- a GRH follows, GRH TClass/FlowLabel/HopLmt and BTH Resv8a taken as ones.
local function native_icrc(tvb, lrh_off, icrc_at)
  local b = tvb(lrh_off, icrc_at - lrh_off):bytes()
  local bth = 8
  if ib_band(b:get_index(1), 3) == 3 then
    for i = 0, 7 do b:set_index(i, 0xFF) end
    if b:len() >= 48 then
      b:set_index(8, ib_bor(b:get_index(8), 0x0F))
      b:set_index(9, 0xFF); b:set_index(10, 0xFF); b:set_index(11, 0xFF); b:set_index(15, 0xFF)
    end
    bth = 48
  else
    b:set_index(0, ib_bor(b:get_index(0), 0xF0))
  end
  if b:len() > bth + 4 then b:set_index(bth + 4, 0xFF) end
  return ib_bxor(crc32(b:raw()), 0xFFFFFFFF)
end

local function show_icrc(t, range, want, calc)
  local good = byteswap32(calc) == want
  local it = t:add(RT.icrc, range, good and 1 or 0):set_generated()
  if not good then
    t:add(RT.icrc_calc, range, byteswap32(calc)):set_generated()
    it:add_proto_expert_info(EX_CRC, "ICRC mismatch")
  end
end

HOOKS["BTH"] = function(tvb, pinfo, t, off, o, ctx, v)
  if not ctx.show then return end
  local icrc_at = ctx.limit
  if icrc_at + 4 > tvb:len() or v.icrc == nil then return end
  if ctx.encap == "rocev2" then
    -- the tvb is the whole frame (the RoCEv2 entry is a postdissector): IP and UDP are in it
    local calc = rocev2_icrc(tvb, off, icrc_at)
    if calc ~= nil then show_icrc(t, tvb(icrc_at, 4), v.icrc, calc) end
    return
  end
  local lrh_off = ctx.at["LRH"]
  if lrh_off == nil then return end
  show_icrc(t, tvb(icrc_at, 4), v.icrc, native_icrc(tvb, lrh_off, icrc_at))
  local lrh = ctx.v["LRH"]
  if lrh ~= nil and lrh.vcrc ~= nil and icrc_at + 6 <= tvb:len() then
    local vgood = crc16(tvb(lrh_off, icrc_at + 4 - lrh_off):raw()) == lrh.vcrc
    local vi = t:add(RT.vcrc, tvb(icrc_at + 4, 2), vgood and 1 or 0):set_generated()
    if not vgood then vi:add_proto_expert_info(EX_CRC, "VCRC mismatch") end
  end
end

-- Transaction matching by TID ---------------------------------------------------------------
-- State is gathered on the first pass whether or not a tree is built (tshark -2 and the GUI
-- dissect the first pass without one), straight from the MAD's bytes: MAD header offsets 1
-- (class), 3 (method), 8 (TID); RMPP header 25 (type), 26 (flags), 28 (segment), 32 (paylen).
local tid_requests, tid_responses = {}, {}
local rmpp_open, rmpp_done, rmpp_part_of = {}, {}, {}

-- The MAD's first 36 bytes as one Lua string (one call into Wireshark instead of a TvbRange
-- per field: on a capture of SA traffic these reads are most of what the plugin costs).
local MAD_HEAD = 36
local function mad_head(tvb, mad_off)
  local n = math.min(MAD_HEAD, tvb:len() - mad_off)
  if n < 16 then return nil end
  return tvb:raw(mad_off, n)
end

local function tid_key(h)
  -- class and the exact 64-bit TID, as bytes (numbers lose precision above 2^53)
  return string.sub(h, 2, 2) .. string.sub(h, 9, 16)
end

local function track_tid(h, pinfo)
  local key = tid_key(h)
  local is_resp = ib_band(string.byte(h, 4), 0x80) ~= 0
  if not pinfo.visited then
    if is_resp then
      if tid_responses[key] == nil then tid_responses[key] = {frame = pinfo.number, ts = pinfo.abs_ts} end
    elseif tid_requests[key] == nil then
      tid_requests[key] = {frame = pinfo.number, ts = pinfo.abs_ts}
    end
  end
  return key, is_resp
end

local function u32(ba, i)
  return ((ba:get_index(i) * 256 + ba:get_index(i + 1)) * 256 + ba:get_index(i + 2)) * 256 + ba:get_index(i + 3)
end

-- Returns true when this MAD is one segment of a multi-segment RMPP DATA transfer.
local function track_rmpp(tvb, pinfo, mad_off, h)
  if mad_off + MAD_SIZE > tvb:len() or #h < MAD_HEAD or string.byte(h, 2) ~= 3 then return false end
  local rtype, flags = string.byte(h, 26), ib_band(string.byte(h, 27), 7)
  if ib_band(flags, 1) == 0 or rtype ~= 1 or flags == 7 then return false end
  if pinfo.visited then return true end
  local key = tostring(pinfo.src) .. ">" .. tostring(pinfo.dst) .. ":" .. tid_key(h)
  local st = rmpp_open[key]
  if st == nil then st = {segs = {}, frames = {}, last = nil}; rmpp_open[key] = st end
  local b29, b30, b31, b32 = string.byte(h, 29, 32)
  local n = ((b29 * 256 + b30) * 256 + b31) * 256 + b32
  if n >= 1 and n <= 4096 then
    st.segs[n] = tvb(mad_off, MAD_SIZE):bytes()
    st.frames[n] = pinfo.number
    if ib_band(flags, 4) ~= 0 then st.last = n end
  end
  if st.last == nil then return true end
  for k = 1, st.last do if st.segs[k] == nil then return true end end
  local pad = (MAD_SIZE - 36) - u32(st.segs[st.last], 32)
  if pad < 0 or pad > SA_DATA then pad = 0 end
  local total = SA_MAD_HDR + st.last * SA_DATA - pad
  local ba = st.segs[1]:subset(0, SA_MAD_HDR)
  for k = 1, st.last do ba:append(st.segs[k]:subset(SA_MAD_HDR, SA_DATA)) end
  ba = ba:subset(0, total)
  -- rewritten as one FIRST|LAST transfer so that the generated SA code counts every record
  ba:set_index(26, ib_bor(ib_band(ba:get_index(26), 0xF8), 7))
  local pl = SA_HDR + total - SA_MAD_HDR
  ba:set_index(28, 0); ba:set_index(29, 0); ba:set_index(30, 0); ba:set_index(31, 1)
  ba:set_index(32, 0); ba:set_index(33, ib_band(ib_rshift(pl, 16), 0xFF))
  ba:set_index(34, ib_band(ib_rshift(pl, 8), 0xFF)); ba:set_index(35, ib_band(pl, 0xFF))
  local stride = math.max(ba:get_index(44) * 256 + ba:get_index(45), 8) * 8
  rmpp_done[pinfo.number] = {bytes = ba, frames = st.frames, last = st.last,
                             records = math.floor((total - SA_MAD_HDR) / stride)}
  for k = 1, st.last do rmpp_part_of[st.frames[k]] = pinfo.number end
  rmpp_open[key] = nil
  return true
end

local function note_reassembly(pinfo)
  local done = rmpp_done[pinfo.number]
  if done ~= nil then
    pinfo.cols.info:append(string.format(" [RMPP reassembled: %d records]", done.records))
  end
  return done
end

HOOKS["MAD"] = function(tvb, pinfo, t, off, o, ctx, v)
  if ctx.reassembled then return end
  local h = mad_head(tvb, off)
  if h == nil then return end
  local key, is_resp = track_tid(h, pinfo)
  if is_resp then
    local req = tid_requests[key]
    if req ~= nil and req.frame < pinfo.number then
      t:add(RT.request_in, req.frame):set_generated()
      local d = pinfo.abs_ts - req.ts
      local secs = math.floor(d)
      t:add(RT.response_time, NSTime.new(secs, math.floor((d - secs) * 1e9))):set_generated()
    end
  else
    local resp = tid_responses[key]
    if resp ~= nil and resp.frame > pinfo.number then
      t:add(RT.response_in, resp.frame):set_generated()
    end
  end
end

HOOKS["SAHeader"] = function(tvb, pinfo, t, off, o, ctx, v)
  if ctx.reassembled then
    t:add(RT.record_count, v.records_count or 0):set_generated()
    return
  end
  local mad_off = ctx.at["MAD"]
  if mad_off == nil then return end
  local h = mad_head(tvb, mad_off)
  if h == nil or not track_rmpp(tvb, pinfo, mad_off, h) then
    if v.records_count ~= nil then
      t:add(RT.record_count, v.records_count):set_generated()
      if v.records_count > 1 then pinfo.cols.info:append(string.format(" [%d records]", v.records_count)) end
    end
    return
  end
  local done = note_reassembly(pinfo)
  if done == nil then
    local target = rmpp_part_of[pinfo.number]
    if target ~= nil then
      t:add(RT.reassembled_in, target):set_generated()
    else
      t:add_proto_expert_info(EX_RMPP)
    end
    return
  end
  for k = 1, done.last do t:add(RT.segment, done.frames[k]):set_generated() end
  local rtvb = done.bytes:tvb("Reassembled RMPP")
  local sub = {limit = rtvb:len(), v = {}, at = {}, encap = ctx.encap, reassembled = true, show = true}
  D["MAD"](rtvb, pinfo, t, 0, sub)
end

-- Without a tree nothing is shown: only the state above is kept, from a handful of bytes.
local function track_only(tvb, pinfo, bth_off)
  local mad_off = bth_off + 20
  if mad_off + 24 > tvb:len() then return end
  local b = tvb:raw(bth_off, math.min(20 + MAD_HEAD, tvb:len() - bth_off))
  local b6, b7, b8 = string.byte(b, 6, 8)
  local s18, s19, s20 = string.byte(b, 18, 20)
  if (b6 * 256 + b7) * 256 + b8 > 1 and (s18 * 256 + s19) * 256 + s20 > 1 then return end
  local h = string.sub(b, 21)
  track_tid(h, pinfo)
  if track_rmpp(tvb, pinfo, mad_off, h) then note_reassembly(pinfo) end
end

-- Registration ------------------------------------------------------------------------------
local function call_builtin(builtin, tvb, pinfo, tree)
  if builtin == nil then return end
  -- A frame the capture cut short (captured < wire length) makes Wireshark's dissector throw
  -- BoundsError, which Dissector.call does not turn into a Lua error: it unwinds through Lua
  -- and leaks Lua's C-call count, until after ~100 such frames every call fails with "C stack
  -- overflow" (tests/test_fuzz.py). Handed the captured bytes only, it throws
  -- ReportedBoundsError, which comes back to pcall.
  if tvb:len() < tvb:reported_len() then
    if tvb:len() == 0 then return end
    tvb = tvb:range(0, tvb:len()):tvb()
  end
  local ok, err = pcall(builtin.call, builtin, tvb, pinfo, tree)
  if not ok then
    tree:add_proto_expert_info(EX_BUILTIN, "Wireshark's dissector: " .. tostring(err):gsub("^.-: ", ""))
  end
end

-- tshark -r without -V, a filter or -e passes no tree: then only the state is kept. A tree's
-- root has text up to 4.4, but a faked one (-T fields, -Y) has none from 4.6 on; tostring()
-- says "has item=true" for both on 4.0 to 4.6 (0.1-0.2 µs a call, measured).
local function has_tree(tree)
  return tree.text ~= nil or string.find(tostring(tree), "has item=true", 1, true) ~= nil
end

local function new_ctx(limit, encap, tree)
  return {limit = limit, v = {}, at = {}, encap = encap, show = has_tree(tree)}
end

-- With a tree, ibpath's layers from `first` (at off) on; without one (tshark -r with no -V or
-- filter), only the state that spans packets (TIDs, RMPP), read from the BTH at bth.
local function dissect_or_track(first, tvb, pinfo, tree, off, bth, limit, encap)
  if has_tree(tree) then
    D[first](tvb, pinfo, tree, off, new_ctx(limit, encap, tree))
  else
    track_only(tvb, pinfo, bth)
  end
end

-- The BTH offset of a native-IB UD SEND (what carries MADs), or nil.
local function native_wanted(tvb, off, limit)
  if limit - off < 8 + 12 then return nil end
  local lnh = ib_band(tvb(off + 1, 1):uint(), 3)
  local bth = off + 8
  if lnh == 3 then bth = bth + 40 elseif lnh ~= 2 then return nil end
  if bth + 12 <= limit and tvb(bth, 1):uint() == UD_SEND_ONLY then return bth end
  return nil
end

-- RoCEv2: a postdissector, not a wrapper of UDP 4791. Any Lua hook costs every frame it sees
-- (bench/README.md): a wrapper also pays for calling the built-in dissector through Lua, a
-- postdissector does not, and it leaves Wireshark's own tree as it is. Wireshark's InfiniBand
-- dissector sets the ports to the QPs (port type IBQP), so one read of pinfo.dst_port sends
-- every data frame away; only QP0/QP1 frames go on to find their UDP header.
local PT_NONE, PT_IBQP, ROCEV2_PORT = 0, 10, "\018\183"  -- UDP destination port 4791, big-endian

-- True when an IPv4 header (any IHL) or an IPv6 header without extension headers, protocol
-- UDP, ends at the 0-based offset udp of s. Without it a native-IB packet whose DLID, P_Key
-- or QPN reads 4791 (0x12B7) would be taken for a RoCEv2 one.
local function after_ip_header(s, udp)
  for ihl = 5, 15 do
    local ip = udp - 4 * ihl
    if ip < 0 then break end
    if string.byte(s, ip + 1) == 0x40 + ihl and string.byte(s, ip + 10) == 17 then return true end
  end
  local ip6 = udp - 40
  return ip6 >= 0 and math.floor(string.byte(s, ip6 + 1) / 16) == 6 and string.byte(s, ip6 + 7) == 17
end

-- The BTH offset and the end of the UDP payload of a RoCEv2 MAD frame, or nil: the first UDP
-- header (within the first 128 bytes, right after an IP header) whose destination port is
-- 4791 and whose next byte is a UD SEND opcode. Whatever lies below IP (VLAN tags, cooked
-- headers) needs no parser here.
local function rocev2_locate(tvb)
  local n = math.min(tvb:len(), 128 + 8 + 12)
  if n < 8 + 12 then return nil end
  local s = tvb:raw(0, n)
  local at = string.find(s, ROCEV2_PORT, 3, true)
  while at ~= nil do
    local udp = at - 3  -- 0-based offset of the UDP header
    local bth = udp + 8
    if bth + 12 <= tvb:len() and string.byte(s, bth + 1) == UD_SEND_ONLY
        and after_ip_header(s, udp) then
      local ulen = string.byte(s, at + 2) * 256 + string.byte(s, at + 3)
      local limit = tvb:len()
      if ulen >= 8 + 12 and udp + ulen < limit then limit = udp + ulen end
      return bth, limit
    end
    at = string.find(s, ROCEV2_PORT, at + 1, true)
  end
  return nil
end

-- Native IB in ERF records (ibdump): Wireshark reads the ERF header into the pseudo-header, so
-- the frame's tvb starts at the LRH, and the ERF type is not visible to Lua without a field
-- extractor, which would make Wireshark build a tree for every frame (5x slower). An
-- InfiniBand record is recognised by its LRH PktLen matching the record length (+2 for the
-- VCRC), which an Ethernet frame never does by accident in practice; ibpath's own layers
-- then check LNH and the BTH opcode (native_wanted).
local function native_locate(tvb)
  if tvb:len() < 8 or ib_band(tvb(4, 2):uint(), 0x7FF) * 4 + 2 ~= tvb:len() then return nil end
  return 0, tvb:len()
end

-- The frame a wrapper of a built-in encapsulation handler (below) has dissected: the
-- postdissector leaves it alone.
local wrapped_frame = nil

local header_only_rdma  -- below, with the netlink code
local post = Proto("ibpath.post", "ibpath (RoCEv2 and native-IB MADs, header-only RDMA netlink messages)")
function post.dissector(tvb, pinfo, tree)
  if pinfo.dst_port > 1 then return end
  local pt = pinfo.port_type
  if pt == PT_NONE then return header_only_rdma(tvb, pinfo, tree) end
  if pt ~= PT_IBQP then return end
  local bth, limit = rocev2_locate(tvb)
  if bth ~= nil then
    return dissect_or_track("BTH", tvb, pinfo, tree, bth, bth, limit, "rocev2")
  end
  if wrapped_frame == pinfo.number then return end
  local off
  off, limit = native_locate(tvb)
  bth = off and native_wanted(tvb, off, limit)
  if bth ~= nil then dissect_or_track("LRH", tvb, pinfo, tree, off, bth, limit, "ib") end
end
register_postdissector(post)

-- Raw LINKTYPE_INFINIBAND and exported PDUs for "infiniband" (whose tvb starts with the
-- export tags): wrap the built-in handler of each encapsulation. ERF, which every ibdump
-- capture uses, is left to the postdissector above: a Lua wrapper costs every frame it sees a
-- call of the built-in handler through Lua (5x tshark on a capture of RC data, against
-- 1.8x for the postdissector's one read of pinfo.dst_port).
local wtap_table = DissectorTable.get("wtap_encap")

local function wrap_encap(encap, name, locate)
  if encap == nil then return end
  local builtin = wtap_table:get_dissector(encap)
  local p = Proto(name, "ibpath " .. name)
  function p.dissector(tvb, pinfo, tree)
    call_builtin(builtin, tvb, pinfo, tree)
    wrapped_frame = pinfo.number
    local off, limit = locate(tvb)
    if off ~= nil then
      local bth = native_wanted(tvb, off, limit)
      if bth == nil then return tvb:len() end
      dissect_or_track("LRH", tvb, pinfo, tree, off, bth, limit, "ib")
    end
    return tvb:len()
  end
  wtap_table:add(encap, p)
end

wrap_encap(wtap_encaps.INFINIBAND, "ibpath.infiniband_raw", function(tvb)
  return 0, tvb:len()
end)

wrap_encap(wtap_encaps.WIRESHARK_UPPER_PDU, "ibpath.exported_pdu", function(tvb)
  local off, name = 0, nil
  while off + 4 <= tvb:len() do
    local tag, len = tvb(off, 2):uint(), tvb(off + 2, 2):uint()
    if tag == 0 then off = off + 4; break end
    if off + 4 + len > tvb:len() then return nil end
    -- not :stringz(), which reads past the tag when no NUL ends the name; and tvb(off + 4, 0)
    -- at the end of the tvb is out of bounds (tests/data/fuzz/exported-pdu-*-name-tag.pcapng)
    if tag == 12 and len > 0 then
      local s = tvb(off + 4, len):string()
      local nul = s:find("\0", 1, true)
      name = nul and s:sub(1, nul - 1) or s
    end
    off = off + 4 + len
  end
  if name ~= "infiniband" then return nil end
  return off, tvb:len()
end)

-- NETLINK_RDMA (20): Wireshark's netlink dissector hands each message, from its nlmsghdr
local nl_table = DissectorTable.get("netlink.protocol")
local rdma_nl = Proto("ibpath.netlink_rdma", "ibpath RDMA netlink")

local function rdma_nl_message(tvb, pinfo, tree, off, limit)
  pinfo.cols.protocol:set("RDMA netlink")
  local ctx = {limit = limit, v = {}, at = {}, encap = "netlink", show = true}
  D["RdmaNLMsgHdr"](tvb, pinfo, tree, off, ctx)
  local msg = ctx.v["RdmaNLMsgHdr"] or {}
  local ops = {[0] = "RESOLVE", [1] = "SET_TIMEOUT", [2] = "IP_RESOLVE"}
  if msg.rdma_client == 4 then
    local kind = ib_band(msg.nlmsg_flags or 0, 1) ~= 0 and "request" or "response"
    local err = ib_band(msg.nlmsg_flags or 0, 0x100) ~= 0 and " [LS_F_ERR]" or ""
    pinfo.cols.info:set(string.format("LS %s %s seq %d%s", ops[msg.rdma_op] or tostring(msg.rdma_op),
                                      kind, msg.nlmsg_seq or 0, err))
  end
end

function rdma_nl.dissector(tvb, pinfo, tree)
  rdma_nl_message(tvb, pinfo, tree, 0, tvb:len())
  return tvb:len()
end
if nl_table ~= nil then nl_table:add(20, rdma_nl) end

-- Wireshark's netlink dissector hands a message to the family's dissector only when it has a
-- body: a header-only RDMA message (an LS answer with RDMA_NL_LS_F_ERR and no attribute, say)
-- would show as a bare "Netlink message". The postdissector finds those in NETLINK_RDMA
-- records (cooked header: pkttype, ARPHRD_NETLINK 824, ..., family at 14) and shows them,
-- each under a node of its own.
local NLMSG_HDRLEN, COOKED_LEN, ARPHRD_NETLINK = 16, 16, 824
local nl_header_only = Proto("ibpath.nl_header_only", "ibpath RDMA netlink (header-only message)")

local function le_u32(tvb, off) return tvb(off, 4):le_uint() end

function header_only_rdma(tvb, pinfo, tree)
  local n = tvb:len()
  if n < COOKED_LEN + NLMSG_HDRLEN or tvb(2, 2):uint() ~= ARPHRD_NETLINK or tvb(14, 2):uint() ~= 20 then
    return
  end
  local off = COOKED_LEN
  while off + NLMSG_HDRLEN <= n do
    local len = le_u32(tvb, off)
    if len < NLMSG_HDRLEN then return end
    if len == NLMSG_HDRLEN and tvb(off + 4, 2):le_uint() >= 0x400 then
      local t = tree:add(nl_header_only, tvb(off, NLMSG_HDRLEN))
      rdma_nl_message(tvb, pinfo, t, off, off + NLMSG_HDRLEN)
    end
    off = off + ib_idiv(len + 3, 4) * 4
  end
end

-- Blobs: exported PDUs named "ibpath.blob" reach the generated PathArray proto by name
P["PathArray"].dissector = function(tvb, pinfo, tree)
  pinfo.cols.protocol:set("ibpath blob")
  local ctx = {limit = tvb:len(), v = {}, at = {}, encap = "blob", show = true}
  D["PathArray"](tvb, pinfo, tree, 0, ctx)
  local arr = ctx.v["PathArray"] or {}
  pinfo.cols.info:set(string.format("rdma_set_option path array: %d record(s), %d bytes",
                                    arr.records_count or 0, tvb:len()))
  return tvb:len()
end
