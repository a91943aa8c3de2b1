"""From text to the terms the heuristic compares: tokens, stems, skills. Pure.

``tokens`` cuts text into words, keeping technical spellings whole ("C++",
"C#", "Node.js", "CI/CD") and splitting other compounds ("Python/SQL",
"cross-functional") into their parts. A word goes on through its combining marks (an
accent typed as a mark, Arabic vowel signs, the vowel signs of Indic scripts: ``\\w``
alone cut "équipe" to "quipe" and Hindi to nothing), and Japanese, written without
spaces, is cut where its script changes: a run of kanji or of katakana is a word
("データベースの設計経験": データベース, 設計経験), the kana between them its grammar,
dropped. ``terms`` reads the tokens left to
right: a run that spells a skill of ``vocabulary.SKILLS`` (several words at
most ``PHRASE_WORDS_MAX``, compared by stem, so "unit testing" is "unit
tests") is that skill; any other word counts by its stem unless it is a stop
word, a calendar word, a number or a single letter.

A term's key is a skill's name as the vocabulary writes it ("Python",
"CI/CD") or a word's stem, which is always lower case: a word and a skill
never share a key, whatever they are spelt like ("go" the verb, "Go").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from durable_ops.dev_model.stemmer import stem
from durable_ops.dev_model.vocabulary import CALENDAR_WORDS, SKILLS, STOP_WORDS, Skill

PHRASE_WORDS_MAX = 4


def _marks() -> str:
    """The combining marks of the Basic Multilingual Plane, as the body of a regex class."""
    marks = [
        chr(code) for code in range(0x300, 0x10000) if unicodedata.category(chr(code))[0] == "M"
    ]
    return "".join(re.escape(mark) for mark in marks)


_IN_WORD = rf"[\w{_marks()}+#]*"
_WORD = re.compile(rf"[^\W_]{_IN_WORD}(?:[./-][^\W_]{_IN_WORD})*")
# Japanese words by their script: runs of kanji, of katakana (with its long-vowel mark),
# of hiragana (grammar: dropped), and of anything else.
_HIRAGANA = "\u3040-\u309f"
_KANA_AND_KANJI = f"{_HIRAGANA}\u30a0-\u30ff\u31f0-\u31ff\u3400-\u9fff\uf900-\ufaff"
_BY_SCRIPT = re.compile(
    f"[\u3400-\u9fff\uf900-\ufaff]+|[\u30a0-\u30ff\u31f0-\u31ff]+|[{_HIRAGANA}]+"
    f"|[^{_KANA_AND_KANJI}]+"
)
_ONLY_HIRAGANA = re.compile(f"[{_HIRAGANA}]+")
_JOINER = re.compile(r"[./-]")  # what joins the parts of a compound ("node.js", "end-to-end")


@dataclass(frozen=True)
class Token:
    surface: str  # as written
    lower: str
    stem: str


@dataclass(frozen=True)
class Term:
    key: str  # a skill's name, or a word's stem
    display: str  # how an answer quotes it: lower case
    skill: bool


def _spellings(skill: Skill) -> list[str]:
    # A name that is also an everyday word ("Go", "REST") counts only as written.
    names = [] if skill.name in skill.exact else [skill.name.lower()]
    return names + [alias.lower() for alias in skill.aliases]


# Spellings that are one token although they hold a joiner: "ci/cd", "node.js".
_WHOLE = frozenset(
    spelling
    for skill in SKILLS
    for spelling in _spellings(skill)
    if " " not in spelling and _JOINER.search(spelling)
)


def tokens(text: str) -> list[Token]:
    """The words of ``text``, technical spellings whole, other compounds in parts."""
    found: list[Token] = []
    for match in _WORD.finditer(unicodedata.normalize("NFC", text)):
        for part in _parts(match.group()):
            for word in _BY_SCRIPT.findall(part):
                if not _ONLY_HIRAGANA.fullmatch(word):
                    lower = word.lower()
                    found.append(Token(word, lower, stem(lower)))
    return found


def _parts(compound: str) -> list[str]:
    if compound.lower() in _WHOLE:
        return [compound]
    parts = []
    for piece in compound.split("/"):  # "Python/SQL", "Node.js/React"
        if piece.lower() in _WHOLE:
            parts.append(piece)
        else:
            parts.extend(part for part in _JOINER.split(piece) if part)
    return parts


def _stems(spelling: str) -> tuple[str, ...]:
    return tuple(token.stem for token in tokens(spelling))


_SKILL_BY_NAME = {skill.name: skill for skill in SKILLS}
# One-token spellings by their lower-case form; several-token ones by their stems.
_SINGLE: dict[str, Skill] = {}
_PHRASES: dict[tuple[str, ...], Skill] = {}
_EXACT: dict[str, Skill] = {}
for _skill in SKILLS:
    for _spelling in _spellings(_skill):
        _stemmed = _stems(_spelling)
        if len(_stemmed) == 1:
            _SINGLE[_spelling] = _skill
        elif 1 < len(_stemmed) <= PHRASE_WORDS_MAX:
            _PHRASES[_stemmed] = _skill
    for _spelling in _skill.exact:
        _EXACT[_spelling] = _skill

_DROPPED = STOP_WORDS | CALENDAR_WORDS
_DROPPED_STEMS = frozenset(stem(word) for word in _DROPPED)


def _single_skill(token: Token) -> Skill | None:
    exact = _EXACT.get(token.surface)
    if exact is not None:
        return exact
    lower = token.lower
    # The spelling itself or its plural ("microservices"); a stem would be too loose
    # here: "reacted" is no evidence of React.
    for candidate in (lower, lower.removesuffix("s"), lower.removesuffix("es")):
        if candidate in _SINGLE and (candidate == lower or len(candidate) > 3):
            return _SINGLE[candidate]
    return None


def _skill_at(found: list[Token], start: int) -> tuple[Skill, int] | None:
    """The skill spelt from ``found[start]`` on, and how many tokens it takes."""
    for length in range(min(PHRASE_WORDS_MAX, len(found) - start), 1, -1):
        stems = tuple(token.stem for token in found[start : start + length])
        if stems in _PHRASES:
            return _PHRASES[stems], length
    skill = _single_skill(found[start])
    return None if skill is None else (skill, 1)


def is_content(token: Token) -> bool:
    """Whether a word that is not a skill counts: no stop, calendar or single-letter
    word, no number ("2019", "5+", "40k")."""
    return (
        len(token.lower) > 1
        and not token.lower[0].isdigit()
        and token.lower not in _DROPPED
        and token.stem not in _DROPPED_STEMS
    )


def terms(text: str) -> list[Term]:
    """The terms of ``text`` in order, repeats included."""
    found = tokens(text)
    result: list[Term] = []
    index = 0
    while index < len(found):
        spelt = _skill_at(found, index)
        if spelt is not None:
            skill, length = spelt
            result.append(Term(skill.name, skill.name.lower(), skill=True))
            index += length
            continue
        token = found[index]
        if is_content(token):
            result.append(Term(token.stem, token.lower, skill=False))
        index += 1
    return result


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` that count, as written: stop and calendar
    words, numbers and single letters left out."""
    return [token.lower for token in tokens(text) if is_content(token)]


def is_skill(key: str) -> bool:
    return key in _SKILL_BY_NAME


def with_implied(keys: Iterable[str]) -> set[str]:
    """``keys`` and every broader skill they imply, transitively (Next.js: React,
    JavaScript): a CV that names a framework shows the language."""
    found = set(keys)
    pending = [key for key in found if key in _SKILL_BY_NAME]
    while pending:
        for broader in _SKILL_BY_NAME[pending.pop()].implies:
            if broader not in found:
                found.add(broader)
                pending.append(broader)
    return found
