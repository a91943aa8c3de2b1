"""The development model's answers: deterministic keyword and structure heuristics. Pure.

Not intelligence, and every answer says so (``HEURISTIC_NOTE`` opens each
summary), but honest arithmetic on the inputs, so every run of the product (and
every test) gets the same answer for the same text:

- strategy.snapshot: the posting's key terms (``terms``: stemmed words and the
  skills of ``vocabulary``, stop and calendar words left out, the company name
  too; title words weighted up) against the CV's terms; fit score = the share of
  key terms the CV shows, each weighted by how often the posting names it and
  skills ``SKILL_WEIGHT`` times more than other words.
- cv.review: structure checks (length, section headings, quantified
  achievements, bullets, contact details) plus key-term coverage when a
  posting is given.
- any other task: ``schema_answer`` fills the answer schema it was sent from
  the same key-term coverage (scores, a summary sentence, lists of terms).

When there is nothing to score (no CV, a posting or CV without a word that
counts) the score is ``unscored``, never a computed 0: the caller passes None
where the answer schema allows null, else the schema's floor, and the summary
begins "Not scored".
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from durable_ops.dev_model.schema import allows_null, kind_of
from durable_ops.dev_model.terms import Term, is_skill, terms, with_implied
from durable_ops.dev_model.terms import words as words  # the tests' and callers' name
from durable_ops.model.prompt_sections import (
    CV_SECTION,
    END_SECTION,
    JOB_SECTION,
    TRUNCATION_MARK,
)

HEURISTIC_NOTE = "Built-in heuristic, not an AI assessment."
KEY_TERM_LIMIT = 20
WORD_TERMS_MIN = 6  # of the key terms, kept for words other than skills when there are any
TITLE_WEIGHT = 2
SKILL_WEIGHT = 3
SHORT_CV_WORDS = 200
LONG_CV_WORDS = 1_200
LIST_LIMIT = 6
KEYWORDS_MISSING_LIMIT = 12

Score = int | None  # None: not scored

_QUANTIFIED = re.compile(
    r"\d+(?:[.,]\d+)?\s?(?:%|percent\b|[xkm]\b|bn\b)"
    r"|[$€£]\s?\d"
    r"|\b(?!(?:19|20)\d\d\b)\d+(?:[.,]\d+)?\s+[^\W\d_]",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^\s*(?:[-*•▪‣]|\d+[.)])\s+")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_PHONE = re.compile(r"\+?\d[\d ()/-]{7,}\d")

_HEADINGS: dict[str, frozenset[str]] = {
    "Experience": frozenset(
        {
            "experience",
            "work experience",
            "professional experience",
            "employment",
            "employment history",
            "work history",
            "career history",
        }
    ),
    "Education": frozenset({"education", "academic background", "qualifications"}),
    "Skills": frozenset(
        {"skills", "technical skills", "core skills", "key skills", "competencies"}
    ),
    "Summary": frozenset(
        {"summary", "profile", "professional summary", "about", "about me", "objective"}
    ),
    "Projects": frozenset({"projects", "selected projects"}),
    "Certifications": frozenset({"certifications", "certificates", "licenses"}),
}
_ESSENTIAL_SECTIONS = ("Experience", "Education", "Skills")


Section = Literal["job", "cv"]


@dataclass(frozen=True)
class Inputs:
    job_title: str = ""
    job_company: str = ""
    job_text: str | None = None  # None: no posting given
    cv_text: str | None = None  # None: no CV given


def parse_inputs(user_text: str, *, unsectioned: Section) -> Inputs:
    """Read the sections of ``durable_ops.model.prompt_sections``.

    Text without any section line is taken whole as the input named by
    ``unsectioned`` ("job" or "cv"), so a hand-written prompt works too. The mark
    the worker ends a cut text with is no word of the posting or the CV: it is left
    out, and so is the piece of a word before it (both came back as key terms of a
    long posting: "The CV mentions 'truncated'", "… 'eng' …").
    """
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in user_text.splitlines():
        marker = line.strip()
        if marker in (JOB_SECTION, CV_SECTION):
            current = sections.setdefault(marker, [])
        elif marker == END_SECTION:
            current = None
        elif current is not None:
            current.append(line)
    if not sections:
        if unsectioned == "cv":
            return Inputs(cv_text=user_text)
        return Inputs(job_text=user_text)
    title = company = ""
    job_lines = sections.get(JOB_SECTION)
    if job_lines is not None:
        title, company, job_lines = _job_header(job_lines)
    cv_lines = sections.get(CV_SECTION)
    return Inputs(
        job_title=_uncut(title),
        job_company=_uncut(company),
        job_text=None if job_lines is None else _uncut("\n".join(job_lines)),
        cv_text=None if cv_lines is None else _uncut("\n".join(cv_lines)),
    )


_LAST_WORD = re.compile(r"\S*\Z")


def _uncut(text: str) -> str:
    """``text`` without the mark of a cut (``TRUNCATION_MARK``) at its end, nor the word
    the cut ended in: it may be a piece of one ("eng" of "engineer")."""
    if not text.endswith(TRUNCATION_MARK):
        return text
    return _LAST_WORD.sub("", text.removesuffix(TRUNCATION_MARK))


def _job_header(lines: list[str]) -> tuple[str, str, list[str]]:
    fields = {"title": "", "company": ""}
    rest = list(lines)
    while rest:
        label, _, value = rest[0].partition(":")
        key = label.strip().lower()
        if key in fields and not fields[key]:
            fields[key] = value.strip()
        elif key != "description" or value.strip():
            break
        rest.pop(0)
    return fields["title"], fields["company"], rest


def key_terms(inputs: Inputs) -> dict[str, tuple[str, int]]:
    """The posting's key terms by key (``terms.Term.key``): (display word, weight).

    The weight is how much the posting stresses a term: how often it names it,
    plus ``TITLE_WEIGHT`` for a term of the title; most stressed first (then
    first named). The company's own name is left out. Of more than
    ``KEY_TERM_LIMIT``, skills are chosen first, but ``WORD_TERMS_MIN`` places
    stay for other words: what the work is about ("payments", "design") counts too.
    """
    excluded = {term.key for term in terms(inputs.job_company) if not term.skill}
    title_keys = {term.key for term in terms(inputs.job_title)}
    counts: Counter[str] = Counter()
    first: dict[str, Term] = {}
    for term in terms(f"{inputs.job_title}\n{inputs.job_text or ''}"):
        if term.key in excluded:
            continue
        counts[term.key] += 1
        first.setdefault(term.key, term)
    order = {key: index for index, key in enumerate(first)}
    weights = {
        key: count + (TITLE_WEIGHT if key in title_keys else 0) for key, count in counts.items()
    }
    ranked = sorted(weights, key=lambda key: (-weights[key], order[key]))
    skills = [key for key in ranked if first[key].skill]
    others = [key for key in ranked if not first[key].skill]
    skill_places = min(len(skills), KEY_TERM_LIMIT - min(len(others), WORD_TERMS_MIN))
    chosen = set(skills[:skill_places] + others[: KEY_TERM_LIMIT - skill_places])
    return {key: (first[key].display, weights[key]) for key in ranked if key in chosen}


def importance(key: str, weight: int) -> int:
    """What a key term counts for in a score: a skill ``SKILL_WEIGHT`` times a word."""
    return weight * SKILL_WEIGHT if is_skill(key) else weight


@dataclass(frozen=True)
class Coverage:
    matched: list[str]  # display words, most important first
    missing: list[str]
    score: Score  # importance-weighted share of key terms matched, 0-100; None: no CV terms
    total: int
    skills_matched: int
    skills_total: int

    @classmethod
    def of(cls, key_terms: dict[str, tuple[str, int]], cv_text: str) -> Coverage:
        cv_terms = terms(cv_text)
        # A CV that names Django shows Python; one that names PostgreSQL shows SQL.
        evidence = with_implied(term.key for term in cv_terms)
        ranked = sorted(key_terms.items(), key=lambda item: -importance(item[0], item[1][1]))
        matched = [display for key, (display, _) in ranked if key in evidence]
        missing = [display for key, (display, _) in ranked if key not in evidence]
        total_weight = sum(importance(key, weight) for key, (_, weight) in ranked)
        matched_weight = sum(
            importance(key, weight) for key, (_, weight) in ranked if key in evidence
        )
        score = round(100 * matched_weight / total_weight) if cv_terms and total_weight else None
        skill_keys = [key for key in key_terms if is_skill(key)]
        return cls(
            matched=matched,
            missing=missing,
            score=score,
            total=len(key_terms),
            skills_matched=sum(1 for key in skill_keys if key in evidence),
            skills_total=len(skill_keys),
        )


def _count(number: int, noun: str) -> str:
    """A count with its noun, singular for one: "1 line", "3 lines"."""
    return f"{number} {noun if number == 1 else noun + 's'}"


def _quote(terms: list[str]) -> str:
    return ", ".join(f"'{_start(term, 40)}'" for term in terms)


_JOINER = "\u200d"
_REGIONAL_INDICATORS = range(0x1F1E6, 0x1F200)
_SKIN_TONES = range(0x1F3FB, 0x1F400)


def _start(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text``, never ending inside what shows as one: a
    title cut after the woman of "👩‍💻" showed a woman, and one cut inside a flag a letter."""
    if len(text) <= limit:
        return text
    end = limit
    while end > 0 and (_continues(text[end]) or text[end - 1] == _JOINER):
        end -= 1
    indicators = 0
    while indicators < end and ord(text[end - 1 - indicators]) in _REGIONAL_INDICATORS:
        indicators += 1
    return text[: end - indicators % 2]


