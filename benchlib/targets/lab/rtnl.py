"""The few rtnetlink requests the lab sends itself, where this machine's
iproute2 (6.1) has no words for them: IPv4 BIG TCP sizes
(IFLA_GSO_IPV4_MAX_SIZE / IFLA_GRO_IPV4_MAX_SIZE, kernel 6.3 and iproute2 6.3).

A request runs in a namespace by entering it (setns) just long enough to open
the netlink socket: a socket stays in the namespace it was created in.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
from contextlib import contextmanager

from benchlib.base.errors import TargetError

RTM_NEWLINK, RTM_GETLINK = 16, 18
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
SOL_NETLINK, NETLINK_EXT_ACK = 270, 11
NLMSGERR_ATTR_MSG = 1  # the kernel's extack text
IFLA_GSO_IPV4_MAX_SIZE, IFLA_GRO_IPV4_MAX_SIZE = 63, 64  # include/uapi/linux/if_link.h
CLONE_NEWNET = 0x40000000
_NLMSGHDR, _IFINFOMSG = "=IHHII", "=BxHiII"


@contextmanager
def _netlink_in(ns: str):
    """A NETLINK_ROUTE socket inside network namespace ``ns``."""
    libc = ctypes.CDLL(None, use_errno=True)
    here = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise TargetError(f"lab: setns into {ns}: {os.strerror(ctypes.get_errno())}")
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        finally:
            if libc.setns(here, CLONE_NEWNET) != 0:
                raise RuntimeError(f"setns back to this process's namespace: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(here)
        os.close(there)
    with sock:
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        sock.bind((0, 0))
        yield sock


def attr(kind: int, payload: bytes) -> bytes:
    """One rtattr, padded to 4 bytes."""
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def attrs(data: bytes) -> dict[int, bytes]:
    """The rtattrs in ``data`` by type (nested ones stay packed)."""
    out, off = {}, 0
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[off + 4 : off + length]
        off += (length + 3) & ~3
    return out


def _request(ns: str, msg_type: int, flags: int, index: int, payload: bytes) -> bytes:
    """Send one link request; the reply's ifinfomsg attributes (GET) or b"" (ACK); TargetError with the
    kernel's own message on an error."""
    body = struct.pack(_IFINFOMSG, socket.AF_UNSPEC, 0, index, 0, 0) + payload
    msg = struct.pack(_NLMSGHDR, 16 + len(body), msg_type, NLM_F_REQUEST | flags, 1, 0) + body
    with _netlink_in(ns) as sock:
        sock.send(msg)
        reply = sock.recv(65536)
    length, kind, rflags, _, _ = struct.unpack_from(_NLMSGHDR, reply)
    if kind == NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", reply, 16)
        if code == 0:
            return b""
        # after the error code: our header (and body unless capped), then the extack attributes
        echoed_len = struct.unpack_from("=I", reply, 20)[0] if not rflags & 0x100 else 16
        text = attrs(reply[20 + echoed_len : length]).get(NLMSGERR_ATTR_MSG, b"").rstrip(b"\0").decode()
        raise TargetError(f"{errno.errorcode.get(-code, -code)}: {text or os.strerror(-code)}")
    return reply[16 + 16 : length]


def set_ipv4_big_tcp(ns: str, index: int, size: int) -> None:
    """Set a link's IPv4 GSO and GRO max sizes (BIG TCP for IPv4)."""
    u32 = struct.Struct("=I").pack
    _request(
        ns,
        RTM_NEWLINK,
        NLM_F_ACK,
        index,
        attr(IFLA_GSO_IPV4_MAX_SIZE, u32(size)) + attr(IFLA_GRO_IPV4_MAX_SIZE, u32(size)),
    )


def ipv4_big_tcp(ns: str, index: int) -> tuple[int, int]:
    """(gso_ipv4_max_size, gro_ipv4_max_size) as the kernel holds them; TargetError if it has none."""
    found = attrs(_request(ns, RTM_GETLINK, 0, index, b""))
    if IFLA_GSO_IPV4_MAX_SIZE not in found or IFLA_GRO_IPV4_MAX_SIZE not in found:
        raise TargetError("the kernel reports no gso_ipv4_max_size/gro_ipv4_max_size (IPv4 BIG TCP needs Linux 6.3)")
    gso, gro = (struct.unpack("=I", found[k][:4])[0] for k in (IFLA_GSO_IPV4_MAX_SIZE, IFLA_GRO_IPV4_MAX_SIZE))
    return gso, gro
