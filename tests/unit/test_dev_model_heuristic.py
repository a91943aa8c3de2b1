"""The development model's heuristic: tokens, stems, skills, and scores that do not mislead.

Pure: the heuristic is called directly, its answers checked against the task's
answer schema (``model.tasks``) the worker will check them against.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from durable_ops.dev_model.heuristic import (
    HEURISTIC_NOTE,
    Coverage,
    Inputs,
    cv_review,
    key_terms,
    parse_inputs,
    schema_answer,
    strategy_snapshot,
)
from durable_ops.dev_model.schema import allows_null, bounds_of, kind_of
from durable_ops.dev_model.stemmer import stem
from durable_ops.dev_model.terms import terms, tokens, with_implied, words
from durable_ops.dev_model.vocabulary import CALENDAR_WORDS, SKILLS, STOP_WORDS
from durable_ops.model import answers, tasks
from durable_ops.model.prompt_sections import TRUNCATION_MARK
from tests.support.prompts import build_messages, cv_text, job_text

JOB_TITLE = "Backend Engineer (Python)"
JOB_COMPANY = "Northwind Payments"
JOB_AD = """About us
Northwind Payments builds the payment infrastructure that thousands of online
shops rely on every day. Our platform processes millions of transactions per
month, and we are growing fast across Europe.

The role
We are looking for a Backend Engineer to join our Payments Platform team. You
will design, build and operate the Python services behind our public REST APIs,
working closely with product managers and frontend engineers. You will own
features end to end: from design and code review to deployment and monitoring
in production.

What you will do
- Design and build scalable backend services in Python (FastAPI, Django)
- Model data in PostgreSQL and write efficient SQL
- Run services in Docker containers on Kubernetes in AWS
- Improve our CI/CD pipelines and automated testing
- Take part in code reviews and mentor junior developers
- Join the on-call rotation one week in six

What we are looking for
- 5+ years of experience building backend systems in Python
- Strong knowledge of SQL and relational databases such as PostgreSQL
- Experience with Docker, Kubernetes and AWS
- Familiarity with Terraform and infrastructure as code
- A habit of test-driven development and clean, well-tested code
- Experience with agile ways of working (Scrum or Kanban)

Nice to have: Kafka, Redis, experience in payments or fintech.

What we offer
30 days of paid holiday, a yearly learning budget, flexible working hours, and
a hybrid office in Berlin. Interviews take place Monday to Thursday; we aim to
reply within two weeks.
"""

MATCHING_CV = """Alex Rivera
alex.rivera@example.com · +49 151 2345 6789

Summary
Backend engineer with eight years of experience designing and running Python
services for e-commerce and payments companies.

Experience
Senior Backend Engineer, Shopwise GmbH (2019 - present)
- Designed and built a checkout service in Python (FastAPI) handling 2,000
  requests per second
- Designed the PostgreSQL data model for orders and refunds; tuned SQL queries,
  cutting p95 latency by 60%
- Moved 40 services into Docker containers on Kubernetes (AWS EKS), managed
  with Terraform
- Built CI/CD pipelines in GitHub Actions; raised automated test coverage to 90%
- Led code reviews and mentored four junior developers
- Worked in Scrum, two-week sprints; practised TDD

Backend Developer, PayLane (2016 - 2019)
- Developed REST APIs in Django for a payment gateway
- Integrated Kafka event streams for transaction monitoring
- Took part in the on-call rotation and incident reviews

Education
BSc Computer Science, 2016

Skills
Python, SQL, PostgreSQL, Docker, Kubernetes, AWS, Terraform, Kafka, Redis,
FastAPI, Django, CI/CD, TDD, Scrum
"""

PASTRY_CHEF_CV = """Marie Dubois
marie.dubois@example.com

Summary
Pastry chef with ten years in hotel and restaurant kitchens.

Experience
Head Pastry Chef, Hotel Beaulieu (2018 - present)
- Created a seasonal dessert menu of 14 plated desserts every three months
- Ran a team of five pastry cooks across breakfast, lunch and dinner services
- Cut ingredient waste by 25% through better stock rotation

Pastry Cook, Le Petit Four (2013 - 2018)
- Baked viennoiserie, tarts and entremets daily from 4 am
- Prepared wedding cakes for weekend events

Education
CAP Pâtissier, 2013