def _continues(char: str) -> bool:
    """Whether ``char`` belongs to the one before it: a combining mark, a variation selector,
    a joiner or an emoji tag (format characters), or a skin tone."""
    return unicodedata.category(char) in {"Mn", "Mc", "Me", "Cf"} or ord(char) in _SKIN_TONES


def _not_scored(reason: str) -> str:
    return f"{HEURISTIC_NOTE} Not scored: {reason}"


def strategy_snapshot(inputs: Inputs, unscored: Score = 0) -> dict[str, Any]:
    """The snapshot answer; ``unscored`` is the fit score when nothing can be scored."""
    key = key_terms(inputs)
    role = f"'{_start(inputs.job_title, 120)}'" if inputs.job_title else "this role"
    if not key:
        return {
            "fit_score": unscored,
            "summary": _not_scored(
                f"the posting for {role} has no requirements this heuristic can compare."
            ),
            "strengths": [],
            "gaps": ["The posting names no requirements that could be compared."],
            "next_steps": ["Add the full job description to the posting and run this again."],
        }
    key_words = [display for display, _ in key.values()]
    if inputs.cv_text is None:
        return {
            "fit_score": unscored,
            "summary": _not_scored(
                f"no CV was given, so fit for {role} is not estimated. The posting's key "
                f"terms are {_quote(key_words[:5])}."
            ),
            "strengths": [],
            "gaps": [f"No CV evidence yet for '{_start(term, 40)}'." for term in key_words][
                :LIST_LIMIT
            ],
            "next_steps": [
                "Attach a CV so the snapshot can compare it with this posting.",
                "Note one concrete example for each key term before applying.",
            ],
        }
    coverage = Coverage.of(key, inputs.cv_text)
    if coverage.score is None:
        return {
            "fit_score": unscored,
            "summary": _not_scored(f"the CV has no words to compare with the posting for {role}."),
            "strengths": [],
            "gaps": [f"No CV evidence yet for '{_start(term, 40)}'." for term in key_words][
                :LIST_LIMIT
            ],
            "next_steps": ["Attach a CV with its full text and run this again."],
        }
    next_steps = []
    if coverage.missing:
        next_steps.append(
            f"Add evidence of {_quote(coverage.missing[:3])} to the CV where you have it."
        )
    if coverage.matched:
        next_steps.append(f"Lead the cover letter with {_quote(coverage.matched[:2])}.")
    if coverage.score >= 70:
        next_steps.append("Apply soon: the CV already covers most key terms.")
    elif coverage.score >= 40:
        next_steps.append("Tailor the CV summary to the posting's wording before applying.")
    else:
        next_steps.append("Treat this as a stretch role: close the largest gaps first.")
    next_steps.append("Prepare one quantified example per key requirement for the interview.")
    return {
        "fit_score": coverage.score,
        "summary": (
            f"{HEURISTIC_NOTE} Estimated fit {coverage.score}/100 for {role}: the CV shows "
            f"{len(coverage.matched)} of the posting's {_count(coverage.total, 'key term')}"
            f"{_skills_note(coverage)}."
        ),
        "strengths": [
            f"The CV mentions '{_start(term, 40)}', a key term of the posting."
            for term in coverage.matched[:LIST_LIMIT]
        ],
        "gaps": [
            f"No evidence of '{_start(term, 40)}' in the CV."
            for term in coverage.missing[:LIST_LIMIT]
        ],
        "next_steps": next_steps[:LIST_LIMIT],
    }


