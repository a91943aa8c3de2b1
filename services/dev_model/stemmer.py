"""A small suffix stemmer for English, enough to match a posting's words with a CV's. Pure.

Not Porter: a handful of suffix rules, applied until none applies, then a
final "e" dropped, so the forms of one word meet: "Designed", "designing",
"designer" and "designs" all become "design"; "deployment" and "deployed"
"deploy"; "technologies" "technology"; "scalable" and "scalability" "scal".
A stem is a matching key, not a word, and it is never shorter than
``MIN_STEM`` letters: a rule that would cut deeper does not apply. Some
unrelated words meet too ("engine", "engineer"): for comparing two texts that
costs little. Only plain lower-case words are stemmed; "c++", "node.js" or
"python3" come back as they are.
"""

from __future__ import annotations

import re

MIN_STEM = 3
_MAX_PASSES = 3  # "engineering" -> "engineer" -> "engine": two suffixes at most, in practice

# Irregular forms a CV is full of ("Built", "Led"), mapped to the present.
_IRREGULAR = {
    "built": "build",
    "led": "lead",
    "wrote": "write",
    "written": "write",
    "ran": "run",
    "grew": "grow",
    "grown": "grow",
    "drove": "drive",
    "driven": "drive",
    "taught": "teach",
    "made": "make",
    "began": "begin",
    "begun": "begin",
    "chose": "choose",
    "chosen": "choose",
    "spoke": "speak",
    "held": "hold",
    "won": "win",
    "sold": "sell",
    "brought": "bring",
    "thought": "think",
    # Plurals of abbreviations ending in "i", which the "-is" rule ("analysis") would keep.
    "apis": "api",
    "kpis": "kpi",
    "uis": "ui",
    "guis": "gui",
}
# British "-ise" forms spelt as "-ize", so "optimised" meets "optimized".
_BRITISH = re.compile(r"is(e|ed|es|ing|er|ers|ation|ations)$")
_VOWEL = re.compile(r"[aeiouy]")

# (suffix, replacement), longest first; the first that applies is taken.
_RULES: tuple[tuple[str, str], ...] = (
    ("ibility", ""),
    ("ability", ""),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ment", ""),
    ("ible", ""),
    ("able", ""),
    ("sses", "ss"),
    ("ies", "y"),
    ("ied", "y"),
    ("ing", ""),
    ("ive", ""),
    ("ion", ""),
    ("es", ""),
    ("ed", ""),
    ("er", ""),
    ("s", ""),
)
# Only after these does "-ion" end a verb ("execution", "collection").
_ION_AFTER = ("s", "t")
# Only after these is "-es" a plural ending ("fixes", "patches"): else "-s" is ("databases").
_ES_AFTER = ("x", "z", "ch", "sh")
# "-s" that is not a plural ending ("class", "status", "analysis").
_NOT_PLURAL = ("ss", "us", "is")
# After these a doubled consonant is single again ("shipped", "planner")...
_UNDOUBLING = frozenset({"ing", "ed", "er"})
# ...except these ("installed", "passing").
_KEEP_DOUBLE = frozenset("lsz")


def stem(word: str) -> str:
    """The stem of a lower-case word."""
    word = _IRREGULAR.get(word, word)
    if not word.isalpha() or not word.islower() or len(word) <= MIN_STEM:
        return word
    if len(word) > MIN_STEM + 2:
        word = _BRITISH.sub(r"iz\1", word)
    for _ in range(_MAX_PASSES):
        shorter = _strip_one(word)
        if shorter == word:
            break
        word = shorter
    if word.endswith("e") and len(word) > MIN_STEM:
        word = word[:-1]
    return word


def _strip_one(word: str) -> str:
    for suffix, replacement in _RULES:
        if not word.endswith(suffix):
            continue
        base = word[: -len(suffix)]
        if not _applies(suffix, base, word):
            continue
        if suffix in _UNDOUBLING:
            return _undouble(base + replacement)
        return base + replacement
    return word


def _applies(suffix: str, base: str, word: str) -> bool:
    if len(base) < MIN_STEM and suffix not in ("ies", "ied"):
        return False
    if suffix == "ion":
        return base.endswith(_ION_AFTER)
    if suffix == "es":
        return base.endswith(_ES_AFTER)
    if suffix == "s":
        return not word.endswith(_NOT_PLURAL)
    if suffix in ("ing", "ed"):
        return bool(_VOWEL.search(base))  # "string", "shed": no vowel left, not a suffix
    return True


def _undouble(base: str) -> str:
    last = base[-1]
    if len(base) > MIN_STEM and last == base[-2] and last not in _KEEP_DOUBLE:
        return base if _VOWEL.match(last) else base[:-1]  # "seed" keeps its "ee"
    return base
