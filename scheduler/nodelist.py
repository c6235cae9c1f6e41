"""The scheduler's node list, read and answered as bytes.

With `nodeCacheCapable: true`, kube-scheduler sends every filter and prioritize call the names of
the nodes it considers: at 20,000 nodes that is ~270 KiB, and turning it into 20,000 Python
strings, looking each up in a dict and encoding each answer element one by one costs several
microseconds per node, per call. Here the list stays a byte buffer: the names become rows of a
zero-padded byte matrix (one numpy pass), are found in the cache by comparing 64-bit words, and
answers are assembled as byte matrices whose padding is dropped in one step.

Only the exact layout kube-scheduler's Go encoder produces is read this way: the body ends with
`,"NodeNames":["a","b",...]}`, and the names are printable ASCII without quotes or backslashes
(node names are DNS subdomains). Anything else (escapes, Unicode, whitespace, a `Nodes` list)
returns None, and the caller parses the body in full with orjson: both ways give the same answer
(the tests compare them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]

_KEY = b',"NodeNames":['
_QUOTE, _COMMA, _BACKSLASH = ord('"'), ord(","), ord("\\")
_WORD = 8  # bytes per comparison word


def split_request(raw: bytes) -> tuple[dict[str, Any], NodeNames] | None:
    """The request without its node list, and the list as bytes; None when the body is not in
    the encoder's exact layout (the caller then parses it in full)."""
    cut = split_head(raw)
    if cut is None:
        return None
    head, listed = cut
    names = NodeNames.parse(listed)
    return None if names is None else (head, names)


def split_head(raw: bytes) -> tuple[dict[str, Any], Bytes] | None:
    """The request without its node list (parsed), and the list's bytes (not yet checked).

    The list is the body's last member. Cutting at the last `,"NodeNames":[` is safe because the
    head must then parse as a non-empty object on its own and the tail as a list of plain names
    (`NodeNames.parse`): a cut inside a string or a nested object leaves one of them malformed,
    and then the whole body goes to the full parser. Duplicate keys resolve as in a full parse
    (the last wins)."""
    if not raw.endswith(b"]}"):
        return None
    cut = raw.rfind(_KEY)
    if cut < 0:
        return None
    start = cut + len(_KEY) - 1  # at '['
    try:
        head = orjson.loads(raw[:cut] + b"}")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(head, dict) or not head:  # `{` + `,"NodeNames"` would not be JSON
        return None
    head.pop("NodeNames", None)
    return head, np.frombuffer(raw, dtype=np.uint8, count=len(raw) - 1 - start, offset=start)


@dataclass(frozen=True)
class NodeNames:
    """Names as rows of a zero-padded byte matrix (`rows[i, :lengths[i]]` is name i)."""

    rows: Bytes  # (count, width), width a multiple of 8
    lengths: Ints
    listed: Bytes  # the list exactly as received, `[` ... `]`

    @property
    def count(self) -> int:
        return len(self.lengths)

    @staticmethod
    def parse(listed: Bytes) -> NodeNames | None:
        """`["a","b"]` (no spaces, printable ASCII, no escapes) or None."""
        if len(listed) < 2 or listed[0] != ord("[") or listed[-1] != ord("]"):
            return None
        inner = listed[1:-1]
        if not len(inner):
            return NodeNames(np.zeros((0, _WORD), np.uint8), np.zeros(0, np.int64), listed)
        if ((inner < 0x20) | (inner > 0x7E) | (inner == _BACKSLASH)).any():
            return None
        quotes = np.flatnonzero(inner == _QUOTE)
        if not len(quotes) or len(quotes) % 2:
            return None
        opens, closes = quotes[0::2], quotes[1::2]
        # Exactly `"name","name",...,"name"`: every byte outside the quotes is one comma.
        if (
            opens[0] != 0
            or closes[-1] != len(inner) - 1
            or not (opens[1:] == closes[:-1] + 2).all()
            or not (inner[closes[:-1] + 1] == _COMMA).all()
        ):
            return None
        lengths = (closes - opens - 1).astype(np.int64)
        return NodeNames(_rows_at(inner, opens + 1, lengths), lengths, listed)

    def subset(self, keep: npt.NDArray[np.bool_]) -> NodeNames:
        """The names where `keep` is true, listed as `list_json(keep)` writes them."""
        listed = np.frombuffer(self.list_json(keep), dtype=np.uint8)
        return NodeNames(self.rows[keep], self.lengths[keep], listed)

    def texts(self, which: Ints) -> list[str]:
        """The names at `which`, as strings (for the few a caller needs one by one)."""
        return [self.rows[i, : self.lengths[i]].tobytes().decode("ascii") for i in which.tolist()]

    def list_json(self, keep: npt.NDArray[np.bool_]) -> bytes:
        """`["a","c"]`: the names where `keep` is true, in order."""
        if keep.all():
            return self.listed.tobytes()
        if not keep.any():
            return b"[]"
        chosen = self.rows[keep]
        return b"[" + _join_rows([b'"', chosen, b'",'], len(chosen))[:-1] + b"]"

    def object_json(self, which: Ints, values: Bytes) -> bytes:
        """`{"a":"why","b":"why"}` for the names at `which`; `values` holds each one's JSON
        value as a zero-padded row."""
        if not len(which):
            return b"{}"
        body = _join_rows([b'"', self.rows[which], b'":', values, b","], len(which))
        return b"{" + body[:-1] + b"}"

    def priorities_json(self, scores: Ints) -> bytes:
        """HostPriorityList `[{"Host":"a","Score":7},...]`; scores are 0..10 (or up to 99)."""
        if not self.count:
            return b"[]"
        digits = np.zeros((self.count, 2), dtype=np.uint8)
        tens = scores // 10
        digits[:, 0] = np.where(tens > 0, ord("0") + tens, 0)
        digits[:, 1] = ord("0") + scores % 10
        body = _join_rows([b'{"Host":"', self.rows, b'","Score":', digits, b"},"], self.count)
        return b"[" + body[:-1] + b"]"