def _skills_note(coverage: Coverage) -> str:
    if not coverage.skills_total:
        return ""
    return (
        f", {coverage.skills_matched} of its {_count(coverage.skills_total, 'named skill')}"
        f" (a skill counts {SKILL_WEIGHT} times a word)"
    )


def _headings(cv_text: str) -> list[str]:
    found = []
    for line in cv_text.splitlines():
        heading = " ".join(line.strip().strip("#*=_-").rstrip(":").lower().split())
        for name, aliases in _HEADINGS.items():
            if heading in aliases and name not in found:
                found.append(name)
    return found


def cv_review(inputs: Inputs, unscored: Score = 0) -> dict[str, Any]:
    """The review answer; ``unscored`` is the overall score when nothing can be scored."""
    cv_text = inputs.cv_text or ""
    if not terms(cv_text):
        return {
            "overall_score": unscored,
            "summary": _not_scored("the CV has no words this heuristic can review."),
            "strengths": [],
            "improvements": ["Upload the CV with its full text and run this again."],
            "keywords_missing": [],
        }
    word_count = len(cv_text.split())
    lines = cv_text.splitlines()
    headings = _headings(cv_text)
    quantified = sum(1 for line in lines if _QUANTIFIED.search(line))
    bullets = sum(1 for line in lines if _BULLET.match(line))
    has_contact = bool(_EMAIL.search(cv_text) or _PHONE.search(cv_text))

    strengths: list[str] = []
    improvements: list[str] = []
    score = 30
    for name in _ESSENTIAL_SECTIONS:
        if name in headings:
            score += 10
            strengths.append(f"Has a clear {name} section.")
        else:
            article = "an" if name[0] in "AEIOU" else "a"
            improvements.append(f"Add {article} {name} section with its own heading.")
    if "Summary" in headings:
        score += 5
        strengths.append("Opens with a profile or summary.")
    score += 3 * min(quantified, 5)
    if quantified >= 3:
        strengths.append(f"Quantifies achievements ({_count(quantified, 'line')} with figures).")
    else:
        improvements.append("Quantify achievements: numbers, percentages, amounts, scale.")
    if word_count < SHORT_CV_WORDS:
        improvements.append(
            f"The CV is short ({_count(word_count, 'word')}): describe impact in detail."
        )
    elif word_count > LONG_CV_WORDS:
        score += 5
        improvements.append(f"The CV is long ({word_count} words): tighten it to two pages.")
    else:
        score += 10
        strengths.append(f"A readable length ({word_count} words).")
    if has_contact:
        score += 5
    else:
        improvements.append("Add contact details (email or phone) at the top.")
    if bullets >= 3:
        score += 5
        strengths.append("Uses bullet points that are easy to scan.")
    else:
        improvements.append("Use bullet points for responsibilities and achievements.")

    keywords_missing: list[str] = []
    posting_note = ""
    if inputs.job_text is not None:
        key = key_terms(inputs)
        coverage = Coverage.of(key, cv_text)
        if key and coverage.score is not None:
            score = round(0.7 * score + 0.3 * coverage.score)
            keywords_missing = [term[:60] for term in coverage.missing[:KEYWORDS_MISSING_LIMIT]]
            posting_note = (
                f" Against the posting it mentions {len(coverage.matched)} of "
                f"{_count(coverage.total, 'key term')}."
            )
            if coverage.missing:
                improvements.append(
                    f"Work in the posting's terms you can back up: {_quote(coverage.missing[:3])}."
                )
    score = max(0, min(100, score))
    return {
        "overall_score": score,
        "summary": (
            f"{HEURISTIC_NOTE} Overall {score}/100: {_count(word_count, 'word')}, "
            f"{_count(len(headings), 'recognised section')}, "
            f"{_count(quantified, 'line')} with figures.{posting_note}"
        ),
        "strengths": strengths[:LIST_LIMIT],
        "improvements": improvements[:LIST_LIMIT],
        "keywords_missing": keywords_missing,
    }


