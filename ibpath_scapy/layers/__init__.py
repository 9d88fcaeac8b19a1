"""Every wire format of path resolution, one Scapy class per header.

Importing this package binds all layers, so that Ether(raw_bytes) of a RoCEv2 MAD, or a
pcap record of link type 197/247/252/253, dissects down to the PathRecords.
"""

from scapy.contrib.roce import BTH, GRH  # noqa: F401  (re-exported: part of every IB stack)
from scapy.layers.inet import IP, UDP  # noqa: F401
from scapy.layers.inet6 import IPv6  # noqa: F401
from scapy.layers.l2 import Ether  # noqa: F401

from .mad import MAD, RMPP, MADPadding  # noqa: F401
from .sa import SAHeader, PathRecord, ServiceRecord, GIDField  # noqa: F401
from .cm import CMReq, CMRep, CMRtu, CMRej, CMDreq, CMDrep, CMMra  # noqa: F401
from .roce import DETH  # noqa: F401
from .ib import LRH, ERF, ERFExtension, ExportedPDU, ExportedPDUTag  # noqa: F401
from .pathdata import PathRecData, PathArray  # noqa: F401
from .netlink import (  # noqa: F401
    NetlinkCooked, NLMsgHdr, RdmaNLMsgHdr, LsAttr, LsResolveRequest, LsResolveResponse,
    LsSetTimeout, LsIpResolveRequest, LsIpResolveResponse, LsTimeout, LsServiceId, LsDgid,
    LsSgid, LsTclass, LsPkey, LsQosClass, LsIpv4, LsIpv6,
)
from .ucma import (  # noqa: F401
    UcmaCmdHdr, UcmaCreateId, UcmaCreateIdResp, UcmaResolveIp, UcmaResolveAddr,
    UcmaResolveRoute, UcmaConnect, UcmaQuery, UcmaQueryPathResp, UcmaGetEvent, UcmaEventResp,
    UcmaSetOption, UcmaConnParam, UcmaAhAttr, UcmaUdParam, UcmaEce, UcmaIbService,
    UcmaResolveIbService, UcmaQueryIbServiceResp,
)
from .acm import (  # noqa: F401
    AcmCounter, AcmEpAddrData, AcmEpAddress, AcmEpConfigData, AcmHdr, AcmPerfData, AcmResolve,
)
from .umad import UserMad  # noqa: F401

__all__ = [
    "BTH", "GRH", "IP", "IPv6", "UDP", "Ether",
    "MAD", "RMPP", "MADPadding", "SAHeader", "PathRecord", "ServiceRecord", "GIDField",
    "CMReq", "CMRep", "CMRtu", "CMRej", "CMDreq", "CMDrep", "CMMra",
    "DETH", "LRH", "ERF", "ERFExtension", "ExportedPDU", "ExportedPDUTag",
    "PathRecData", "PathArray",
    "NetlinkCooked", "NLMsgHdr", "RdmaNLMsgHdr", "LsAttr", "LsResolveRequest",
    "LsResolveResponse", "LsSetTimeout", "LsIpResolveRequest", "LsIpResolveResponse",
    "LsTimeout", "LsServiceId", "LsDgid", "LsSgid", "LsTclass", "LsPkey", "LsQosClass",
    "LsIpv4", "LsIpv6",
    "UcmaCmdHdr", "UcmaCreateId", "UcmaCreateIdResp", "UcmaResolveIp", "UcmaResolveAddr",
    "UcmaResolveRoute", "UcmaConnect", "UcmaQuery", "UcmaQueryPathResp", "UcmaGetEvent",
    "UcmaEventResp", "UcmaSetOption", "UcmaConnParam", "UcmaAhAttr", "UcmaUdParam", "UcmaEce",
    "UcmaIbService", "UcmaResolveIbService", "UcmaQueryIbServiceResp",
    "AcmHdr", "AcmEpAddrData", "AcmResolve", "AcmPerfData", "AcmCounter", "AcmEpConfigData",
    "AcmEpAddress",
    "UserMad",
]