def padded_table(texts: list[bytes]) -> Bytes:
    """Byte strings as zero-padded rows (for `object_json` values)."""
    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    flat = np.frombuffer(b"".join(texts), dtype=np.uint8)
    return _pad_rows(flat, lengths)


class NameTable:
    """Known names for `NodeNames.positions`: an open-addressing hash table over each name's
    padded row read as 64-bit words. A hash hit counts only when every word matches, so the
    lookup is exact; the table is a quarter full, so most names are found at the first probe."""

    def __init__(self, names: list[str], slots: list[int]) -> None:
        plain = [
            (n.encode("ascii"), s)
            for n, s in zip(names, slots, strict=True)
            if n and n.isascii() and n.isprintable() and '"' not in n and "\\" not in n
        ]
        rows = padded_table([n for n, _ in plain]) if plain else np.zeros((0, _WORD), np.uint8)
        self.width = rows.shape[1]
        self.words = np.ascontiguousarray(rows).view(np.uint64)
        self.slots = np.array([s for _, s in plain], dtype=np.int64)
        self.hashes = _hash(self.words)
        bits = max(4, int(4 * max(len(plain), 1) - 1).bit_length())
        self.shift = np.uint64(64 - bits)
        self.mask = (1 << bits) - 1
        self.table = np.full(1 << bits, -1, dtype=np.int64)
        self.probes = 1
        for k, h in enumerate(self.hashes.tolist()):
            at, probe = h >> (64 - bits), 1
            while self.table[at] >= 0:
                at, probe = (at + 1) & self.mask, probe + 1
            self.table[at] = k
            self.probes = max(self.probes, probe)

    def positions(self, names: NodeNames) -> Ints:
        """Each name's cache slot, -1 for a name the cache does not know."""
        n = names.count
        out = np.full(n, -1, dtype=np.int64)
        if not n or not len(self.slots):
            return out
        rows, width = names.rows, self.width
        if rows.shape[1] < width:
            wide = np.zeros((n, width), dtype=np.uint8)
            wide[:, : rows.shape[1]] = rows
            rows = wide
        elif rows.shape[1] > width:
            rows = np.ascontiguousarray(rows[:, :width])
        words = rows.view(np.uint64)
        hashes = _hash(words)
        at = (hashes >> self.shift).astype(np.int64)
        found = np.full(n, -1, dtype=np.int64)
        pending = np.arange(n)
        for _ in range(self.probes):  # each round looks again only for the names not yet found
            candidate = self.table[at[pending]]
            occupied = candidate >= 0
            same = occupied.copy()
            same[occupied] = self.hashes[candidate[occupied]] == hashes[pending[occupied]]
            found[pending[same]] = candidate[same]
            pending = pending[occupied & ~same]  # an empty slot ends the search: unknown
            if not len(pending):
                break
            at[pending] = (at[pending] + 1) & self.mask
        hit = found >= 0
        stored, asked = self.words[found[hit]], words[hit]
        same = stored[:, 0] == asked[:, 0]
        for j in range(1, stored.shape[1]):  # column by column: all(axis=1) is slow on 2-4 words
            same &= stored[:, j] == asked[:, j]
        hit[hit] = same
        hit &= names.lengths <= width
        out[hit] = self.slots[found[hit]]
        return out


def _hash(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    # A multiply-xorshift over the row's words; numpy wraps uint64 arithmetic, as intended.
    mult = np.uint64(0x9E3779B97F4A7C15)
    h = np.full(len(words), mult, dtype=np.uint64)
    for j in range(words.shape[1]):
        h = (h ^ words[:, j]) * mult
        h ^= h >> np.uint64(29)
    return h


def _pad_rows(flat: Bytes, lengths: Ints) -> Bytes:
    """Concatenated byte strings (`flat`, split by `lengths`) as zero-padded rows."""
    return _rows_at(flat, np.cumsum(lengths) - lengths, lengths)


def _rows_at(buffer: Bytes, starts: Ints, lengths: Ints) -> Bytes:
    """`buffer[starts[i] : starts[i] + lengths[i]]` as zero-padded rows. Gathered through a
    sliding-window view, so no index array as large as the buffer is ever made."""
    width = max(_WORD, -(-int(lengths.max(initial=0)) // _WORD) * _WORD)
    if not len(lengths):
        return np.zeros((0, width), dtype=np.uint8)
    tail = np.zeros(len(buffer) + width, dtype=np.uint8)
    tail[: len(buffer)] = buffer
    rows = np.lib.stride_tricks.sliding_window_view(tail, width)[starts]
    rows *= np.arange(width) < lengths[:, None]
    return rows


def _join_rows(parts: list[bytes | Bytes], count: int) -> bytes:
    """Each row the concatenation of `parts` (constants, or per-row padded blocks), all rows
    joined, padding dropped. Correct because no part contains a zero byte."""
    blocks = [np.frombuffer(p, dtype=np.uint8) if isinstance(p, bytes) else p for p in parts]
    widths = [b.shape[-1] for b in blocks]
    out = np.empty((count, sum(widths)), dtype=np.uint8)
    at = 0
    for block, width in zip(blocks, widths, strict=True):
        out[:, at : at + width] = block
        at += width
    flat = out.reshape(-1)
    joined: bytes = flat[flat != 0].tobytes()
    return joined
