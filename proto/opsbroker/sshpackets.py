"""How our SSH ends send and receive packets: asyncssh's packets, without its needless work.

Both ends of our SSH transport use asyncssh, so this lives in the wire package: the broker's SSH
front-end and the SSH backend call :func:`lean_packets` on each connection. It changes three
things, and none changes a byte a peer can tell from asyncssh's own:

- **No empty** ``MSG_IGNORE`` **where it protects nothing.** asyncssh (2.24) sends one before
  each packet it encrypts: the countermeasure to the chosen-plaintext attack on SSH's CBC modes,
  where the IV of a packet is the last ciphertext block of the one before (RFC 4251, 9.3.1).
  With an AEAD cipher or a counter mode no IV is predictable (PuTTY sends it only with CBC), yet
  each costs a second encryption, write and TCP segment, and a second packet for the peer. It is
  held back only while the cipher is one of :data:`NO_IV_CHAINING`.
- **AES-GCM packets sealed with one copy.** asyncssh builds a packet of the connection protocol
  (channel data above all) by concatenation: the payload, the padding, the cipher text and its
  tag, each a new copy of the whole packet, and it sets up a new AES key schedule for each. Here
  the plain text is joined once, sealed by one ``AESGCM`` kept for the key, and handed to the
  transport as its length and the sealed bytes: the packet asyncssh would send (the same
  layout, padding rule, nonce sequence and counters).
- **AES-GCM channel data opened where it lies.** asyncssh keeps what it receives in one
  ``bytes`` that it concatenates to and slices from for every packet (each a copy of all that is
  buffered), and copies each packet twice more to decrypt it. Under GCM a packet's length is
  not encrypted (RFC 5647, 7.2), so a packet is found in the received bytes without asyncssh,
  decrypted from where it lies, and a ``MSG_CHANNEL_DATA`` is handed to its channel as asyncssh
  hands it. Anything else, or anything unusual (another packet type, an unknown channel, a tag
  that fails, padding out of bounds, a key exchange under way), is left to asyncssh, from that
  packet's first byte: the nonce is not advanced for a packet left to asyncssh, which opens it
  again and decides what it means.

Everything else (key exchange and authentication, a due rekey, compression, another cipher,
asyncssh's packet log at debug level 3) takes asyncssh's own path, as does every packet of an
asyncssh whose connection lacks the state this reads. ``tests/ssh/test_sshpackets.py`` compares
sealed packets with asyncssh's byte for byte, and runs both directions through rekeys, ragged
reads and damaged packets against asyncssh's own ends. Broker CPU per 64 MiB of command output
fell by about a quarter with the sealing alone (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from typing import Any, Final

import asyncssh
from asyncssh.constants import MSG_CHANNEL_DATA, MSG_IGNORE, MSG_UNIMPLEMENTED, MSG_USERAUTH_LAST
from asyncssh.encryption import GCMEncryption
from asyncssh.misc import DisconnectError, ProtocolError
from asyncssh.packet import PacketDecodeError, SSHPacket, String, UInt32
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["NO_IV_CHAINING", "lean_packets"]

_EMPTY: Final = (String(b""),)
"""The arguments of asyncssh's inserted ignore packet: one empty string."""

NO_IV_CHAINING: Final = frozenset(
    {
        "aes128-gcm@openssh.com",
        "aes256-gcm@openssh.com",
        "chacha20-poly1305@openssh.com",
        "aes128-ctr",
        "aes192-ctr",
        "aes256-ctr",
    }
)
"""Ciphers whose packets gain nothing from an ignore packet before them."""

_SEND_STATE: Final = (
    "_send_encryption",
    "_send_seq",
    "_kex_complete",
    "_auth_complete",
    "_compressor",
    "_transport",
    "_rekey_bytes",
    "_rekey_bytes_sent",
    "_rekey_seconds",
    "_rekey_time",
)
"""The connection's state a sealed packet reads and advances, as asyncssh's ``send_packet``."""