Skills
Laminated doughs, chocolate tempering, sugar work, menu costing, food hygiene
"""

SNAPSHOT = tasks.STRATEGY_SNAPSHOT.answer
REVIEW = tasks.CV_REVIEW.answer
JOB = Inputs(job_title=JOB_TITLE, job_company=JOB_COMPANY, job_text=JOB_AD)
DROPPED = STOP_WORDS | CALENDAR_WORDS


def with_cv(cv_text: str | None) -> Inputs:
    return Inputs(job_title=JOB_TITLE, job_company=JOB_COMPANY, job_text=JOB_AD, cv_text=cv_text)


def quoted(items: list[str]) -> list[str]:
    """The terms an answer quotes ('python'), in order."""
    return [term for item in items for term in re.findall(r"'([^']+)'", item)]


def nullable(schema: Any, field: str) -> dict[str, Any]:
    """``schema`` with ``field`` allowed to be null, as the page would render "Not scored"."""
    changed: dict[str, Any] = copy.deepcopy(dict(schema))
    spec = changed["properties"][field]
    if "anyOf" not in spec:
        title = spec.pop("title", field)
        changed["properties"][field] = {"anyOf": [spec, {"type": "null"}], "title": title}
    return changed


# --- the stemmer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "forms",
    [
        ("design", "designed", "Designed", "designing", "designs", "designer"),
        ("deploy", "deployed", "deploying", "deployment", "deployments"),
        ("develop", "developed", "developer", "developers", "development"),
        ("technology", "technologies"),
        ("scalable", "scalability", "scale", "scaling"),
        ("api", "apis", "APIs"),
        ("service", "services"),
        ("optimise", "optimised", "optimize", "optimization", "optimisation"),
        ("automate", "automated", "automation"),
        ("ship", "shipped", "shipping"),
        ("program", "programming", "programmer"),
        ("build", "built", "building", "builds"),
        ("lead", "led", "leading"),
        ("database", "databases"),
        ("process", "processes", "processing"),
    ],
)
def test_the_forms_of_a_word_share_a_stem(forms: tuple[str, ...]) -> None:
    assert len({stem(form.lower()) for form in forms}) == 1, {f: stem(f.lower()) for f in forms}


@pytest.mark.parametrize(
    "word",
    ["string", "spring", "analysis", "status", "class", "redis", "install", "c++", "node.js"],
)
def test_words_that_only_look_inflected_are_kept(word: str) -> None:
    stemmed = stem(word)
    assert stemmed in (word, word.rstrip("e"))
    assert len(stemmed) >= 3


def test_different_words_keep_different_stems() -> None:
    assert stem("design") != stem("designate")
    assert stem("test") != stem("testament")
    assert stem("user") == "user"  # "-er" would cut below three letters


# --- tokens and terms ----------------------------------------------------------------


def test_tokens_keep_technical_spellings_and_split_other_compounds() -> None:
    assert [token.lower for token in tokens("C++/Python, Node.js/React, CI/CD, end-to-end")] == [
        "c++",
        "python",
        "node.js",
        "react",
        "ci/cd",
        "end",
        "to",
        "end",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("e\u0301quipe", ["équipe"]),  # an accent typed as a combining mark
        ("مُهَنْدِس برمجيات", ["مُهَنْدِس", "برمجيات"]),  # Arabic with its vowel signs
        ("अनुभव पायथन", ["अनुभव", "पायथन"]),  # Hindi's vowel signs are marks
        ("データベースの設計経験が5年あります", ["データベース", "設計経験"]),
    ],
)
def test_words_of_any_script_are_whole(text: str, expected: list[str]) -> None:
    assert words(text) == expected


def test_multi_word_skills_are_one_term_in_any_form() -> None:
    found = terms(
        "Machine learning; test-driven development; unit tests and unit testing; "
        "Amazon Web Services; continuous integration; Ruby on Rails"
    )
    assert [term.key for term in found if term.skill] == [
        "Machine learning",
        "TDD",
        "Unit testing",
        "Unit testing",
        "AWS",
        "CI/CD",
        "Ruby on Rails",
    ]
    assert all(term.display == term.display.lower() for term in found)


def test_everyday_words_are_not_skills_unless_written_as_one() -> None:
    everyday = "We go live, then go home; the rest of it; 250 ml of cream; we reacted."
    assert [term.key for term in terms(everyday) if term.skill] == []
    skills = [
        term.key for term in terms("Services in Go behind a REST API, ML models") if term.skill
    ]
    assert skills == ["Go", "REST", "Machine learning"]


def test_a_specific_skill_shows_the_broader_one() -> None:
    assert {"Python", "Django"} <= with_implied(["Django"])
    assert {"Next.js", "React", "JavaScript"} <= with_implied(["Next.js"])
    assert with_implied(["design"]) == {"design"}


def test_stop_and_calendar_words_are_never_terms() -> None:
    text = (
        "We need you to work 5 days a week, 3 weeks in January and the months of "
        "Monday-to-Friday rota; years of experience are required in 2024 with our team."
    )
    assert words(text) == ["rota"]


def test_the_vocabulary_names_each_spelling_once() -> None:
    names = [skill.name for skill in SKILLS]
    assert len(names) == len(set(names))
    implied = {name for skill in SKILLS for name in skill.implies}
    assert implied <= set(names)  # every implied skill is itself in the vocabulary
    spellings: dict[tuple[str, ...], str] = {}
    for skill in SKILLS:
        own = [] if skill.name in skill.exact else [skill.name]
        for spelling in {*(s.lower() for s in own), *(a.lower() for a in skill.aliases)}:
            key = tuple(token.stem for token in tokens(spelling))
            assert spellings.setdefault(key, skill.name) == skill.name, spelling


# --- inputs the worker cut ---------------------------------------------------------------


def test_the_mark_of_a_cut_input_is_no_word_of_it() -> None:
    """A 200,000-character CV against a 20,000-character posting: both cut, each ending
    with the worker's mark, which came back as a key term ("The CV mentions 'truncated',
    a key term of the posting."), and so did the piece of a word the cut left ("eng")."""
    long_ad = "We need a Python engineer who knows SQL and Docker. " * 400
    long_cv = "Python engineer, five years of SQL and Docker. " * 4_300
    title = "Backend Engineer " * 20  # past the title's budget too
    messages = build_messages(
        tasks.STRATEGY_SNAPSHOT.name, job_text(title, "Acme", long_ad), cv_text(long_cv)
    )
    user = messages[-1]["content"]
    assert user.count(TRUNCATION_MARK) == 3  # the title, the description and the CV
    inputs = parse_inputs(user, unsectioned="job")
    for text in (inputs.job_title, inputs.job_text, inputs.cv_text):
        assert text
        assert TRUNCATION_MARK not in text
    assert set(terms(inputs.job_text or "")) == set(terms(long_ad))  # no piece of a word
    assert {"truncated", "eng"}.isdisjoint(display for display, _ in key_terms(inputs).values())
    for answer in (strategy_snapshot(inputs), cv_review(inputs)):
        said = json.dumps(answer).lower()
        assert "truncated" not in said, answer
        assert "'eng'" not in said, answer


