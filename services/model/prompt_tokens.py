"""How many tokens a text may take in a prompt: one pure rule for the worker's cut of
each input and admission's reservation, so what is reserved covers what is sent
(ADR 0063). Neither can tokenize (the model server does), so both count the same way:

    tokens_of(text) = digits + ceil(other ASCII characters / 3)
                      + UTF-8 bytes of every non-ASCII character

Non-ASCII text is counted at its bytes, a true bound: Gemma's tokenizer (SentencePiece
with byte fallback) never spends more than one token per byte. ASCII text is counted
at 3 characters a token, the documented assumption for prose (Gemma averages 4 to 6 on
English), but a digit at a token of its own: Gemma spends one on every digit, and a
CV's dates, phone numbers and figures are where a third of a token was short. Measured
with the real server's ``/tokenize`` (Gemma 3 270M, llama.cpp; text, characters, UTF-8
bytes, tokens, this estimate; the prose rows' estimates as counted before digits were,
which the few digits in them move little):

    English prose (a CV)          8,000   8,000   1,395   2,667
    README.md (markdown, code)    8,000   8,018   2,305   2,691
    French/German, accented       6,000   6,788   1,457   3,314
    Japanese prose                8,000  24,000   3,803  24,000
    random CJK ideographs         8,000  24,000  16,690  24,000
    emoji                         6,000  23,250   6,000  23,250
    random emoji (4 bytes each)   6,000  24,000  15,591  24,000
    Cyrillic / Arabic / Hindi     6,000  11-16k  1.1-2.1k  10-16k
    random ASCII digits           6,000   6,000   6,000   6,000
    random ASCII letters          6,000   6,000   3,515   2,000

The last is where the estimate is short: text that is not words (codes, base64)
splits finely. (Digits were counted as prose until 2026-12-07, a third of what they
take.) No ASCII text takes more than a token a character, so no text takes more than 3 times its
estimate: the model's context is sized for that (``budgets.MODEL_CONTEXT_TOKENS``),
so any admitted prompt fits; only its reservation can be short, by what the
settlement then charges.
"""

from __future__ import annotations

# ASCII characters per prompt token, counted low (Gemma averages 4 to 6 on English prose).
CHARS_PER_TOKEN = 3
_ASCII = bytes(range(128))
_NOT_DIGITS = bytes(set(range(256)).difference(b"0123456789"))


def tokens_of(text: str) -> int:
    """The tokens ``text`` is estimated to take: each digit one, its other ASCII characters
    at 3 a token, rounded up, and every other character at its UTF-8 bytes."""
    raw = text.encode("utf-8", "surrogatepass")
    other = len(raw.translate(None, _ASCII))
    digits = len(raw.translate(None, _NOT_DIGITS))
    return digits + -(-(len(raw) - other - digits) // CHARS_PER_TOKEN) + other


def cut(text: str, budget: int) -> str:
    """The longest start of ``text`` within ``budget`` tokens: all of it when it fits."""
    if tokens_of(text) <= budget:
        return text
    # A start of n characters takes at least n / 3 tokens: none longer than 3 x budget fits.
    fits, too_long = 0, min(len(text), CHARS_PER_TOKEN * budget + 1)
    while too_long - fits > 1:
        middle = (fits + too_long) // 2
        if tokens_of(text[:middle]) <= budget:
            fits = middle
        else:
            too_long = middle
    return text[:fits]
