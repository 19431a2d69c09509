"""How our SSH ends send packets: asyncssh's packets, without its needless work.

Both ends of our SSH transport use asyncssh, so this lives in the wire package: the broker's SSH
front-end and the SSH backend call :func:`send_lean` on each connection. It changes two things,
and neither changes a byte a peer can tell from asyncssh's own:

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
  transport as its length and the sealed bytes. The packet is the one asyncssh would send (the
  same layout, padding rule, nonce sequence and counters; ``tests/ssh/test_sshpackets.py``
  compares them byte for byte). Broker CPU per 64 MiB of command output fell by a third.

Everything else (key exchange and authentication packets, a due rekey, compression, another
cipher, asyncssh's packet log at debug level 3) takes asyncssh's own path, as does every packet
of an asyncssh whose connection lacks the state this reads.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Final

import asyncssh
from asyncssh.constants import MSG_IGNORE, MSG_USERAUTH_LAST
from asyncssh.encryption import GCMEncryption
from asyncssh.packet import String
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["NO_IV_CHAINING", "send_lean"]

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

_STATE: Final = (
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

_GCM_BLOCK: Final = 16
"""AES's block: padding, packet type and payload fill whole blocks (the length is not
encrypted under GCM: RFC 5647, 7.2), with at least 4 bytes of padding (RFC 4253, 6)."""


def send_lean(conn: asyncssh.SSHClientConnection | asyncssh.SSHServerConnection) -> None:
    """Make ``conn`` send as described in this module. Call it once a connection exists, before
    or after its key exchange: the cipher in force is looked up at each packet, so a rekey to
    another cipher or key is followed."""
    send = conn.send_packet
    lean: Any = conn
    sealable = all(hasattr(lean, name) for name in _STATE)
    sealer: tuple[object, AESGCM] | None = None  # the cipher and the AESGCM of its key

    def seal(pkttype: int, args: tuple[bytes, ...], handler: Any) -> bool:
        """Send one packet as asyncssh would, but with one copy; False where asyncssh must."""
        nonlocal sealer
        encryption = lean._send_encryption
        if (
            type(encryption) is not GCMEncryption
            or not (lean._kex_complete and lean._auth_complete)
            or lean._compressor is not None
            or lean._transport is None
            or lean._rekey_bytes_sent >= lean._rekey_bytes
            or (lean._rekey_seconds and time.monotonic() >= lean._rekey_time)
            or getattr(lean.logger, "_debug_level", 3) >= 3
        ):
            return False
        cipher: Any = encryption._cipher
        if sealer is None or sealer[0] is not cipher:
            sealer = (cipher, AESGCM(cipher._key))
        padding = -(1 + 1 + sum(map(len, args))) % _GCM_BLOCK
        if padding < 4:
            padding += _GCM_BLOCK
        plain = b"".join((bytes((padding, pkttype)), *args, os.urandom(padding)))
        length = len(plain).to_bytes(4, "big")
        sealed = sealer[1].encrypt(cipher._iv, plain, length)
        cipher._update_iv()
        with contextlib.suppress(ConnectionError):  # as asyncssh's own: the loss is reported
            lean._transport.writelines((length, sealed))
        lean._send_seq = (lean._send_seq + 1) & 0xFFFFFFFF
        lean._rekey_bytes_sent += len(plain)
        return True

    def send_packet(pkttype: int, *args: bytes, handler: Any = None) -> None:
        if pkttype == MSG_IGNORE:
            if args == _EMPTY and conn.get_extra_info("send_cipher") in NO_IV_CHAINING:
                return
        elif pkttype > MSG_USERAUTH_LAST and sealable and seal(pkttype, args, handler):
            return
        send(pkttype, *args, handler=handler)

    conn.send_packet = send_packet  # type: ignore[method-assign]