_RECEIVE_STATE: Final = (
    "_recv_encryption",
    "_recv_seq",
    "_recv_handler",
    "_recv_pkthdr",
    "_inpbuf",
    "_transport",
    "_channels",
    "_kex_complete",
    "_auth_complete",
    "_decompressor",
    "_max_recv_pktlen",
    "_reset_keepalive_timer",
    "_finish_recv_packet",
    "_send_disconnect",
    "_force_close",
    "internal_error",
    "create_task",
)
"""The connection's state an opened packet reads and advances, as asyncssh's ``_recv_packet``."""

_GCM_BLOCK: Final = 16
"""AES's block: padding, packet type and payload fill whole blocks (the length is not
encrypted under GCM: RFC 5647, 7.2), with at least 4 bytes of padding (RFC 4253, 6)."""

_GCM_TAG: Final = 16
"""The authentication tag after each GCM packet."""


def lean_packets(conn: asyncssh.SSHClientConnection | asyncssh.SSHServerConnection) -> None:
    """Make ``conn`` send and receive as described in this module. Call it once a connection
    exists, before or after its key exchange: the ciphers in force are looked up at each packet,
    so a rekey to another cipher or key is followed."""
    _send_lean(conn)
    if all(hasattr(conn, name) for name in _RECEIVE_STATE):
        _receive_lean(conn)


def _packet_log(conn: Any) -> bool:
    """Whether asyncssh logs every packet (debug level 3): then it sends and receives them all."""
    return bool(getattr(conn.logger, "_debug_level", 3) >= 3)


def _aead(slot: list[Any], cipher: Any) -> AESGCM:
    """The ``AESGCM`` of ``cipher``'s key, kept in ``slot`` until the cipher changes (a rekey)."""
    if not slot or slot[0] is not cipher:
        slot[:] = [cipher, AESGCM(cipher._key)]
    aead: AESGCM = slot[1]
    return aead


def _send_lean(conn: Any) -> None:
    send = conn.send_packet
    sealable = all(hasattr(conn, name) for name in _SEND_STATE)
    slot: list[Any] = []

    def seal(pkttype: int, args: tuple[bytes, ...]) -> bool:
        """Send one packet as asyncssh would, but with one copy; False where asyncssh must."""
        encryption = conn._send_encryption
        if (
            type(encryption) is not GCMEncryption
            or not (conn._kex_complete and conn._auth_complete)
            or conn._compressor is not None
            or conn._transport is None
            or conn._rekey_bytes_sent >= conn._rekey_bytes
            or (conn._rekey_seconds and time.monotonic() >= conn._rekey_time)
            or _packet_log(conn)
        ):
            return False
        cipher: Any = encryption._cipher
        padding = -(1 + 1 + sum(map(len, args))) % _GCM_BLOCK
        if padding < 4:
            padding += _GCM_BLOCK
        plain = b"".join((bytes((padding, pkttype)), *args, os.urandom(padding)))
        length = len(plain).to_bytes(4, "big")
        sealed = _aead(slot, cipher).encrypt(cipher._iv, plain, length)
        cipher._update_iv()
        with contextlib.suppress(ConnectionError):  # as asyncssh's own: the loss is reported
            conn._transport.writelines((length, sealed))
        conn._send_seq = (conn._send_seq + 1) & 0xFFFFFFFF
        conn._rekey_bytes_sent += len(plain)
        return True

    def send_packet(pkttype: int, *args: bytes, handler: Any = None) -> None:
        if pkttype == MSG_IGNORE:
            if args == _EMPTY and conn.get_extra_info("send_cipher") in NO_IV_CHAINING:
                return
        elif pkttype > MSG_USERAUTH_LAST and sealable and seal(pkttype, args):
            return
        send(pkttype, *args, handler=handler)

    conn.send_packet = send_packet


