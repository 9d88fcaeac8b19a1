"""Rules of the catalogue that one packet can show, declared once as Expr
conditions on a layer: the Lua generator turns them into expert infos and the analyser
evaluates the same conditions (expr.evaluate_on)."""

from __future__ import annotations

from dataclasses import dataclass

from ..model import sources
from ..model.expr import And, Expr, F, Not, Or, Remaining, Under
from ..layers.mad import (
    ATTR_PATH_RECORD,
    ATTR_SERVICE_RECORD,
    MGMT_CLASS_SA,
    SA_CLASS_VERSION,
    METHOD_GET,
    METHOD_GET_RESP,
    METHOD_GET_TABLE,
    METHOD_GET_TABLE_RESP,
    METHOD_RESP,
)
from ..layers.pathdata import IB_PATH_BIDIRECTIONAL, IB_PATH_GMP, KNOWN_FLAGS, RECORD_SIZE
from ..layers.sa import PATH_RECORD_SIZE, ServiceRecord, reserved_component_bits, selector_pairs


@dataclass(frozen=True)
class PacketRule:
    """Fires when `condition` holds on a layer of class `layer`. `audit`: the frame rules
    register it as a rule of their own (SA frames, audit/rules/frame.py); a blob rule
    (audit=False) is a rule of audit/rules/blob.py, whose check decides by this same Expr
    (audit/conditions.py) and says more in its message."""

    rule_id: str
    severity: str  # error, warning, info
    layer: str
    condition: Expr
    message: str
    source: str  # by name (sources.py), for --list-rules and the rule catalogue
    audit: bool = True


_mad = Under("MAD")
_PR_WORDS = PATH_RECORD_SIZE // 8  # AttributeOffset of a PathRecord answer
_is_pr_query = And(_mad.mgmt_class == MGMT_CLASS_SA, _mad.attribute_id == ATTR_PATH_RECORD,
                   Not(_mad.method & METHOD_RESP))
_comp = F("component_mask__lo")
_NUMB_PATH_BIT = 1 << 12
# a value OpenSM reads only with its selector (MTU, rate, PacketLifeTime), or a selector, whose
# partner's ComponentMask bit is not set (bits 16-21: within the mask's low word)
_HALF_PAIR = Or(*[(_comp & (1 << vb | 1 << sb)).isin(1 << vb, 1 << sb)
                  for _, _, vb, sb in selector_pairs()])

# a ServiceRecord request (Get, GetTable, Set, Delete) and the ComponentMask bits no
# ServiceRecord component has (3, the reserved field's, and 37-63), as the mask's two words
_is_sr_request = And(_mad.mgmt_class == MGMT_CLASS_SA, _mad.attribute_id == ATTR_SERVICE_RECORD,
                     Not(_mad.method & METHOD_RESP))
_SR_RESERVED = reserved_component_bits(ServiceRecord)
_SR_RESERVED_LO = sum(1 << b for b in _SR_RESERVED if b < 32)
_SR_RESERVED_HI = sum(1 << b - 32 for b in _SR_RESERVED if b >= 32)