def test_a_text_that_was_not_cut_is_read_whole() -> None:
    user = "\n".join(
        ["### JOB POSTING", "Title: Engineer", "Description:", "Ends [truncated", "### END"]
    )
    assert parse_inputs(user, unsectioned="job").job_text == "Ends [truncated"


# --- the fit score ---------------------------------------------------------------------


def test_a_strong_match_scores_at_least_70() -> None:
    answer = answers.validate(SNAPSHOT, strategy_snapshot(with_cv(MATCHING_CV)))
    assert answer["fit_score"] >= 70, answer
    assert "Apply soon" in " ".join(answer["next_steps"])
    assert quoted(answer["strengths"])[0] == "python"  # the title's skill leads
    matched = Coverage.of(key_terms(JOB), MATCHING_CV).matched
    for term in ("python", "sql", "docker", "kubernetes", "aws", "terraform", "design", "backend"):
        assert term in matched


def test_an_unrelated_cv_scores_at_most_30() -> None:
    answer = answers.validate(SNAPSHOT, strategy_snapshot(with_cv(PASTRY_CHEF_CV)))
    assert answer["fit_score"] <= 30, answer
    assert "python" in quoted(answer["gaps"])


@pytest.mark.parametrize("cv_text", [MATCHING_CV, PASTRY_CHEF_CV])
def test_no_stop_or_calendar_word_is_a_gap(cv_text: str) -> None:
    answer = strategy_snapshot(with_cv(cv_text))
    listed = quoted(answer["gaps"] + answer["strengths"] + answer["next_steps"])
    assert listed
    for term in listed:
        assert not set(term.split()) & DROPPED, term
        assert stem(term) not in {stem(word) for word in DROPPED}, term
    review = cv_review(with_cv(cv_text))
    assert not set(review["keywords_missing"]) & DROPPED