def _receive_lean(conn: Any) -> None:
    receive = conn.data_received  # asyncssh's own
    between_packets = conn._recv_pkthdr
    held = b""  # the start of a packet, received: asyncssh's buffer is empty meanwhile
    slot: list[Any] = []

    def framing() -> bool:
        """Whether received bytes are cut into packets here: under GCM, on an open connection,
        while asyncssh waits for a packet's start with nothing buffered."""
        return (
            type(conn._recv_encryption) is GCMEncryption
            and conn._transport is not None
            and conn._recv_handler == between_packets
            and not conn._inpbuf
        )

    def opened(packet: memoryview) -> tuple[Any, SSHPacket] | None:
        """The channel and data of ``packet`` (one whole packet), its nonce spent; None, its
        nonce unspent, for a packet that is asyncssh's to handle: before key exchange and
        authentication are complete, with compression or a packet log, for any type but channel
        data, an unknown channel, padding out of bounds or a tag that fails."""
        if (
            not (conn._kex_complete and conn._auth_complete)
            or conn._decompressor is not None
            or _packet_log(conn)
        ):
            return None
        cipher: Any = conn._recv_encryption._cipher
        try:
            plain = _aead(slot, cipher).decrypt(cipher._iv, packet[4:], packet[:4])
        except InvalidTag:
            return None  # asyncssh finds the same, and disconnects
        padding = plain[0]
        if plain[1] != MSG_CHANNEL_DATA or padding < 4 or padding + 6 > len(plain):
            return None
        data = SSHPacket(plain[1:-padding])
        data.get_byte()
        channel = conn._channels.get(data.get_uint32())
        if channel is None:
            return None
        cipher._update_iv()
        return channel, data

    def handle(channel: Any, packet: SSHPacket) -> bool:
        """Process one opened packet as asyncssh's ``_recv_packet`` does; False if it went on in
        a task of asyncssh's (the connection then holds further input until it is done)."""
        seq = conn._recv_seq
        try:
            result = channel.process_packet(MSG_CHANNEL_DATA, seq, packet)
        except PacketDecodeError as exc:
            raise ProtocolError(str(exc)) from None
        if inspect.isawaitable(result):
            conn._recv_handler = lambda: False
            task = conn.create_task(result)
            task.add_done_callback(
                lambda t: conn._finish_recv_packet(MSG_CHANNEL_DATA, seq, t, is_async=True)
            )
            return False
        if not result:
            conn.send_packet(MSG_UNIMPLEMENTED, UInt32(seq))
        conn._finish_recv_packet(MSG_CHANNEL_DATA, seq)
        return True

    def data_received(data: bytes, datatype: object = None) -> None:
        nonlocal held
        if not held and not framing():
            receive(data)
            return
        source, held = held + data, b""
        view = memoryview(source)
        done, malformed = 0, False
        conn._reset_keepalive_timer()
        try:
            while len(view) - done >= 4 and framing():
                length = int.from_bytes(view[done : done + 4], "big")
                if length > conn._max_recv_pktlen or length % _GCM_BLOCK:
                    malformed = True  # asyncssh refuses it
                    break
                end = done + 4 + length + _GCM_TAG
                if end > len(view):
                    break
                packet, done = view[done:end], end
                if (ours := opened(packet)) is None:
                    receive(bytes(packet))  # one whole packet, for asyncssh
                elif not handle(*ours):
                    break
        except DisconnectError as exc:  # as asyncssh's _recv_data
            conn._send_disconnect(exc.code, exc.reason, exc.lang)
            conn._force_close(exc)
            return
        except Exception:
            conn.internal_error()
            return
        rest = source[done:] if done else source
        if not rest or conn._transport is None:
            return
        if framing() and not malformed:
            held = rest  # the start of a packet: wait for the rest of it
        elif conn._recv_handler == between_packets and not conn._inpbuf:
            receive(rest)  # asyncssh's from here (another cipher, or a malformed packet)
        else:
            conn._inpbuf += rest  # asyncssh is inside a packet of its own: it holds the rest

    conn.data_received = data_received
    transport = conn._transport
    if transport is not None and getattr(transport, "get_protocol", lambda: None)() is conn:
        transport.set_protocol(conn)  # uvloop's transports keep the protocol's data_received