def schema_answer(schema: dict[str, Any], inputs: Inputs) -> dict[str, Any]:
    """An answer in the shape of ``schema`` for a task with no heuristic of its own.

    Integers are the key-term coverage score, strings say what was compared,
    arrays list the matched terms, then the missing ones. Without both texts, or
    without terms to compare, an integer is null where the schema allows it, else
    0, and the strings say it is not scored. ``app.conform`` then cuts it to the
    schema's limits.
    """
    key = key_terms(inputs)
    score: Score = None
    if inputs.cv_text is None or inputs.job_text is None:
        summary = _not_scored("only one of a posting and a CV was given, so nothing was compared.")
        listed = [display for display, _ in key.values()]
    else:
        coverage = Coverage.of(key, inputs.cv_text)
        score, listed = coverage.score, coverage.matched + coverage.missing
        if not key or score is None:
            summary = _not_scored("the posting or the CV has no words to compare.")
        else:
            summary = (
                f"{HEURISTIC_NOTE} The CV shows {len(coverage.matched)} of the posting's "
                f"{coverage.total} key terms."
            )
    properties: dict[str, Any] = schema.get("properties", {})
    answer: dict[str, Any] = {}
    for name, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        kind = kind_of(spec)
        if kind == "integer":
            answer[name] = score if score is not None or allows_null(spec) else 0
        elif kind == "string":
            answer[name] = summary
        elif kind == "array":
            answer[name] = listed or [summary]
    return answer