def test_the_key_terms_skip_calendar_and_boilerplate_and_lead_with_skills() -> None:
    key = key_terms(JOB)
    displays = [display for display, _ in key.values()]
    for word in ("days", "week", "weeks", "monday", "thursday", "month", "yearly", "years"):
        assert word not in displays
    for word in ("experience", "team", "holiday", "hybrid", "northwind"):
        assert word not in displays
    skills = {"python", "sql", "postgresql", "docker", "kubernetes", "aws", "terraform"}
    assert skills <= set(displays)
    assert "python" in displays[:3]  # in the title and named throughout


def test_designed_in_the_cv_is_evidence_of_design() -> None:
    key = {stem("design"): ("design", 2), "Python": ("python", 1)}
    coverage = Coverage.of(key, "Designed the payment flow.")
    assert coverage.matched == ["design"]
    assert coverage.missing == ["python"]
    answer = strategy_snapshot(
        Inputs(
            job_title="Product lead",
            job_text="You will design the checkout and its APIs.",
            cv_text="Designed a checkout. Built an API.",
        )
    )
    assert quoted(answer["gaps"]) == ["product", "lead"]  # the title's words, not "design"
    assert {"design", "checkout", "apis"} <= set(quoted(answer["strengths"]))


def test_skills_outweigh_other_words() -> None:
    key = {"Python": ("python", 1), stem("payment"): ("payment", 1)}
    assert Coverage.of(key, "Python developer").score == 75
    assert Coverage.of(key, "payment clerk").score == 25


def test_a_framework_in_the_cv_is_evidence_of_its_language() -> None:
    key = {"Python": ("python", 1)}
    assert Coverage.of(key, "Built services with Django.").matched == ["python"]


# --- nothing to score ------------------------------------------------------------------


NOTHING_TO_SCORE = [
    pytest.param(with_cv(None), id="no CV"),
    pytest.param(with_cv("2019 - 2024. Monday, Tuesday."), id="CV without words that count"),
    pytest.param(
        Inputs(job_title="", job_text="We are hiring! Apply in March.", cv_text=MATCHING_CV),
        id="posting without words that count",
    ),
]


@pytest.mark.parametrize("inputs", NOTHING_TO_SCORE)
def test_nothing_to_score_is_null_where_the_schema_allows_it(inputs: Inputs) -> None:
    answer = strategy_snapshot(inputs, None)
    assert answer["fit_score"] is None
    answers.validate(nullable(SNAPSHOT, "fit_score"), answer)
    assert answer["summary"].startswith(f"{HEURISTIC_NOTE} Not scored: ")


@pytest.mark.parametrize("inputs", NOTHING_TO_SCORE)
def test_nothing_to_score_never_reads_as_a_score_of_0(inputs: Inputs) -> None:
    # The product's schema wants an integer: the floor goes there, and nothing in
    # the words claims it was computed.
    answer = answers.validate(SNAPSHOT, strategy_snapshot(inputs))
    text = json.dumps(answer)
    assert "Not scored" in answer["summary"]
    assert "0/100" not in text
    assert "fit 0" not in text.lower()


def test_a_cv_without_words_is_not_reviewed() -> None:
    answer = cv_review(Inputs(cv_text="  2021 \n - \n"), None)
    assert answer["overall_score"] is None
    answers.validate(nullable(REVIEW, "overall_score"), answer)
    assert "Not scored" in answer["summary"]
    scored = answers.validate(REVIEW, cv_review(Inputs(cv_text=MATCHING_CV)))
    assert scored["overall_score"] > 0


def test_any_other_task_is_null_without_both_texts() -> None:
    schema = nullable(
        tasks.answer({"match": tasks.score("Match"), "note": tasks.text(200)}), "match"
    )
    alone = schema_answer(schema, Inputs(job_text=JOB_AD))
    assert alone["match"] is None
    assert alone["note"].startswith(f"{HEURISTIC_NOTE} Not scored")
    assert schema_answer(schema, with_cv(MATCHING_CV))["match"] >= 70
    strict = tasks.answer({"match": tasks.score("Match")})
    assert schema_answer(strict, Inputs(job_text=JOB_AD)) == {"match": 0}


