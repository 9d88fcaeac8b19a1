----------------------------------------------------------------------------------------------
-- ibpath runtime: checks and state that span packets (ICRC/VCRC, transaction matching, RMPP
-- reassembly) and the registration that chains Wireshark's own InfiniBand dissector. Layer
-- code above is generated; this part is the same for every generation. Every offset, size
-- and protocol constant it reads comes from the generated block above it (LAYOUT, HDR_LEN
-- and the named constants); the numbers left here are bytes, bits and loop bounds.
----------------------------------------------------------------------------------------------

-- Reading a LAYOUT field f of a header that starts at the 0-based offset base: str_uint and
-- str_field in a Lua string (big-endian), tvb_uint in a Tvb (in f's byte order), ba_uint in a
-- ByteArray (ba_uint: at an offset, a length); field_bits narrows a window's value to f's bits.
-- field_bits by arithmetic (x a non-negative integer below 2^53, f.mask + 1 is 2 ^ f.bits):
-- one call into C, where ib_band(ib_rshift(x, f.shift), f.mask) made two into Lua and two into C
local floor = math.floor
local function field_bits(x, f) return floor(x / 2 ^ f.shift) % (f.mask + 1) end

-- string.byte, string.sub and string.find as upvalues: a global lookup costs more than the
-- call in Wireshark's Lua
local byte, sub, find = string.byte, string.sub, string.find
local function str_uint(s, base, f)
  local i = base + f.off + 1
  local j = i + f.len - 1
  if j > #s then error("ibpath: read past the end of a string (a missing bounds check)") end
  -- a field of up to four bytes (every header field read here) with one call of
  -- string.byte: a call into C per byte costs more than the arithmetic
  local a, b, c, d, e = byte(s, i, j)
  if e == nil then
    if b == nil then return a end
    if c == nil then return a * 256 + b end
    if d == nil then return (a * 256 + b) * 256 + c end
    return ((a * 256 + b) * 256 + c) * 256 + d
  end
  local n = 0
  for k = i, j do n = n * 256 + byte(s, k) end
  return n
end

local function str_field(s, base, f)
  return sub(s, base + f.off + 1, base + f.off + f.len)
end

-- The 1-based position in its header of a one-byte field f: the tracking path (no tree) reads
-- its one-byte fields with one string.byte each rather than str_uint, a call into Lua more.
local function at1(f)
  if f.len ~= 1 then error("ibpath: a one-byte read of a field of more than one byte") end
  return f.off + 1
end

local function tvb_uint(tvb, base, f)
  local r = tvb(base + f.off, f.len)
  if f.le then return r:le_uint() end
  return r:uint()
end

local function ba_uint(ba, at, len)
  local n = 0
  for i = at, at + len - 1 do n = n * 256 + ba:get_index(i) end
  return n
end

local function ba_field(ba, base, f) return ba_uint(ba, base + f.off, f.len) end

-- s with the LAYOUT field f of the header at base set to value (big-endian): a new string
-- (a ByteArray's get_index/set_index is a call into Wireshark per byte).
local function str_set_field(s, base, f, value)
  local b = {}
  for i = f.len, 1, -1 do
    b[i] = value % 256
    value = math.floor(value / 256)
  end
  local at = base + f.off
  return string.sub(s, 1, at) .. string.char(table.unpack(b)) .. string.sub(s, at + f.len + 1)
end

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
-- Bounded state: a capture of millions of transactions must not grow the plugin's tables
-- without end. Past TID_TRACK_MAX TIDs (requests and responses) or RMPP_OPEN_MAX transfers
-- open at once (rmpp.py's MAX_OPEN, the audit's own cap) nothing new is tracked, and the
-- frame that reached the cap says so.
local EX_CAP = ProtoExpert.new("ibpath.state_capped", "The plugin's tracking cap was reached", expert.group.SEQUENCE, expert.severity.WARN)
EXPERT_LIST[#EXPERT_LIST + 1] = EX_CAP

-- ICRC (CRC-32) and VCRC (CRC-16), reflected, table driven (ICRC, VCRC above) --------------
local function crc_table(poly)
  local t = {}
  for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
      if ib_band(c, 1) ~= 0 then c = ib_bxor(ib_rshift(c, 1), poly) else c = ib_rshift(c, 1) end
    end
    t[i] = c
  end
  return t
end
local CRC32_T, CRC16_T = crc_table(ICRC.poly), crc_table(VCRC.poly)
local ICRC_LEN, VCRC_LEN = LAYOUT.BTH.icrc.len, LAYOUT.LRH.vcrc.len

local bxor, band, rshift = ib_bxor, ib_band, ib_rshift
if ib_bitlib then bxor, band, rshift = ib_bitlib.bxor, ib_bitlib.band, ib_bitlib.rshift end

-- Works on raw byte strings; BitOp's signed results are fine in between (it reduces its
-- inputs modulo 2^32) and folded to unsigned at the end.
local function crc32(s, crc)
  crc = crc or ICRC.init
  local byte = string.byte
  for i = 1, #s do
    crc = bxor(rshift(crc, 8), CRC32_T[band(bxor(crc, byte(s, i)), 0xFF)])
  end
  return crc % ICRC.mod
end

local function crc16(s)
  local crc = VCRC.init
  local byte = string.byte
  for i = 1, #s do
    crc = bxor(rshift(crc, 8), CRC16_T[band(bxor(crc, byte(s, i)), 0xFF)])
  end
  return bxor(crc, VCRC.xorout) % VCRC.mod
end

-- ICRC bytes are little-endian on the wire; Scapy's (and the generated field's) value reads
-- them big-endian: compare in that form.
local function byteswap(x, n)
  local r = 0
  for _ = 1, n do
    r = r * 256 + x % 256
    x = math.floor(x / 256)
  end
  return r
end

-- Sets the bits ICRC_VARIANT[key] takes as ones in the header at offset at of a ByteArray
-- (bytes past its end are left alone).
local function variant_ones(ba, at, key)
  local n = ba:len()
  for _, m in ipairs(ICRC_VARIANT[key]) do
    local i = at + m.off
    if i < n then ba:set_index(i, ib_bor(ba:get_index(i), m.ones)) end
  end
end

-- RoCEv2 (Linux rxe_icrc.c): the LRH's all-ones form in front, IP TOS/TTL/checksum (v4) or
-- traffic class/flow label/hop limit (v6), UDP checksum and BTH Resv8a taken as ones. The IP
-- and UDP headers are outside the UDP payload tvb ibpath is given, so this runs in a
-- postdissector on the frame, for the frames the BTH hook marked (field extractors for ip/udp
-- would make Wireshark build a tree for every frame). IPv4 only without options.
local function rocev2_icrc(frame, bth_off, icrc_at)
  local udp_off = bth_off - HDR_LEN.UDP
  local v4, v6 = udp_off - HDR_LEN.IP, udp_off - HDR_LEN.IPv6
  local ip
  local b0 = v4 >= 0 and tvb_uint(frame, v4, LAYOUT.IP.version)
  if b0 and field_bits(b0, LAYOUT.IP.version) == IPV4_VERSION
      and field_bits(b0, LAYOUT.IP.ihl) * IPV4_IHL_UNIT == HDR_LEN.IP
      and tvb_uint(frame, v4, LAYOUT.IP.proto) == IPPROTO_UDP then
    ip = frame(v4, HDR_LEN.IP):bytes()
    variant_ones(ip, 0, "IP")
  elseif v6 >= 0 and field_bits(tvb_uint(frame, v6, LAYOUT.IPv6.version), LAYOUT.IPv6.version) == IPV6_VERSION
      and tvb_uint(frame, v6, LAYOUT.IPv6.nh) == IPPROTO_UDP then
    ip = frame(v6, HDR_LEN.IPv6):bytes()
    variant_ones(ip, 0, "IPv6")
  else
    return nil
  end
  local udp = frame(udp_off, HDR_LEN.UDP):bytes()
  variant_ones(udp, 0, "UDP")
  local rest = frame(bth_off, icrc_at - bth_off):bytes()
  variant_ones(rest, 0, "BTH")
  local crc = crc32(ICRC_ROCEV2_PREFIX)
  crc = crc32(ip:raw(), crc)
  crc = crc32(udp:raw(), crc)
  crc = crc32(rest:raw(), crc)
  return ib_bxor(crc, ICRC.xorout)
end

-- Native IB (checked against a real ibdump capture): the LRH VL nibble, or the whole LRH when
-- a GRH follows, GRH TClass/FlowLabel/HopLmt and BTH Resv8a taken as ones.
local function native_icrc(tvb, lrh_off, icrc_at)
  local b = tvb(lrh_off, icrc_at - lrh_off):bytes()
  local bth = HDR_LEN.LRH
  local lnh = LAYOUT.LRH.lnh
  if field_bits(ba_field(b, 0, lnh), lnh) == LNH_IBA_GLOBAL then
    variant_ones(b, 0, "LRH_GLOBAL")
    if b:len() >= HDR_LEN.LRH + HDR_LEN.GRH then variant_ones(b, HDR_LEN.LRH, "GRH") end
    bth = HDR_LEN.LRH + HDR_LEN.GRH
  else
    variant_ones(b, 0, "LRH_LOCAL")
  end
  variant_ones(b, bth, "BTH")
  return ib_bxor(crc32(b:raw()), ICRC.xorout)
end

local function show_icrc(t, range, want, calc)
  local good = byteswap(calc, ICRC_LEN) == want
  local it = t:add(RT.icrc, range, good and 1 or 0):set_generated()
  if not good then
    t:add(RT.icrc_calc, range, byteswap(calc, ICRC_LEN)):set_generated()
    it:add_proto_expert_info(EX_CRC, "ICRC mismatch")
  end
end

HOOKS["BTH"] = function(tvb, pinfo, t, off, o, ctx, v)
  if not ctx.show then return end
  local icrc_at = ctx.limit
  if icrc_at + ICRC_LEN > tvb:len() or v.icrc == nil then return end
  if ctx.encap == "rocev2" then
    -- the tvb is the whole frame (the RoCEv2 entry is a postdissector): IP and UDP are in it
    local calc = rocev2_icrc(tvb, off, icrc_at)
    if calc ~= nil then show_icrc(t, tvb(icrc_at, ICRC_LEN), v.icrc, calc) end
    return
  end
  local lrh_off = ctx.at["LRH"]
  if lrh_off == nil then return end
  show_icrc(t, tvb(icrc_at, ICRC_LEN), v.icrc, native_icrc(tvb, lrh_off, icrc_at))
  local lrh = ctx.v["LRH"]
  local vcrc_at = icrc_at + ICRC_LEN
  if lrh ~= nil and lrh.vcrc ~= nil and vcrc_at + VCRC_LEN <= tvb:len() then
    local vgood = crc16(tvb(lrh_off, vcrc_at - lrh_off):raw()) == lrh.vcrc
    local vi = t:add(RT.vcrc, tvb(vcrc_at, VCRC_LEN), vgood and 1 or 0):set_generated()
    if not vgood then vi:add_proto_expert_info(EX_CRC, "VCRC mismatch") end
  end
end

-- Transaction matching by TID ---------------------------------------------------------------
-- State is gathered on the first pass whether or not a tree is built (tshark -2 and the GUI
-- dissect the first pass without one), straight from the MAD's bytes: the MAD header's class,
-- method and TID, the RMPP header's type, flags, segment number and PayloadLength (LAYOUT).
-- by TID key: the first request's frame and time, the first response's frame (numbers in
-- tables of their own: no table made per transaction)
local request_frame, request_time, response_frame = {}, {}, {}
local rmpp_open, rmpp_done, rmpp_part_of = {}, {}, {}
local tids_tracked, rmpp_open_count = 0, 0
local capped_at = {}  -- "tid", "rmpp": the frame that reached that cap
local MAD_F, RMPP_F = LAYOUT.MAD, LAYOUT.RMPP
local RMPP_AT = HDR_LEN.MAD  -- the RMPP header follows the MAD header
local SA_AT = HDR_LEN.MAD + HDR_LEN.RMPP  -- and the SA header the RMPP header
local RMPP_WHOLE = ib_bor(ib_bor(RMPP_ACTIVE, RMPP_FIRST), RMPP_LAST)  -- a one-MAD transfer

-- The MAD (MAD_SIZE bytes at most) as one Lua string, cut from the frame's bytes s (the tvb's,
-- taken once per frame) or, without them, read with one call into Wireshark instead of a
-- TvbRange per field (on a capture of SA traffic these reads are most of what the plugin
-- costs); from the class to the TID at least.
local MAD_TID_END = MAD_F.transaction_id.off + MAD_F.transaction_id.len
local function mad_head(tvb, mad_off, s)
  local n = math.min(MAD_SIZE, (s and #s or tvb:len()) - mad_off)
  if n < MAD_TID_END then return nil end
  if s then return string.sub(s, mad_off + 1, mad_off + n) end
  return tvb:raw(mad_off, n)
end

-- Below, m is a string that holds a MAD at the 0-based offset at: the frame's bytes, or a
-- MAD cut from them (mad_head, at 0).
local CLASS_AT, METHOD_AT = at1(MAD_F.mgmt_class), at1(MAD_F.method)
local TID_AT = MAD_F.transaction_id.off + 1
local TID_END = MAD_F.transaction_id.off + MAD_F.transaction_id.len
local RMPP_TYPE_AT, RMPP_FLAGS_AT = RMPP_AT + at1(RMPP_F.rmpp_type), RMPP_AT + at1(RMPP_F.rmpp_flags)

local function tid_key(m, at)
  -- class and the exact 64-bit TID, as bytes (numbers lose precision above 2^53)
  return sub(m, at + CLASS_AT, at + CLASS_AT) .. sub(m, at + TID_AT, at + TID_END)
end

-- A MAD under struct ib_user_mad_hdr (ibpath record's umad source) is a message a process
-- wrote or read: the kernel owns its TID's upper 32 bits (ib_umad_write puts the agent's
-- hi_tid there), so a request and the answer read back pair on the agent and the low 32.
local function umad_tid_key(m, at, umad)
  local tid = str_field(m, at, MAD_F.transaction_id)
  return "umad" .. tostring(umad.agent_id) .. ":" .. str_field(m, at, MAD_F.mgmt_class)
    .. string.sub(tid, #tid - UMAD_TID_OWN_BYTES + 1)
end

-- number and visited: pinfo's, read once per frame by the caller; umad: the UserMad values
-- of a umad frame (nil on the wire)
local function track_tid(m, at, pinfo, number, visited, umad)
  local key = umad and umad_tid_key(m, at, umad) or tid_key(m, at)
  local is_resp = ib_band(byte(m, at + METHOD_AT), METHOD_RESP) ~= 0
  if not visited then
    local known = (is_resp and response_frame or request_frame)[key] ~= nil
    if not known and tids_tracked >= TID_TRACK_MAX then
      capped_at.tid = capped_at.tid or number
    elseif is_resp then
      -- a response's time is never read: its frame number is all that is kept
      if not known then response_frame[key] = number; tids_tracked = tids_tracked + 1 end
    elseif not known then
      request_frame[key], request_time[key] = number, pinfo.abs_ts
      tids_tracked = tids_tracked + 1
    end
  end
  return key, is_resp
end

-- The expert info of the frame that reached a cap (what: "tid" or "rmpp")
local function note_cap(t, number, what)
  if capped_at[what] ~= number then return end
  if what == "tid" then
    t:add_proto_expert_info(EX_CAP, string.format("TID tracking cap reached (%d TIDs): later " ..
      "requests and responses are not paired", TID_TRACK_MAX))
  else
    t:add_proto_expert_info(EX_CAP, string.format("RMPP cap reached (%d transfers open): " ..
      "this and later new transfers are not reassembled", RMPP_OPEN_MAX))
  end
end

-- The transfer's addresses: with the frame's bytes s and the offset ip of the IP header (its
-- LAYOUT ipf) that Wireshark took pinfo.src and pinfo.dst from (RoCEv2), those bytes (NUL in
-- front: no tostring() of an address starts with one); otherwise (native IB) pinfo's.
local function transfer_addresses(pinfo, s, ip, ipf)
  if ip ~= nil then return "\0" .. str_field(s, ip, ipf.src) .. str_field(s, ip, ipf.dst) end
  return tostring(pinfo.src) .. ">" .. tostring(pinfo.dst)
end

-- Returns true when the MAD at in m is one segment of a multi-segment RMPP DATA transfer;
-- tkey: its tid_key when the caller has it.
local function track_rmpp(m, at, pinfo, number, visited, s, ip, ipf, tkey)
  if #m - at < MAD_SIZE or byte(m, at + RMPP_TYPE_AT) ~= RMPP_TYPE_DATA
      or byte(m, at + CLASS_AT) ~= MGMT_CLASS_SA then
    return false
  end
  local flags = field_bits(byte(m, at + RMPP_FLAGS_AT), RMPP_F.rmpp_flags)
  if flags == RMPP_WHOLE or ib_band(flags, RMPP_ACTIVE) == 0 then return false end
  if visited then return true end
  local key = transfer_addresses(pinfo, s, ip, ipf) .. ":" .. (tkey or tid_key(m, at))
  local h = sub(m, at + 1, at + MAD_SIZE)
  local st = rmpp_open[key]
  if st == nil then
    if rmpp_open_count >= RMPP_OPEN_MAX then
      capped_at.rmpp = capped_at.rmpp or number
      return true
    end
    st = {segs = {}, frames = {}, last = nil}
    rmpp_open[key] = st
    rmpp_open_count = rmpp_open_count + 1
  end
  local n = str_uint(h, RMPP_AT, RMPP_F.segment_number)
  if n >= 1 and n <= MAX_SEGMENTS then
    st.segs[n] = h
    st.frames[n] = number
    if ib_band(flags, RMPP_LAST) ~= 0 then st.last = n end
  end
  if st.last == nil then return true end
  for k = 1, st.last do if st.segs[k] == nil then return true end end
  local pad = RMPP_DATA_SIZE - str_uint(st.segs[st.last], RMPP_AT, RMPP_F.payload_length)
  if pad < 0 or pad > SA_DATA_SIZE then pad = 0 end
  local total = SA_MAD_HDR_SIZE + st.last * SA_DATA_SIZE - pad
  local first = st.segs[1]  -- its SA header is the message's (reassembled_bytes)
  local stride = SA_RECORD_STRIDE({attribute_offset = str_uint(first, SA_AT, LAYOUT.SAHeader.attribute_offset)},
                                  {v = {MAD = {attribute_id = str_uint(first, 0, MAD_F.attribute_id)}}})
  -- the segments are kept, the message made of them only when a tree shows it (most frames
  -- are dissected without one: tshark -r, the GUI's first pass)
  rmpp_done[number] = {segs = st.segs, pad = pad, total = total, frames = st.frames, last = st.last,
                       records = stride > 0 and math.floor((total - SA_MAD_HDR_SIZE) / stride) or 0}
  for k = 1, st.last do rmpp_part_of[st.frames[k]] = number end
  rmpp_open[key] = nil
  rmpp_open_count = rmpp_open_count - 1
  return true
end

-- The reassembled message of a transfer rmpp_done holds (made once): the first segment's
-- headers rewritten as one FIRST|LAST transfer, so that the generated SA code counts every
-- record, then each segment's data, the last one's cut to its PayloadLength.
local function reassembled_bytes(done)
  if done.bytes ~= nil then return done.bytes end
  local segs, pad, total, last = done.segs, done.pad, done.total, done.last
  local head = string.sub(segs[1], 1, SA_MAD_HDR_SIZE)
  local fl = RMPP_F.rmpp_flags
  local w = str_uint(head, RMPP_AT, fl)
  head = str_set_field(head, RMPP_AT, fl, w - ib_lshift(field_bits(w, fl), fl.shift) + ib_lshift(RMPP_WHOLE, fl.shift))
  head = str_set_field(head, RMPP_AT, RMPP_F.segment_number, 1)
  head = str_set_field(head, RMPP_AT, RMPP_F.payload_length, SA_HDR_SIZE + total - SA_MAD_HDR_SIZE)
  local parts = {head}
  for k = 1, last do
    local len = k == last and SA_DATA_SIZE - pad or SA_DATA_SIZE
    parts[k + 1] = string.sub(segs[k], SA_MAD_HDR_SIZE + 1, SA_MAD_HDR_SIZE + len)
  end
  done.bytes, done.segs = table.concat(parts), nil
  return done.bytes
end

local function note_reassembly(pinfo, number)
  local done = rmpp_done[number]
  if done ~= nil then
    pinfo.cols.info:append(string.format(" [RMPP reassembled: %d records]", done.records))
  end
  return done
end

HOOKS["MAD"] = function(tvb, pinfo, t, off, o, ctx, v)
  if ctx.reassembled then return end
  local h = mad_head(tvb, off, ctx.s)
  if h == nil then return end
  local number = pinfo.number
  local key, is_resp = track_tid(h, 0, pinfo, number, pinfo.visited, ctx.v[UMAD_LAYER])
  note_cap(t, number, "tid")
  if is_resp then
    local req = request_frame[key]
    if req ~= nil and req < number then
      t:add(RT.request_in, req):set_generated()
      local d = pinfo.abs_ts - request_time[key]
      local secs = math.floor(d)
      t:add(RT.response_time, NSTime.new(secs, math.floor((d - secs) * 1e9))):set_generated()
    end
  else
    local resp = response_frame[key]
    if resp ~= nil and resp > number then
      t:add(RT.response_in, resp):set_generated()
    end
  end
end

local function show_record_count(t, pinfo, v)
  if v.records_count ~= nil then
    t:add(RT.record_count, v.records_count):set_generated()
    if v.records_count > 1 then pinfo.cols.info:append(string.format(" [%d records]", v.records_count)) end
  end
end

HOOKS["SAHeader"] = function(tvb, pinfo, t, off, o, ctx, v)
  if ctx.reassembled then
    t:add(RT.record_count, v.records_count or 0):set_generated()
    return
  end
  -- a umad message is whole: the kernel reassembled what a process reads (no segment here)
  if ctx.v[UMAD_LAYER] ~= nil then return show_record_count(t, pinfo, v) end
  local mad_off = ctx.at["MAD"]
  if mad_off == nil then return end
  local h = mad_head(tvb, mad_off, ctx.s)
  local number = pinfo.number
  if h == nil or not track_rmpp(h, 0, pinfo, number, pinfo.visited, ctx.s, ctx.ip, ctx.ipf) then
    return show_record_count(t, pinfo, v)
  end
  note_cap(t, number, "rmpp")
  local done = note_reassembly(pinfo, number)
  if done == nil then
    local target = rmpp_part_of[number]
    if target ~= nil then
      t:add(RT.reassembled_in, target):set_generated()
    else
      t:add_proto_expert_info(EX_RMPP)
    end
    return
  end
  for k = 1, done.last do t:add(RT.segment, done.frames[k]):set_generated() end
  local rtvb = ByteArray.new(reassembled_bytes(done), true):tvb("Reassembled RMPP")
  local rctx = {limit = rtvb:len(), v = {}, at = {}, encap = ctx.encap, reassembled = true, show = true}
  D["MAD"](rtvb, pinfo, t, 0, rctx)
end

-- Without a tree nothing is shown: only the state above is kept, from the frame's bytes s (the
-- whole tvb, #s its length), with the IP header at ip (LAYOUT ipf) for RoCEv2.
local DETH_AT = HDR_LEN.BTH  -- in a UD SEND, from the BTH on
local UD_MAD_AT = HDR_LEN.BTH + HDR_LEN.DETH
local MAD_LEN, DQPN_F, SRC_QP_F = HDR_LEN.MAD, LAYOUT.BTH.dqpn, LAYOUT.DETH.src_qp
local function track_only(s, pinfo, bth_off, ip, ipf)
  local mad_off = bth_off + UD_MAD_AT
  if mad_off + MAD_LEN > #s then return end
  if str_uint(s, bth_off, DQPN_F) > MAD_QPN_MAX
      and str_uint(s, bth_off + DETH_AT, SRC_QP_F) > MAD_QPN_MAX then return end
  local number, visited = pinfo.number, pinfo.visited
  local key = track_tid(s, mad_off, pinfo, number, visited)
  if track_rmpp(s, mad_off, pinfo, number, visited, s, ip, ipf, key) then
    note_reassembly(pinfo, number)
  end
end

-- The Info column of a umad frame: the peer (the LID and QP of struct ib_user_mad_hdr: the
-- destination of a write, the source of a read; which one only the packet comment says, and
-- reading it would take a Field extractor, which makes tshark build a tree for every frame)
-- and the MAD by its method, attribute and TID, before what the hooks appended.
local function umad_columns(tvb, pinfo, ctx)
  local u, m, mad_off = ctx.v[UMAD_LAYER], ctx.v["MAD"], ctx.at["MAD"]
  if u == nil or m == nil or m.method == nil or mad_off + HDR_LEN.MAD > tvb:len() then return end
  local attrs = MAD_ATTRIBUTES[m.mgmt_class] or {}
  local attr = attrs[m.attribute_id] or string.format("0x%04x", m.attribute_id or 0)
  local tid = tvb(mad_off + MAD_F.transaction_id.off, MAD_F.transaction_id.len):bytes():tohex(true)
  local method = MAD_METHODS[m.method] or string.format("0x%02x", m.method)
  pinfo.cols.info:prepend(string.format("LID %d QP %d: %s(%s) tid 0x%s", u.lid or 0, u.qpn or 0,
                                        method, attr, tid))
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
-- says "has item=true" for both on 4.0 to 4.6 (0.1-0.2 µs a call, measured), so it alone is
-- asked: reading tree.text first cost a second call into Wireshark on every MAD frame
-- tshark -r dissects without a tree.
local function has_tree(tree)
  return string.find(tostring(tree), "has item=true", 1, true) ~= nil
end

-- With a tree, ibpath's layers from `first` (at off) on; without one (tshark -r with no -V or
-- filter), only the state that spans packets (TIDs, RMPP), read from the BTH at bth. The tree
-- is asked once (tostring costs a few µs on every MAD frame). s: the tvb's bytes (taken once
-- per frame); ip, ipf: the IP header of a RoCEv2 frame (rocev2_locate).
local function dissect_or_track(first, tvb, s, pinfo, tree, off, bth, limit, encap, ip, ipf)
  if has_tree(tree) then
    D[first](tvb, pinfo, tree, off, {limit = limit, v = {}, at = {}, encap = encap, show = true,
                                     s = s, ip = ip, ipf = ipf})
  else
    track_only(s, pinfo, bth, ip, ipf)
  end
end

-- The tvb's bytes as one Lua string ("" for an empty tvb)
local function tvb_bytes(tvb)
  local len = tvb:len()
  if len == 0 then return "" end
  return tvb:raw(0, len)
end

-- The BTH offset of a native-IB UD SEND (what carries MADs) in the bytes s, or nil.
local function native_wanted(s, off, limit)
  if limit - off < HDR_LEN.LRH + HDR_LEN.BTH then return nil end
  local lnh = field_bits(str_uint(s, off, LAYOUT.LRH.lnh), LAYOUT.LRH.lnh)
  local bth = off + HDR_LEN.LRH
  if lnh == LNH_IBA_GLOBAL then bth = bth + HDR_LEN.GRH elseif lnh ~= LNH_IBA_LOCAL then return nil end
  if bth + HDR_LEN.BTH <= limit and str_uint(s, bth, LAYOUT.BTH.opcode) == UD_SEND_ONLY then
    return bth
  end
  return nil
end

-- RoCEv2: a postdissector, not a wrapper of UDP 4791. Any Lua hook costs every frame it sees
-- (bench/README.md): a wrapper also pays for calling the built-in dissector through Lua, a
-- postdissector does not, and it leaves Wireshark's own tree as it is. Wireshark's InfiniBand
-- dissector sets the ports to the QPs (port type IBQP), so one read of pinfo.dst_port sends
-- every data frame away; only QP0/QP1 frames go on to find their UDP header (PT_NONE,
-- PT_IBQP: Wireshark's port types, above).

-- The offset and LAYOUT of an IPv4 header (any IHL) or an IPv6 header without extension
-- headers, protocol UDP, that ends at the 0-based offset udp of s, or nil. Without it a
-- native-IB packet whose DLID, P_Key or QPN reads 4791 (0x12B7) would be taken for a RoCEv2 one.
local IP_F, IPV6_F = LAYOUT.IP, LAYOUT.IPv6
local IHL_MIN, IHL_MAX = ib_idiv(HDR_LEN.IP, IPV4_IHL_UNIT), IP_F.ihl.mask
local IP_VERSION_AT, IP_PROTO_AT = at1(IP_F.version), at1(IP_F.proto)
if at1(IP_F.ihl) ~= IP_VERSION_AT then error("ibpath: IPv4 version and IHL in different bytes") end
local function after_ip_header(s, udp)
  for ihl = IHL_MIN, IHL_MAX do
    local ip = udp - IPV4_IHL_UNIT * ihl
    if ip < 0 then break end
    local b0 = byte(s, ip + IP_VERSION_AT)  -- and IHL
    if field_bits(b0, IP_F.version) == IPV4_VERSION and field_bits(b0, IP_F.ihl) == ihl
        and byte(s, ip + IP_PROTO_AT) == IPPROTO_UDP then return ip, IP_F end
  end
  local ip6 = udp - HDR_LEN.IPv6
  if ip6 >= 0 and field_bits(str_uint(s, ip6, IPV6_F.version), IPV6_F.version) == IPV6_VERSION
      and str_uint(s, ip6, IPV6_F.nh) == IPPROTO_UDP then return ip6, IPV6_F end
  return nil
end

-- In the frame's bytes s, the BTH offset and the end of the UDP payload of a RoCEv2 MAD
-- frame, and the offset and LAYOUT of its IP header, or nil: the first UDP header (within the
-- first n = ROCEV2_SEARCH_BYTES + UDP + BTH bytes, right after an IP header) whose destination
-- port is RoCEv2's and whose next byte is a UD SEND opcode. Whatever lies below IP (VLAN
-- tags, cooked headers) needs no parser here.
local UDP_LEN, BTH_LEN = HDR_LEN.UDP, HDR_LEN.BTH
local UDP_BTH = UDP_LEN + BTH_LEN
local SEARCH_END = ROCEV2_SEARCH_BYTES + UDP_BTH
local DPORT_OFF, OPCODE_AT, UDP_LEN_F = LAYOUT.UDP.dport.off, at1(LAYOUT.BTH.opcode), LAYOUT.UDP.len
local function rocev2_locate(s)
  local len = #s
  local n = len < SEARCH_END and len or SEARCH_END
  if n < UDP_BTH then return nil end
  local last = n - #ROCEV2_UDP_PORT_BE + 1  -- the port's last place within the first n bytes
  local at = find(s, ROCEV2_UDP_PORT_BE, DPORT_OFF + 1, true)
  while at ~= nil and at <= last do
    local udp = at - 1 - DPORT_OFF  -- 0-based offset of the UDP header
    local bth = udp + UDP_LEN
    local op = bth + OPCODE_AT
    if bth + BTH_LEN <= len and op <= n and byte(s, op) == UD_SEND_ONLY then
      local ip, ipf = after_ip_header(s, udp)
      if ip ~= nil then
        local ulen = str_uint(s, udp, UDP_LEN_F)
        local limit = len
        if ulen >= UDP_BTH and udp + ulen < limit then limit = udp + ulen end
        return bth, limit, ip, ipf
      end
    end
    at = find(s, ROCEV2_UDP_PORT_BE, at + 1, true)
  end
  return nil
end

-- Native IB in ERF records (ibdump): Wireshark reads the ERF header into the pseudo-header, so
-- the frame's tvb starts at the LRH, and the ERF type is not visible to Lua without a field
-- extractor, which would make Wireshark build a tree for every frame (5x slower). An
-- InfiniBand record is recognised by its LRH PktLen matching the record length (+2 for the
-- VCRC), which an Ethernet frame never does by accident in practice; ibpath's own layers
-- then check LNH and the BTH opcode (native_wanted).
local function native_locate(s)
  local pkt_len = LAYOUT.LRH.pkt_len
  if #s < HDR_LEN.LRH
      or field_bits(str_uint(s, 0, pkt_len), pkt_len) * LRH_PKT_LEN_UNIT + VCRC_LEN ~= #s then
    return nil
  end
  return 0, #s
end

-- The frame a wrapper of a built-in encapsulation handler (below) has dissected: the
-- postdissector leaves it alone.
local wrapped_frame = nil

local header_only_rdma  -- below, with the netlink code
local post = Proto("ibpath.post", "ibpath (RoCEv2 and native-IB MADs, header-only RDMA netlink messages)")
function post.dissector(tvb, pinfo, tree)
  if pinfo.dst_port > MAD_QPN_MAX then return end
  local pt = pinfo.port_type
  if pt == PT_NONE then return header_only_rdma(tvb, pinfo, tree) end
  if pt ~= PT_IBQP then return end
  local s = tvb_bytes(tvb)  -- the frame's bytes, taken once: every read below is from them
  local bth, limit, ip, ipf = rocev2_locate(s)
  if bth ~= nil then
    return dissect_or_track("BTH", tvb, s, pinfo, tree, bth, bth, limit, "rocev2", ip, ipf)
  end
  if wrapped_frame == pinfo.number then return end
  local off
  off, limit = native_locate(s)
  bth = off and native_wanted(s, off, limit)
  if bth ~= nil then dissect_or_track("LRH", tvb, s, pinfo, tree, off, bth, limit, "ib") end
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
      local s = tvb_bytes(tvb)
      local bth = native_wanted(s, off, limit)
      if bth == nil then return tvb:len() end
      dissect_or_track("LRH", tvb, s, pinfo, tree, off, bth, limit, "ib")
    end
    return tvb:len()
  end
  wtap_table:add(encap, p)
end

wrap_encap(wtap_encaps.INFINIBAND, "ibpath.infiniband_raw", function(tvb)
  return 0, tvb:len()
end)

local EXP_TAG = LAYOUT.ExportedPDUTag
wrap_encap(wtap_encaps.WIRESHARK_UPPER_PDU, "ibpath.exported_pdu", function(tvb)
  local off, name = 0, nil
  local hdr = HDR_LEN.ExportedPDUTag
  while off + hdr <= tvb:len() do
    local tag, len = tvb_uint(tvb, off, EXP_TAG.tag), tvb_uint(tvb, off, EXP_TAG.length)
    if tag == EXP_PDU_TAG_END then off = off + hdr; break end
    if off + hdr + len > tvb:len() then return nil end
    -- not :stringz(), which reads past the tag when no NUL ends the name; and a zero-length
    -- TvbRange at the end of the tvb is out of bounds (tests/data/fuzz/exported-pdu-*-name-tag.pcapng)
    if tag == EXP_PDU_TAG_DISSECTOR_NAME and len > 0 then
      local s = tvb(off + hdr, len):string()
      local nul = s:find("\0", 1, true)
      name = nul and s:sub(1, nul - 1) or s
    end
    off = off + hdr + len
  end
  if name ~= EXPORTED_PDU_INFINIBAND then return nil end
  return off, tvb:len()
end)

-- NETLINK_RDMA: Wireshark's netlink dissector hands each message, from its nlmsghdr
local nl_table = DissectorTable.get("netlink.protocol")
local rdma_nl = Proto("ibpath.netlink_rdma", "ibpath RDMA netlink")

local function rdma_nl_message(tvb, pinfo, tree, off, limit)
  pinfo.cols.protocol:set("RDMA netlink")
  local ctx = {limit = limit, v = {}, at = {}, encap = "netlink", show = true}
  D["RdmaNLMsgHdr"](tvb, pinfo, tree, off, ctx)
  local msg = ctx.v["RdmaNLMsgHdr"] or {}
  if msg.rdma_client == RDMA_NL_LS then
    local kind = ib_band(msg.nlmsg_flags or 0, NLM_F_REQUEST) ~= 0 and "request" or "response"
    local err = ib_band(msg.nlmsg_flags or 0, RDMA_NL_LS_F_ERR) ~= 0 and " [LS_F_ERR]" or ""
    pinfo.cols.info:set(string.format("LS %s %s seq %d%s", LS_OPS[msg.rdma_op] or tostring(msg.rdma_op),
                                      kind, msg.nlmsg_seq or 0, err))
  end
end

function rdma_nl.dissector(tvb, pinfo, tree)
  rdma_nl_message(tvb, pinfo, tree, 0, tvb:len())
  return tvb:len()
end
if nl_table ~= nil then nl_table:add(NETLINK_RDMA, rdma_nl) end

-- Wireshark's netlink dissector hands a message to the family's dissector only when it has a
-- body: a header-only RDMA message (an LS answer with RDMA_NL_LS_F_ERR and no attribute, say)
-- would show as a bare "Netlink message". The postdissector finds those in NETLINK_RDMA
-- records (the cooked header's hatype ARPHRD_NETLINK, protocol the netlink family) and shows
-- those of an RDMA client (control messages have none), each under a node of its own.
local nl_header_only = Proto("ibpath.nl_header_only", "ibpath RDMA netlink (header-only message)")
local COOKED_F, NLMSG_F = LAYOUT.NetlinkCooked, LAYOUT.RdmaNLMsgHdr

function header_only_rdma(tvb, pinfo, tree)
  local n = tvb:len()
  local cooked = HDR_LEN.NetlinkCooked
  if n < cooked + NLMSG_HDRLEN or tvb_uint(tvb, 0, COOKED_F.hatype) ~= ARPHRD_NETLINK
      or tvb_uint(tvb, 0, COOKED_F.protocol) ~= NETLINK_RDMA then
    return
  end
  local off = cooked
  while off + NLMSG_HDRLEN <= n do
    local len = tvb_uint(tvb, off, NLMSG_F.nlmsg_len)
    if len < NLMSG_HDRLEN then return end
    if len == NLMSG_HDRLEN and field_bits(tvb_uint(tvb, off, NLMSG_F.rdma_client), NLMSG_F.rdma_client) ~= 0 then
      local t = tree:add(nl_header_only, tvb(off, NLMSG_HDRLEN))
      rdma_nl_message(tvb, pinfo, t, off, off + NLMSG_HDRLEN)
    end
    off = off + ib_idiv(len + NLMSG_ALIGNTO - 1, NLMSG_ALIGNTO) * NLMSG_ALIGNTO
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
