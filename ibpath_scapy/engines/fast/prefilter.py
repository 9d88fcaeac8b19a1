"""Classify a frame from its raw bytes before any Scapy object exists.

For each frame the pre-filter answers one of three things:

* SKIP: the Scapy path would produce no record (RoCEv2 and native RC/UC data, ACKs, TCP,
  IPv4 fragments): the frame is counted and dropped;
* MadAt: a plain RoCEv2 GSI datagram (Ethernet or raw IP / UDP / BTH / DETH / one 256-byte MAD
  / ICRC, every length field exact): the compiled decoder (fast.decoder) takes it;
* IbMadAt: the same datagram in native InfiniBand (an ERF record as ibdump writes it, or a bare
  LRH: LRH / [GRH] / BTH / DETH / MAD / ICRC / VCRC, the ERF wire length exact);
* FULL: anything else (other link types, VXLAN, odd lengths, truncation, VLANs, ...): the
  frame goes through decode.Decoder and its Scapy layers unchanged.

Every offset comes from the layer definitions (model.layout's steps for the project's and
Scapy's static layers, fast.layout.prefix_offsets for IPv4's fixed part) and every dispatch
decision from the layers' own bind_layers() tables, resolved the way Scapy resolves them
(first binding whose field values all match), so a binding added later changes the
pre-filter too. When a binding cannot be resolved from the fields read here, the frame is
FULL: the pre-filter may only be conservative.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from scapy.contrib.roce import BTH, GRH
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from ..scapy.decode import _RAW_IP_LINKTYPES, MAX_FRAME_BYTES
from ...capture.pcapio import RunTest, TakeTest, Term
from ...model.expr import F
from ...layers.ib import ERF, LINKTYPE_ERF, LINKTYPE_INFINIBAND, LRH
from ...layers.mad import MAD, MAD_SIZE
from ...layers.roce import DETH
from ...model.exprc import compile_expr, part_src, split_name
from .layout import compile_reader, layer_steps, prefix_offsets, static_length, step_source

SKIP = None
FULL = "full"


class MadAt(NamedTuple):
    """Where the layers of a fast-path GSI datagram start, counted from the frame's first
    byte (wherever the classifier read the frame: a read block, the frame's own bytes)."""

    ip: int  # offset of the IPv4/IPv6 header
    ip_version: int
    udp: int
    bth: int
    deth: int
    mad: int


class IbMadAt(NamedTuple):
    """Where the layers of a fast-path native-IB GSI datagram start, counted from the frame's
    first byte; its VCRC is the frame's last bytes."""

    lrh: int
    grh: int  # -1: no GRH (LNH "IBA local")
    bth: int
    deth: int
    mad: int


_UNKNOWN = object()


class Bindings:
    """Scapy's payload dispatch of one layer (Packet.guess_payload_class over payload_guess),
    resolved from raw field values and cached per value tuple."""

    CACHE_MAX = 65536

    def __init__(self, cls: type[Packet], fields: tuple[str, ...]):
        self.cls, self.fields = cls, fields
        self.cache: dict[tuple, object] = {}
        self.known = len(cls.payload_guess)

    def resolve(self, values: tuple):
        if len(self.cls.payload_guess) != self.known:  # bind_layers() since: start afresh
            self.cache.clear()
            self.known = len(self.cls.payload_guess)
        hit = self.cache.get(values)
        if hit is None:
            if len(self.cache) >= self.CACHE_MAX:
                self.cache.clear()
            hit = self.cache[values] = self._resolve(dict(zip(self.fields, values)))
        return hit

    def _resolve(self, values: dict):
        for fval, sub in self.cls.payload_guess:
            if not set(fval) <= set(values):
                return _UNKNOWN  # depends on a field not read here: let Scapy decide
            if all(values[k] == v for k, v in fval.items()):
                return sub
        return None  # no binding: Raw / default payload

    def values_for(self, sub: type[Packet]) -> list[dict]:
        """Field values of the bindings that lead to `sub`."""
        return [fv for fv, c in self.cls.payload_guess if c is sub]


def _offset(cls: type[Packet], name: str) -> int:
    steps = layer_steps(cls)
    if name in steps and steps[name].offset is not None:
        return steps[name].offset
    byte, bit, _ = prefix_offsets(cls)[name]
    assert bit == 0, f"{cls.__name__}.{name} is not byte-aligned"
    return byte


class Prefilter:
    """The classifier; one instance serves every file (its binding caches are shared)."""

    def __init__(self):
        self.eth_type = _offset(Ether, "type")
        self.eth_len = static_length(Ether)
        self.eth_next = Bindings(Ether, ("type",))
        ip = prefix_offsets(IP)
        self.ip_ihl = ip["ihl"]
        self.ip_len = ip["len"][0]
        self.ip_frag = ip["frag"]
        self.frag_mask = (1 << self.ip_frag[2]) - 1  # the fragment offset: the word's low bits
        self.ip_proto = ip["proto"][0]
        self.ip_next = Bindings(IP, ("frag", "proto"))
        ip6 = prefix_offsets(IPv6)
        self.ip6_plen = ip6["plen"][0]
        self.ip6_nh = ip6["nh"][0]
        self.ip6_len = static_length(IPv6)
        self.ip6_next = Bindings(IPv6, ("nh",))
        self.udp_sport, self.udp_dport = _offset(UDP, "sport"), _offset(UDP, "dport")
        self.udp_ulen = _offset(UDP, "len")
        self.udp_len = static_length(UDP)
        self.udp_next = Bindings(UDP, ("sport", "dport"))
        self.bth_opcode = _offset(BTH, "opcode")
        self.bth_len = static_length(BTH)
        self.icrc_len = layer_steps(BTH)["icrc"].nbytes  # BTH's trailer: the ICRC
        self.bth_next = Bindings(BTH, ("opcode",))
        self.deth_len = static_length(DETH)
        self.deth_next = Bindings(DETH, ("src_qp",))
        self.read_dqpn = compile_reader(BTH, "dqpn")
        self.read_src_qp = compile_reader(DETH, "src_qp")
        # DETH's NextLayer hints (a GMP answer from a QP other than 0/1): compiled Exprs over
        # the BTH fields they name
        self.deth_hints = []
        for hint in getattr(DETH, "payload_hints", ()):
            fn = compile_expr(hint.condition, self._bth_field_src, args="b, o")
            fn.__globals__["_fb"] = int.from_bytes  # what layout's field sources call
            self.deth_hints.append((fn, hint.cls))
        # opcodes that Scapy dissects as a DETH: every other BTH frame yields no record
        self.deth_opcodes = {fv["opcode"] for fv in self.bth_next.values_for(DETH)}
        # native IB: ERF's fixed header (ERF has a list of extension headers after it, which
        # model.layout does not model: its prefix is read as IPv4's is), LRH, GRH
        erf = prefix_offsets(ERF)
        self.erf_len = max(byte + (bit + bits + 7) // 8 for byte, bit, bits in erf.values())
        (self.erf_ext_at, ext_bit, _), (type_at, type_bit, type_bits) = erf["ext"], erf["type"]
        assert type_at == self.erf_ext_at and erf["wlen"][1:] == (0, 16)
        self.erf_ext_mask = 0x80 >> ext_bit
        self.erf_type_shift = 8 - type_bit - type_bits
        self.erf_type_mask = (1 << type_bits) - 1
        self.erf_wlen = erf["wlen"][0]
        self.erf_next = Bindings(ERF, ("type",))
        self.lrh_len = static_length(LRH)
        self.vcrc_len = layer_steps(LRH)["vcrc"].nbytes  # LRH's trailer: the VCRC
        self.read_lnh = compile_reader(LRH, "lnh")
        self.lrh_next = Bindings(LRH, ("lnh",))
        self.grh_len = static_length(GRH)
        self.grh_next = Bindings(GRH, ())
        self.fingerprint = _fingerprint()
        self._data_first: dict[int, Callable] = {}  # compiled on first use (classifier())
        self._run_tests: dict[int, RunTest] = {}
        self._take_tests: dict[int, TakeTest] = {}
        self.by_linktype: dict[int, Callable] = {1: self.ether, LINKTYPE_ERF: self.erf,
                                                 LINKTYPE_INFINIBAND: self.lrh}
        for lt in _RAW_IP_LINKTYPES:  # the IP datagram alone, as decode.dissect reads it
            self.by_linktype[lt] = self.raw_ip

    def stale(self) -> bool:
        """True when a binding table this pre-filter resolved from has changed since."""
        return self.fingerprint != _fingerprint()

    def _bth_field_src(self, f: F) -> str:
        name, part = split_name(f.name)
        if f.layer != "BTH":
            raise ValueError(f"DETH hint names {f!r}: only BTH fields are read raw")
        return part_src(step_source(layer_steps(BTH)[name]), part)

    # -- per link type ---------------------------------------------------------------------
    def classifier(self, linktype: int) -> Callable[[bytes, int, int], object]:
        """classify(buf, start, end) for frames of one link type (FULL for unknown ones)."""
        fn = self._data_first.get(linktype)
        if fn is None and linktype in self._data_compilers:
            fn = self._data_first[linktype] = self._data_compilers[linktype](self)
        return fn or self.by_linktype.get(linktype, _full)

    def _compile_ether_data(self) -> Callable[[bytes, int, int], object]:
        """Ethernet's classifier with a first test for the bulk of a RoCE capture, RC data
        in Ethernet / IPv4 without options / UDP to the RoCEv2 port: a handful of byte reads
        with the offsets and values baked in as constants (all from the layers and their
        bindings, as in ether()); every other frame goes through ether()."""
        ip_type = [fv["type"] for fv in self.eth_next.values_for(IP) if set(fv) == {"type"}]
        roce = [fv for fv in self.udp_next.values_for(BTH) if set(fv) == {"dport"}]
        if not ip_type or not roce or self.eth_next.resolve((ip_type[0],)) is not IP \
                or self.ip_next.resolve((0, 17)) is not UDP:
            return self.ether
        dport = roce[0]["dport"]
        # source ports that an earlier UDP binding claims when the destination is RoCE's
        early: set[int] = set()
        for fv, sub in self.udp_next.cls.payload_guess:
            if sub is BTH and fv == roce[0]:
                break
            if set(fv) == {"sport"} or (set(fv) == {"sport", "dport"} and fv["dport"] == dport):
                early.add(fv["sport"])
            elif set(fv) == {"dport"} and fv["dport"] != dport:
                continue
            else:
                return self.ether  # a binding this shortcut cannot rule out
        ip = self.eth_len
        udp = ip + 20  # IHL 5: no options
        udp_proto = [fv["proto"] for fv in self.ip_next.values_for(UDP)
                     if set(fv) == {"frag", "proto"} and fv["frag"] == 0]
        if not udp_proto:
            return self.ether
        # the header's test: the frame's first bytes read in one struct unpack, gaps skipped
        header = [Term("et", self.eth_type, 2, equals=ip_type[0]),
                  Term("vi", ip, 1, equals=(4 << 4) | 5),
                  Term("fr", ip + self.ip_frag[0], 2, mask=self.frag_mask, equals=0),
                  Term("pr", ip + self.ip_proto, 1, equals=udp_proto[0]),
                  Term("sp", udp + self.udp_sport, 2, not_in=frozenset(early)),
                  Term("dp", udp + self.udp_dport, 2, equals=dport)]
        op = Term("op", udp + self.udp_len + self.bth_opcode, 1,
                  not_in=frozenset(self.deth_opcodes))
        total = ip + self.ip_len
        bth = udp + self.udp_len
        # a GSI datagram of the usual shape: every length exact, a source QP bound to MAD
        gsi_len = bth + self.bth_len + self.deth_len + MAD_SIZE + self.icrc_len
        gsi_at = MadAt(ip, 4, udp, bth, bth + self.bth_len, bth + self.bth_len + self.deth_len)
        run = RunTest(header + [op], op.offset + op.size, MAX_FRAME_BYTES)
        take = TakeTest(
            header + [Term("tl", total, 2, equals=gsi_len - ip),
                      Term("ul", udp + self.udp_ulen, 2, equals=gsi_len - udp),
                      self._qp_term(bth + self.bth_len)], gsi_len, gsi_len, gsi_at)
        header_test = RunTest(header, run.least, MAX_FRAME_BYTES)
        skips, is_gsi, takes, full, udp_step = run.holds, header_test.holds, take.holds, \
            self.ether, self.udp

        def data_first(b, s, e):
            if skips(b, s, e):
                return None
            if is_gsi(b, s, e):
                if takes(b, s, e):
                    return gsi_at  # a GSI datagram of the usual shape
                # another GSI datagram: straight to the UDP step of the full classifier
                return udp_step(b, s + ip, 4, s + udp, e,
                                (b[s + total] << 8 | b[s + total + 1]) == e - s - ip, s)
            return full(b, s, e)

        return self._first_tests(1, data_first, run, take)

    def _qp_term(self, deth: int) -> Term:
        """The term of a GSI datagram's source QP (a DETH at offset deth): one bound to MAD,
        read as the 4 bytes that end with it, masked."""
        qp = layer_steps(DETH)["src_qp"]
        assert qp.kind == "int" and 1 <= qp.nbytes <= 4 and qp.offset + qp.nbytes >= 4
        # source QPs whose binding alone makes Scapy dissect a MAD after the DETH
        bound = frozenset(fv["src_qp"] for fv in self.deth_next.values_for(MAD)
                          if set(fv) == {"src_qp"} and self.deth_next.resolve((fv["src_qp"],)) is MAD)
        return Term("qp", deth + qp.offset + qp.nbytes - 4, 4, mask=(1 << 8 * qp.nbytes) - 1,
                    is_in=bound)

    def _compile_erf_data(self) -> Callable[[bytes, int, int], object]:
        """ERF's classifier with a first test for the bulk of an ibdump capture: RC/UC data
        and ACKs in an ERF InfiniBand record without extension headers, whose wire length is
        the rest of the record, LRH "IBA local" straight to a BTH without DETH (erf() and
        lrh() skip them too, after more reads); every other frame goes through erf()."""
        ib_type = [fv["type"] for fv in self.erf_next.values_for(LRH) if set(fv) == {"type"}]
        local = [fv["lnh"] for fv in self.lrh_next.values_for(BTH) if set(fv) == {"lnh"}]
        lnh = layer_steps(LRH)["lnh"]
        if not ib_type or not local or self.erf_next.resolve((ib_type[0],)) is not LRH \
                or self.lrh_next.resolve((local[0],)) is not BTH or lnh.nbytes != 1:
            return self.erf
        bth = self.erf_len + self.lrh_len
        least = bth + self.bth_len + self.icrc_len + self.vcrc_len  # as lrh() asks for a BTH
        header = [Term("te", self.erf_ext_at, 1, equals=ib_type[0] << self.erf_type_shift),
                  Term("wl", self.erf_wlen, 2, len_minus=self.erf_len),
                  Term("lb", self.erf_len + lnh.offset, 1, shift=8 - lnh.bit_off - lnh.bits,
                       mask=(1 << lnh.bits) - 1, equals=local[0])]
        op = Term("op", bth + self.bth_opcode, 1, not_in=frozenset(self.deth_opcodes))
        run = RunTest(header + [op], least, MAX_FRAME_BYTES)
        deth = bth + self.bth_len
        gsi_len = deth + self.deth_len + MAD_SIZE + self.icrc_len + self.vcrc_len
        gsi_at = IbMadAt(self.erf_len, -1, bth, deth, deth + self.deth_len)
        take = TakeTest(
            header + [self._qp_term(deth)], gsi_len, gsi_len, gsi_at)
        skips, takes, full = run.holds, take.holds, self.erf

        def data_first(b, s, e):
            if skips(b, s, e):
                return None
            if takes(b, s, e):
                return gsi_at  # a GSI datagram of the usual shape
            return full(b, s, e)

        return self._first_tests(LINKTYPE_ERF, data_first, run, take)

    _data_compilers = {1: _compile_ether_data, LINKTYPE_ERF: _compile_erf_data}

    def _first_tests(self, linktype: int, data_first: Callable, run: RunTest,
                     take: TakeTest) -> Callable:
        """data_first, whose first test is `run`, the link type's RunTest, which pcapio's
        readers run in their loops over runs of records and blocks; `take`, its test of the
        GSI datagrams it gives as its one MadAt or IbMadAt, which the readers' loops take by
        (the one declaration of it)."""
        self._run_tests[linktype] = run
        self._take_tests[linktype] = take
        return data_first

    def run_test(self, linktype: int) -> RunTest | None:
        """The first test of the link type's classifier (RC data), for pcapio's readers to
        skip runs of records or blocks by (pcapio.FrameClassifier); None when the link type
        has none."""
        self.classifier(linktype)
        return self._run_tests.get(linktype)

    def take_test(self, linktype: int) -> TakeTest | None:
        """The test of the GSI datagrams of the usual shape the link type's classifier gives
        its one MadAt or IbMadAt (its data_first's second test), for pcapio's readers to hand
        over in runs without asking it; None when the link type has none."""
        self.classifier(linktype)
        return self._take_tests.get(linktype)

    def ether(self, b: bytes, s: int, e: int):
        if e - s < self.eth_len or e - s > MAX_FRAME_BYTES:
            return FULL  # (the decoder reports frames over its size limit)
        t = self.eth_type + s
        nxt = self.eth_next.resolve((b[t] << 8 | b[t + 1],))
        if nxt is IP:
            return self.ipv4(b, s + self.eth_len, e, s)
        if nxt is IPv6:
            return self.ipv6(b, s + self.eth_len, e, s)
        return FULL

    def raw_ip(self, b: bytes, s: int, e: int):
        if s >= e or e - s > MAX_FRAME_BYTES:
            return FULL
        return self.ipv6(b, s, e, s) if b[s] >> 4 == 6 else self.ipv4(b, s, e, s)

    def ipv4(self, b: bytes, s: int, e: int, f: int):
        """The IPv4 header at s of the frame that starts at f (as are the next ones)."""
        if e - s < 20 or b[s] >> 4 != 4:
            return FULL
        ihl = (b[s] & 0x0F) * 4
        if ihl < 20 or s + ihl > e:
            return FULL
        fo = s + self.ip_frag[0]
        frag = (b[fo] << 8 | b[fo + 1]) & self.frag_mask
        nxt = self.ip_next.resolve((frag, b[s + self.ip_proto]))
        if nxt is None or nxt is TCP:
            return SKIP  # a fragment's Raw, or TCP: nothing the decoder reads
        if nxt is not UDP:
            return FULL
        total = b[s + self.ip_len] << 8 | b[s + self.ip_len + 1]
        return self.udp(b, s, 4, s + ihl, e, total == e - s, f)

    def ipv6(self, b: bytes, s: int, e: int, f: int):
        if e - s < self.ip6_len or b[s] >> 4 != 6:
            return FULL
        nxt = self.ip6_next.resolve((b[s + self.ip6_nh],))
        if nxt is TCP:
            return SKIP
        if nxt is not UDP:
            return FULL
        plen = b[s + self.ip6_plen] << 8 | b[s + self.ip6_plen + 1]
        return self.udp(b, s, 6, s + self.ip6_len, e, plen == e - s - self.ip6_len, f)

    def udp(self, b: bytes, ip: int, version: int, u: int, e: int, exact: bool, f: int):
        if e - u < self.udp_len:
            return FULL
        sp, dp = u + self.udp_sport, u + self.udp_dport
        if self.udp_next.resolve((b[sp] << 8 | b[sp + 1], b[dp] << 8 | b[dp + 1])) is not BTH:
            return FULL
        bth = u + self.udp_len
        if bth >= e:
            return FULL
        if b[bth + self.bth_opcode] not in self.deth_opcodes:
            # Scapy reads the same opcode byte (length fields can only cut the frame
            # shorter), finds no DETH and so no MAD: the decoder makes no record of it
            return SKIP
        ul = u + self.udp_ulen
        deth = bth + self.bth_len
        mad = deth + self.deth_len
        if not exact or (b[ul] << 8 | b[ul + 1]) != e - u or e - mad - self.icrc_len != MAD_SIZE:
            return FULL
        if not self.carries_mad(b, bth, deth):
            return FULL
        return MadAt(ip - f, version, u - f, bth - f, deth - f, mad - f)

    def carries_mad(self, b: bytes, bth: int, deth: int) -> bool:
        """True when Scapy dissects what follows this DETH as a MAD (its binding on the source
        QP, else the first of its hints that holds)."""
        nxt = self.deth_next.resolve((self.read_src_qp(b, deth),))
        if nxt is None:
            for cond, cls in self.deth_hints:
                if cond(b, bth):
                    nxt = cls
                    break
        return nxt is MAD

    def erf(self, b: bytes, s: int, e: int):
        """An ERF record (ibdump's DLT_ERF): its LRH when the record holds exactly one packet."""
        if e - s < self.erf_len or e - s > MAX_FRAME_BYTES:
            return FULL
        t = b[s + self.erf_ext_at]
        if t & self.erf_ext_mask:
            return FULL  # extension headers: Scapy reads them
        nxt = self.erf_next.resolve(((t >> self.erf_type_shift) & self.erf_type_mask,))
        if nxt is not LRH:
            return SKIP if nxt is None else FULL  # not InfiniBand: a Raw payload, no record
        w = s + self.erf_len
        if (b[s + self.erf_wlen] << 8 | b[s + self.erf_wlen + 1]) != e - w:
            return FULL  # rlen padding or a packet cut short: the Scapy path's business
        return self.lrh(b, w, e, s)

    def lrh(self, b: bytes, s: int, e: int, f: int | None = None):
        """A native-IB packet from its LRH to its VCRC (LINKTYPE_INFINIBAND, or inside the ERF
        record that starts at f)."""
        f = s if f is None else f
        if e - s < self.lrh_len or e - s > MAX_FRAME_BYTES:
            return FULL
        nxt = self.lrh_next.resolve((self.read_lnh(b, s),))
        bth, grh = s + self.lrh_len, -1
        if nxt is GRH:
            grh, bth = bth, bth + self.grh_len
            nxt = self.grh_next.resolve(())
        if nxt is None:
            return SKIP  # LNH raw or IP non-IBA: no binding, a Raw payload, no record
        if nxt is not BTH or e - bth < self.bth_len + self.icrc_len + self.vcrc_len:
            return FULL
        if b[bth + self.bth_opcode] not in self.deth_opcodes:
            return SKIP  # RC/UC data and ACKs: no DETH, so no MAD (as for RoCEv2)
        deth = bth + self.bth_len
        mad = deth + self.deth_len
        if e - mad - self.icrc_len - self.vcrc_len != MAD_SIZE or not self.carries_mad(b, bth, deth):
            return FULL
        return IbMadAt(s - f, grh - f if grh >= 0 else -1, bth - f, deth - f, mad - f)


def _fingerprint() -> tuple:
    """The sizes of the binding tables the pre-filter and the compiled decoder resolve from
    (bind_layers only ever appends)."""
    return tuple(len(c.payload_guess) for c in (Ether, IP, IPv6, UDP, BTH, DETH, MAD, ERF, LRH, GRH))


def _full(b: bytes, s: int, e: int):
    return FULL