def test_every_summary_says_it_is_a_heuristic() -> None:
    for answer in (
        strategy_snapshot(with_cv(MATCHING_CV)),
        strategy_snapshot(with_cv(None)),
        cv_review(with_cv(PASTRY_CHEF_CV)),
    ):
        assert answer["summary"].startswith(HEURISTIC_NOTE)
        assert "AI assessment" in answer["summary"]


# --- the answer schema's null ------------------------------------------------------------


def test_the_validator_accepts_null_only_where_the_schema_allows_it() -> None:
    schema = nullable(SNAPSHOT, "fit_score")
    answer = strategy_snapshot(with_cv(None))
    assert answers.validate(schema, {**answer, "fit_score": None})["fit_score"] is None
    assert answers.validate(schema, {**answer, "fit_score": 42})["fit_score"] == 42
    with pytest.raises(answers.AnswerMismatch, match=r"answer\.fit_score: expected an integer"):
        answers.validate(schema, {**answer, "fit_score": "none"})
    with pytest.raises(answers.AnswerMismatch, match=r"answer\.fit_score: outside"):
        answers.validate(schema, {**answer, "fit_score": 101})
    strict = copy.deepcopy(schema)
    strict["properties"]["fit_score"] = schema["properties"]["fit_score"]["anyOf"][0]
    with pytest.raises(answers.AnswerMismatch, match=r"answer\.fit_score: expected an integer"):
        answers.validate(strict, {**answer, "fit_score": None})
    integer, string, null = {"type": "integer"}, {"type": "string"}, {"type": "null"}
    for unsupported in ([integer, string], [null], [integer, null, string], [null, integer]):
        odd = copy.deepcopy(schema)
        odd["properties"]["fit_score"]["anyOf"] = unsupported
        with pytest.raises(ValueError, match="not supported"):
            answers.validate(odd, {**answer, "fit_score": 1})
    odd["properties"]["fit_score"] = {"type": ["integer", "null"]}  # a type list, not anyOf
    with pytest.raises(ValueError, match="not supported"):
        answers.validate(odd, {**answer, "fit_score": 1})


def test_reading_a_property_type() -> None:
    nullable_score = {"anyOf": [{"type": "integer", "maximum": 9}, {"type": "null"}]}
    assert kind_of({"type": "integer"}) == "integer"
    assert kind_of(nullable_score) == "integer"
    assert kind_of({"anyOf": [{"type": "integer"}, {"type": "string"}]}) is None
    assert allows_null(nullable_score)
    assert not allows_null({"type": "integer"})
    assert bounds_of(nullable_score) == {"type": "integer", "maximum": 9}


def test_a_count_of_one_reads_in_the_singular() -> None:
    """A CV with one line of figures read "1 lines with figures"."""
    review = cv_review(Inputs(cv_text="Experience\nCut costs by 20% in 2023"))
    text = json.dumps(review)
    assert "1 line with figures" in review["summary"]
    assert "1 recognised section," in review["summary"]
    assert not re.search(r"\b1 (lines|words|recognised sections|key terms|named skills)\b", text)
    assert "0 lines with figures" in cv_review(Inputs(cv_text="Experience\nPython"))["summary"]


@pytest.mark.parametrize(
    ("title_end", "shown_end"),
    [
        ("\U0001f469\u200d\U0001f4bb", "x"),  # a woman technologist: not a woman
        ("\U0001f44d\U0001f3fd", "x"),  # a thumb with its skin tone: not a bare thumb
        ("e\u0301", "x"),  # e and its accent: not a bare e
        ("\U0001f1eb\U0001f1f7", "x"),  # a flag: not its first letter
        ("\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea", "\U0001f1eb\U0001f1f7"),  # one flag of two
    ],
)
def test_a_long_title_is_cut_between_what_shows_as_characters(
    title_end: str, shown_end: str
) -> None:
    """The summary quotes at most 120 characters of the title; one cut inside what shows as
    a single character showed a part of it (a woman for a woman technologist)."""
    title = "x" * (121 - len(title_end)) + title_end + " and more"  # 120 ends inside it
    answer = strategy_snapshot(Inputs(job_title=title, job_text=JOB_AD))
    quoted = re.search(r"'([^']*)'", answer["summary"])
    assert quoted is not None, answer["summary"]
    assert title.startswith(quoted[1])
    assert quoted[1].endswith(shown_end)
    assert len(quoted[1]) <= 120
