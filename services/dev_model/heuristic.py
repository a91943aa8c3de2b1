"""The development model's answers: deterministic keyword and structure heuristics.

Not intelligence, but honest arithmetic on the inputs, so every run of the
product (and every test) gets the same answer for the same text:

- strategy.snapshot: the posting's key terms (frequent words minus stopwords,
  title words weighted up, company name left out) against the CV's words;
  fit score = the weighted share of key terms the CV mentions.
- cv.review: structure checks (length, section headings, quantified
  achievements, bullets, contact details) plus key-term coverage when a
  posting is given.
- any other task: ``schema_answer`` fills the answer schema it was sent from
  the same key-term coverage (scores, a summary sentence, lists of terms).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from durable_ops.model.prompt_sections import CV_SECTION, END_SECTION, JOB_SECTION

KEY_TERM_LIMIT = 20
TITLE_WEIGHT = 2
SHORT_CV_WORDS = 200
LONG_CV_WORDS = 1_200
LIST_LIMIT = 6
KEYWORDS_MISSING_LIMIT = 12

_STOPWORD_TEXT = """
    a about above across after again against all also am an and any are as at be
    because been before being below between both but by can could did do does doing
    down during each either etc few for from further had has have having he her here
    hers him his how i if in into is it its itself just like may me might more most
    must my no nor not now of off on once only or other our ours out over own per
    same shall she should so some such than that the their theirs them then there
    these they this those through to too under until up upon us very via was we were
    what when where which while who whom why will with within without would you your
    yours able ability amp based best candidate candidates closely company description
    day degree environment excellent experience experienced field good great help ideal
    including job join knowledge looking new nice offer plus preferred related required
    requirements responsibilities responsible role skills strong team title using want
    wish work working year years need needs seeking hiring senior junior mid level
    ll re ve use uses used
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"[^\W_][\w+#]*(?:[./-][^\W_][\w+#]*)*")
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
    ``unsectioned`` ("job" or "cv"), so a hand-written prompt works too.
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
        job_title=title,
        job_company=company,
        job_text=None if job_lines is None else "\n".join(job_lines),
        cv_text=None if cv_lines is None else "\n".join(cv_lines),
    )


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


def _stem(word: str) -> str:
    # Enough to match "APIs" with "API" and "services" with "service".
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    """Lower-cased content words of ``text``: stopwords, numbers and single letters dropped."""
    found = []
    for word in _WORD.findall(text.lower()):
        if len(word) < 2 or word in STOPWORDS or word.replace(".", "").isdigit():
            continue
        found.append(word)
    return found


def key_terms(inputs: Inputs) -> dict[str, tuple[str, int]]:
    """The posting's key terms by stem: (display word, weight), most important first."""
    job_words = words(f"{inputs.job_title}\n{inputs.job_text or ''}")
    excluded = {_stem(word) for word in words(inputs.job_company)}
    title_stems = {_stem(word) for word in words(inputs.job_title)}
    counts: Counter[str] = Counter()
    display: dict[str, str] = {}
    for word in job_words:
        stem = _stem(word)
        if stem in excluded:
            continue
        counts[stem] += 1
        display.setdefault(stem, word)
    order = {stem: index for index, stem in enumerate(display)}
    weights = {
        stem: count + (TITLE_WEIGHT if stem in title_stems else 0) for stem, count in counts.items()
    }
    ranked = sorted(weights, key=lambda stem: (-weights[stem], order[stem]))[:KEY_TERM_LIMIT]
    return {stem: (display[stem], weights[stem]) for stem in ranked}


@dataclass(frozen=True)
class Coverage:
    matched: list[str]  # display words, most important first
    missing: list[str]
    score: int  # weighted share of key terms matched, 0-100
    total: int

    @classmethod
    def of(cls, terms: dict[str, tuple[str, int]], cv_text: str) -> Coverage:
        cv_stems = {_stem(word) for word in words(cv_text)}
        matched = [term for stem, (term, _) in terms.items() if stem in cv_stems]
        missing = [term for stem, (term, _) in terms.items() if stem not in cv_stems]
        total_weight = sum(weight for _, weight in terms.values())
        matched_weight = sum(weight for stem, (_, weight) in terms.items() if stem in cv_stems)
        score = round(100 * matched_weight / total_weight) if total_weight else 0
        return cls(matched=matched, missing=missing, score=score, total=len(terms))


def _quote(terms: list[str]) -> str:
    return ", ".join(f"'{term[:40]}'" for term in terms)


