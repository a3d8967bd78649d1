"""Reserved symbols, their fixed vocabulary ids, and the whitespace escapes.

Prepared datasets write every side as symbols separated by single spaces, so a symbol can
never contain whitespace. Where the data has whitespace *inside a unit* (a space in a
multiword inflected form such as "Aa gemacht", a non-breaking space, a Vietnamese word
"chủ tịch"), each whitespace character is written as an escape: U+0020 becomes the
reserved symbol `<space>`, any other whitespace character `<U+hhhh>` (its code point).
`unescape` turns escapes back into the characters, so no information is lost.
"""

from __future__ import annotations

import re

PAD = "<pad>"
BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"
SEP = "<sep>"  # between the tags and the lemma (Rios et al. 2021 §4.1, Figure 2)
SPACE = "<space>"  # a space character inside a unit

# Fixed ids: every vocabulary starts with these, in this order.
SPECIALS: tuple[str, ...] = (PAD, BOS, EOS, UNK, SEP)
PAD_ID, BOS_ID, EOS_ID, UNK_ID, SEP_ID = range(len(SPECIALS))

# Symbols a user's data may not contain as whole symbols.
RESERVED: frozenset[str] = frozenset((*SPECIALS, SPACE))

_ESCAPE = re.compile(r"<space>|<U\+([0-9A-F]{4,6})>")


def escape_char(char: str) -> str:
    """Return the symbol for one character: itself, or its escape if it is whitespace."""
    if not char.isspace():
        return char
    return SPACE if char == " " else f"<U+{ord(char):04X}>"


def escape(text: str) -> str:
    """Escape every whitespace character inside `text` (a unit that must stay one symbol)."""
    if not any(c.isspace() for c in text):
        return text
    return "".join(escape_char(c) for c in text)


def unescape(symbol: str) -> str:
    """Invert `escape` / `escape_char`: `<space>` -> " ", `<U+00A0>` -> "\\xa0"."""
    if "<" not in symbol:
        return symbol
    return _ESCAPE.sub(lambda m: " " if m.group(1) is None else chr(int(m.group(1), 16)), symbol)
