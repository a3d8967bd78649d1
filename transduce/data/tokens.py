"""Units: how a side of the data is cut into symbols, and how symbols become text again.

A prepared dataset records, for the source and the target side, a *side spec* (a plain
dict in `manifest.json`) such as `{"unit": "char"}` or
`{"unit": "subword", "library": "subword-nmt", ...}`. `detokenize` turns a symbol
sequence of that side back into the text a user expects to read (what `decode` prints and
what `score` compares): characters joined for `char`, symbols joined by spaces for
`symbol`, subwords merged into words for `subword`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

from transduce.errors import ConfigError
from transduce.special import escape, escape_char, unescape

# Units a raw text field can be cut into.
CHAR = "char"  # one symbol per character (whitespace escaped, see transduce.special)
SYMBOL = "symbol"  # whitespace-separated tokens (phonemes, tags)
WORD = "word"  # whitespace-separated words of running text
SUBWORD = "subword"  # BPE pieces of words
TEXT_UNITS = (CHAR, SYMBOL)

SUBWORD_NMT = "subword-nmt"
SENTENCEPIECE = "sentencepiece"
SUBWORD_NMT_SEPARATOR = "@@"  # subword-nmt's continuation marker, "Jah@@ re"
SENTENCEPIECE_SPACE = "\u2581"  # sentencepiece's word-start marker, "▁Jahre"

# Unicode normal forms a side's text can be put in before it is cut (`normalize`)
_FORMS: dict[str, Literal["NFC", "NFD", "NFKC", "NFKD"]] = {
    "nfc": "NFC",
    "nfd": "NFD",
    "nfkc": "NFKC",
    "nfkd": "NFKD",
}
HANGUL = "hangul"  # the Hangul syllables alone decomposed (NFD), the rest as it is
NORMAL_FORMS = (*_FORMS, HANGUL)
HANGUL_SYLLABLES = ("\uac00", "\ud7a3")  # the 11,172 precomposed syllables, first and last


def normalize(text: str, form: str) -> str:
    """`text` in the Unicode normal `form` (one of NORMAL_FORMS).

    nfd: canonical decomposition, e.g. the Hangul syllable "한" (U+D55C) becomes its three
    conjoining jamo U+1112 U+1161 U+11AB, and "é" becomes "e" and U+0301; nfc composes
    again; the k forms also fold compatibility characters ("ﬁ" -> "fi"); hangul: the
    Hangul syllables as nfd writes them, every other character as it is ("한é" -> U+1112
    U+1161 U+11AB "é").
    """
    if form == HANGUL:
        first, last = HANGUL_SYLLABLES
        return "".join(unicodedata.normalize("NFD", c) if first <= c <= last else c for c in text)
    if form not in _FORMS:
        raise ConfigError(
            f"unknown Unicode normal form {form!r} (valid: {', '.join(NORMAL_FORMS)})"
        )
    return unicodedata.normalize(_FORMS[form], text)


_WHITESPACE = re.compile(r"\s")  # in a str pattern, what str.isspace() is (tests/test_formats.py)


def chars(text: str) -> list[str]:
    """Cut `text` into character symbols (code points), escaping whitespace."""
    if _WHITESPACE.search(text) is None:  # most words: no character to escape
        return list(text)
    return [escape_char(c) for c in text]


def tokenize(text: str, unit: str) -> list[str]:
    """Cut a raw field into symbols of `unit` ("char" or "symbol"/"word")."""
    if unit == CHAR:
        return chars(text)
    if unit in (SYMBOL, WORD):
        return text.split()
    raise ConfigError(f"unknown unit {unit!r} (valid: {', '.join(TEXT_UNITS)})")


def guess_unit(fields: Sequence[str]) -> str:
    """`symbol` when most fields contain whitespace ("K AE T"), else `char` ("cat").

    A few multiword forms ("Aa gemacht") do not turn a column of words into symbols.
    """
    spaced = sum(1 for f in fields if len(f.split()) > 1)
    return SYMBOL if spaced * 2 > len(fields) else CHAR


def word_symbol(text: str) -> str:
    """A whole word as one symbol (CoNLL-U forms may contain spaces: "chủ tịch")."""
    return escape(text)


def detokenize(symbols: Sequence[str], side: dict[str, Any]) -> str:
    """Turn the symbols of one side back into text, as the side spec says.

    Args:
        symbols: The symbol sequence (a prepared field split on spaces, or model output).
        side: The side spec from a manifest, e.g. `{"unit": "char"}`.

    Returns:
        The text: characters joined for "char"; symbols joined by single spaces for
        "symbol"; words joined by spaces (escapes undone) for "word"; subwords merged
        back into words for "subword".
    """
    unit = side.get("unit")
    if unit == CHAR:
        return "".join(unescape(s) for s in symbols)
    if unit == SYMBOL:
        return " ".join(symbols)
    if unit == WORD:
        return " ".join(unescape(s) for s in symbols)
    if unit == SUBWORD:
        library = side.get("library")
        if library == SUBWORD_NMT:
            marker = SUBWORD_NMT_SEPARATOR
            text = " ".join(symbols).replace(marker + " ", "")
            return text[: -len(marker)] if text.endswith(marker) else text
        if library == SENTENCEPIECE:
            return "".join(symbols).replace(SENTENCEPIECE_SPACE, " ").strip()
        raise ConfigError(f"unknown subword library {library!r}")
    raise ConfigError(f"unknown unit {unit!r} in side spec {side!r}")