def strategy_snapshot(inputs: Inputs) -> dict[str, Any]:
    terms = key_terms(inputs)
    role = f"'{inputs.job_title[:120]}'" if inputs.job_title else "this role"
    if not terms:
        return {
            "fit_score": 0,
            "summary": f"The posting for {role} has too little text to compare against.",
            "strengths": [],
            "gaps": ["The posting names no requirements that could be compared."],
            "next_steps": ["Add the full job description to the posting and run this again."],
        }
    if inputs.cv_text is None:
        return {
            "fit_score": 0,
            "summary": (
                f"No CV was given, so fit for {role} is not scored. The posting's key "
                f"terms are {_quote(list(t for t, _ in terms.values())[:5])}."
            ),
            "strengths": [],
            "gaps": [f"No CV evidence yet for '{term[:40]}'." for term, _ in terms.values()][
                :LIST_LIMIT
            ],
            "next_steps": [
                "Attach a CV so the snapshot can compare it with this posting.",
                "Note one concrete example for each key term before applying.",
            ],
        }
    coverage = Coverage.of(terms, inputs.cv_text)
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
            f"Estimated fit {coverage.score}/100 for {role}: the CV mentions "
            f"{len(coverage.matched)} of the posting's {coverage.total} key terms."
        ),
        "strengths": [
            f"The CV mentions '{term[:40]}', a key term of the posting."
            for term in coverage.matched[:LIST_LIMIT]
        ],
        "gaps": [
            f"No evidence of '{term[:40]}' in the CV." for term in coverage.missing[:LIST_LIMIT]
        ],
        "next_steps": next_steps[:LIST_LIMIT],
    }


def _headings(cv_text: str) -> list[str]:
    found = []
    for line in cv_text.splitlines():
        heading = " ".join(line.strip().strip("#*=_-").rstrip(":").lower().split())
        for name, aliases in _HEADINGS.items():
            if heading in aliases and name not in found:
                found.append(name)
    return found


def cv_review(inputs: Inputs) -> dict[str, Any]:
    cv_text = inputs.cv_text or ""
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
            improvements.append(f"Add a {name} section with its own heading.")
    if "Summary" in headings:
        score += 5
        strengths.append("Opens with a profile or summary.")
    score += 3 * min(quantified, 5)
    if quantified >= 3:
        strengths.append(f"Quantifies achievements ({quantified} lines with figures).")
    else:
        improvements.append("Quantify achievements: numbers, percentages, amounts, scale.")
    if word_count < SHORT_CV_WORDS:
        improvements.append(f"The CV is short ({word_count} words): describe impact in detail.")
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
        terms = key_terms(inputs)
        if terms:
            coverage = Coverage.of(terms, cv_text)
            score = round(0.7 * score + 0.3 * coverage.score)
            keywords_missing = [term[:60] for term in coverage.missing[:KEYWORDS_MISSING_LIMIT]]
            posting_note = (
                f" Against the posting it mentions {len(coverage.matched)} of "
                f"{coverage.total} key terms."
            )
            if coverage.missing:
                improvements.append(
                    f"Work in the posting's terms you can back up: {_quote(coverage.missing[:3])}."
                )
    score = max(0, min(100, score))
    return {
        "overall_score": score,
        "summary": (
            f"Overall {score}/100: {word_count} words, {len(headings)} recognised sections, "
            f"{quantified} lines with figures.{posting_note}"
        ),
        "strengths": strengths[:LIST_LIMIT],
        "improvements": improvements[:LIST_LIMIT],
        "keywords_missing": keywords_missing,
    }


def schema_answer(schema: dict[str, Any], inputs: Inputs) -> dict[str, Any]:
    """An answer in the shape of ``schema`` for a task with no heuristic of its own.

    Integers are the key-term coverage score (0 without both texts), strings say
    what was compared, arrays list the matched terms, then the missing ones.
    ``app.conform`` then cuts it to the schema's limits.
    """
    terms = key_terms(inputs)
    if inputs.cv_text is not None and inputs.job_text is not None:
        coverage = Coverage.of(terms, inputs.cv_text)
        found = len(coverage.matched)
        summary = f"The CV mentions {found} of the posting's {coverage.total} key terms."
        score, listed = coverage.score, coverage.matched + coverage.missing
    else:
        summary = "Only one of a posting and a CV was given, so nothing was compared."
        score, listed = 0, [term for term, _ in terms.values()]
    fill = {"integer": score, "string": summary, "array": listed or [summary]}
    properties: dict[str, Any] = schema.get("properties", {})
    return {
        name: fill[spec["type"]]
        for name, spec in properties.items()
        if isinstance(spec, dict) and spec.get("type") in fill
    }