PACKET_RULES = [
    PacketRule("SAQ-SERVICEID-HALF", "error", "SAHeader",
               And(_is_pr_query, Or((_comp & 3) == 1, (_comp & 3) == 2)),
               "only one of ComponentMask bits 0/1 (ServiceID) set; OpenSM answers INSUF_COMPS",
               sources.OPENSM_PR + " (ServiceID MSB/LSB: both or neither, else INSUF_COMPS)"),
    PacketRule("SAQ-RESERVED-COMP", "warning", "SAHeader",
               And(_is_pr_query, Or((_comp & 0xFF800080) != 0, F("component_mask__hi") != 0)),
               "reserved ComponentMask bit set in a PathRecord query",
               "IBA 15.2.5.16 PathRecord (ComponentMask bit per component; 7 and 23-63 "
               "have none)"),
    PacketRule("SAQ-SR-RESERVED-COMP", "warning", "SAHeader",
               And(_is_sr_request, Or((_comp & _SR_RESERVED_LO) != 0,
                                      (F("component_mask__hi") & _SR_RESERVED_HI) != 0)),
               "reserved ComponentMask bit set in a ServiceRecord request (3 or 37-63)",
               "IBA 15.2.5.14 ServiceRecord (ComponentMask bit per component; 3, the "
               "reserved field's, and 37-63 have none); Linux include/rdma/ib_sa.h "
               "IB_SA_SERVICE_REC_* (\"reserved: 3\")"),
    PacketRule("SAQ-SELECTOR-MISSING", "warning", "SAHeader", And(_is_pr_query, _HALF_PAIR),
               "MTU, rate or PacketLifeTime component without its selector's bit, or a selector "
               "without its value's: OpenSM ignores both halves",
               sources.OPENSM_PR_SELECTED, audit=False),
    PacketRule("SAQ-BAD-METHOD", "error", "SAHeader",
               And(_mad.mgmt_class == MGMT_CLASS_SA, _mad.attribute_id == ATTR_PATH_RECORD,
                   Or(_mad.class_version != SA_CLASS_VERSION,
                      And(Not(_mad.method & METHOD_RESP),
                          Not(Or(_mad.method == METHOD_GET, _mad.method == METHOD_GET_TABLE))))),
               "PathRecord MAD with a method other than Get/GetTable or class version not 2",
               "IBA 15.4 (PathRecord: SubnAdmGet, SubnAdmGetTable; SA class version 2); "
               "rdma-core ibacm acmp.c (rejects class_version != 2)"),
    PacketRule("SAQ-NUMBPATH-ZERO", "warning", "PathRecord",
               And(_mad.method == METHOD_GET_TABLE, _mad.attribute_id == ATTR_PATH_RECORD,
                   (Under("SAHeader").component_mask__lo & _NUMB_PATH_BIT) != 0,
                   F("numb_path") == 0),
               "GetTable with the NumbPath component set and NumbPath 0: OpenSM returns no record",
               sources.OPENSM_PR + " (NumbPath 0 with the component bit: zero iterations)"),
    PacketRule("SAR-GET-MULTI", "error", "SAHeader",
               And(_mad.method == METHOD_GET_RESP, _mad.attribute_id == ATTR_PATH_RECORD,
                   _mad.status == 0, F("attribute_offset") != 0, F("attribute_offset") != _PR_WORDS),
               "GetResp whose AttributeOffset does not match the PathRecord size (8 words)",
               "IBA 15.2.1.1 AttributeOffset; OpenSM osm_sa.c osm_sa_respond "
               "(ib_get_attr_offset)"),
    PacketRule("SAR-TABLE-OFFSET", "warning", "SAHeader",
               And(_mad.method == METHOD_GET_TABLE_RESP, _mad.attribute_id == ATTR_PATH_RECORD,
                   _mad.status == 0, F("attribute_offset") != 0, F("attribute_offset") != _PR_WORDS),
               "GetTableResp whose AttributeOffset is not the PathRecord size (8 words): "
               "saquery counts and steps through the records by it",
               "IBA 15.2.1.1 AttributeOffset; " + sources.SAQUERY_TABLE),
]

_pd = Under("PathRecData")
_BIDIR = IB_PATH_BIDIRECTIONAL
PACKET_RULES += [
    PacketRule("BLOB-LENGTH", "error", "PathArray", (Remaining() % RECORD_SIZE) != 0,
               "blob length is not a multiple of 72 (ucma_set_ib_path returns EINVAL)",
               sources.UCMA_SET_PATH + "; sa_query.c ib_nl_policy", audit=False),
    PacketRule("BLOB-UNKNOWN-FLAGS", "error", "PathRecData", (F("flags") & (0xFFFFFFFF ^ KNOWN_FLAGS)) != 0,
               "flag bit outside 0x3F set", sources.UAPI_SA, audit=False),
    PacketRule("BLOB-GMP-NOT-REVERSIBLE", "error", "PathRecord",
               And(_pd.flags & IB_PATH_GMP, F("reversible") == 0),
               "record flagged GMP carries a PathRecord that is not reversible",
               sources.SEED_LAYOUT + "; IBA 15.2.5.16 Reversible", audit=False),
    PacketRule("BLOB-BIDIR-NOT-REVERSIBLE", "error", "PathRecord",
               And((_pd.flags & _BIDIR) == _BIDIR, F("reversible") == 0),
               "record flagged BIDIRECTIONAL carries a PathRecord that is not reversible",
               sources.SEED_LAYOUT + "; " + sources.UAPI_SA, audit=False),
]
