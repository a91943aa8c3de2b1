"""The development model's word lists. Pure data, read by ``terms``.

- ``SKILLS``: tools, languages and methods a posting asks for and a CV shows.
  Each has the name answers quote (lower-cased), the other ways it is written
  (several words each at most ``terms.PHRASE_WORDS_MAX``), the spellings that
  count only with that capitalisation (``exact``: names that are everyday words
  too, like "Go" or "REST"; a name listed there is not recognised in lower
  case), and the broader skills a CV evidences by naming it (Django: Python).
- ``STOP_WORDS``: function words and the boilerplate of job ads and CVs; no
  evidence of them means nothing.
- ``CALENDAR_WORDS``: days, weeks, months, weekdays, month names, years: dates
  and durations, never a requirement.

Words are lower case and compared by their stems, so "responsibilities" in a
list also drops "responsibility".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Skill:
    name: str
    aliases: tuple[str, ...] = ()
    exact: tuple[str, ...] = ()  # case-sensitive spellings
    implies: tuple[str, ...] = ()  # names of broader skills


SKILLS: tuple[Skill, ...] = (
    # languages
    Skill("Python", ("python3", "cpython")),
    Skill("SQL", ("pl/sql", "t-sql", "tsql")),
    Skill("Java", ("java ee", "jvm")),
    Skill("JavaScript", ("js", "ecmascript", "es6")),
    Skill("TypeScript", ("ts",), implies=("JavaScript",)),
    Skill("Go", ("golang",), exact=("Go",)),
    Skill("Rust"),
    Skill("C++", ("cpp",)),
    Skill("C#", ("csharp", "c sharp")),
    Skill("Kotlin"),
    Skill("Scala"),
    Skill("Ruby"),
    Skill("PHP"),
    Skill("Swift", exact=("Swift",)),
    Skill("Elixir"),
    Skill("Haskell"),
    Skill("Bash", ("shell scripting", "shell scripts")),
    Skill("HTML", ("html5",)),
    Skill("CSS", ("css3", "sass", "scss")),
    # frameworks and libraries
    Skill("Django", implies=("Python",)),
    Skill("Flask", implies=("Python",)),
    Skill("FastAPI", implies=("Python",)),
    Skill("SQLAlchemy", implies=("Python", "SQL")),
    Skill("asyncio", implies=("Python",)),
    Skill("pandas", implies=("Python",)),
    Skill("NumPy", implies=("Python",)),
    Skill("PyTorch", implies=("Python", "Machine learning")),
    Skill("TensorFlow", ("keras",), implies=("Machine learning",)),
    Skill("scikit-learn", ("sklearn",), implies=("Python", "Machine learning")),
    Skill("React", ("react.js", "reactjs"), implies=("JavaScript",)),
    Skill("Next.js", ("nextjs",), implies=("React", "JavaScript")),
    Skill("Angular", ("angularjs",), implies=("JavaScript",)),
    Skill("Vue", ("vue.js", "vuejs"), implies=("JavaScript",)),
    Skill("Node.js", ("nodejs",), implies=("JavaScript",)),
    Skill("Spring Boot", ("spring framework",), implies=("Java",)),
    Skill("Ruby on Rails", ("ror",), implies=("Ruby",)),
    Skill(".NET", ("dotnet", "asp.net"), exact=("NET",), implies=("C#",)),
    # data
    Skill("PostgreSQL", ("postgres", "psql"), implies=("SQL",)),
    Skill("MySQL", (), implies=("SQL",)),
    Skill("MariaDB", (), implies=("MySQL", "SQL")),  # quoted by its own name, a MySQL too
    Skill("SQLite", implies=("SQL",)),
    Skill("MongoDB", ("mongo",), implies=("NoSQL",)),
    Skill("Redis"),
    Skill("Elasticsearch", ("elastic search", "opensearch")),
    Skill("DynamoDB", implies=("AWS", "NoSQL")),
    Skill("Cassandra", implies=("NoSQL",)),
    Skill("NoSQL"),
    Skill("BigQuery", implies=("GCP", "SQL")),
    Skill("Snowflake", implies=("SQL",)),
    Skill("Spark", ("apache spark", "pyspark")),
    Skill("Kafka", ("apache kafka",)),
    Skill("RabbitMQ"),
    Skill("Airflow", ("apache airflow",)),
    Skill("dbt"),
    Skill("Hadoop"),
    # cloud and infrastructure
    Skill("AWS", ("amazon web services", "ec2", "s3", "aws lambda", "eks", "ecs")),
    Skill("GCP", ("google cloud", "google cloud platform", "gke")),
    Skill("Azure", ("microsoft azure",)),
    Skill("Kubernetes", ("k8s", "kubectl")),
    Skill("Docker", ("containerisation", "containerization", "dockerfile")),
    Skill("Helm", ("helm charts",), exact=("Helm",), implies=("Kubernetes",)),
    Skill("Terraform", implies=("Infrastructure as code",)),
    Skill("Infrastructure as code", ("iac", "pulumi", "cloudformation")),
    Skill("Ansible"),
    Skill("Linux", ("unix", "ubuntu", "debian")),
    Skill("Git", ("github", "gitlab")),
    Skill(
        "CI/CD", ("ci cd", "continuous integration", "continuous delivery", "continuous deployment")
    ),
    Skill("GitHub Actions", implies=("CI/CD", "Git")),
    Skill("GitLab CI", implies=("CI/CD", "Git")),
    Skill("Jenkins", implies=("CI/CD",)),
    Skill("Prometheus", implies=("Observability",)),
    Skill("Grafana", implies=("Observability",)),
    Skill("Datadog", implies=("Observability",)),
    Skill("OpenTelemetry", implies=("Observability",)),
    Skill("Observability"),
    Skill("Serverless"),
    # interfaces and architecture
    Skill("REST", ("restful", "rest api", "rest apis", "restful api"), exact=("REST",)),
    Skill("GraphQL"),
    Skill("gRPC", ("protobuf", "protocol buffers")),
    Skill("Microservices", ("microservice", "micro services", "service oriented architecture")),
    Skill("Distributed systems", ("distributed system", "distributed computing")),
    Skill("Event-driven architecture", ("event driven", "event sourcing")),
    Skill("Domain-driven design", ("domain driven design", "ddd")),
    Skill("OAuth", ("oauth2", "openid connect", "oidc")),
    # methods
    Skill("Agile", ("agile methodologies",)),
    Skill("Scrum", ("sprint planning",), implies=("Agile",)),
    Skill("Kanban", implies=("Agile",)),
    Skill("TDD", ("test driven development", "test driven", "test first")),
    Skill("BDD", ("behaviour driven development", "behavior driven development")),
    Skill("Unit testing", ("unit tests", "unit test", "pytest", "junit"), implies=("Testing",)),
    Skill("Testing", ("automated testing", "test automation", "integration tests")),
    Skill("Code review", ("code reviews", "pull request reviews")),
    Skill("Pair programming", ("pair programmed",)),
    Skill("DevOps"),
    Skill("SRE", ("site reliability engineering", "site reliability")),
    Skill("Machine learning", exact=("ML",)),
    Skill("Deep learning", ("neural networks",), implies=("Machine learning",)),
    Skill("NLP", ("natural language processing",), implies=("Machine learning",)),
    Skill("Computer vision", implies=("Machine learning",)),
    Skill("Data engineering", ("data pipelines", "etl", "elt")),
    Skill("Object-oriented programming", ("object oriented", "oop")),
    Skill("Functional programming"),
)

_STOP_WORDS_TEXT = """
    a about above across after again against all also am an and any are as at be
    because been before being below between both but by can could did do does doing
    down during each either etc few for from further had has have having he her here
    hers him his how i if in into is it its itself just like may me might more most
    must my no nor not now of off on once only or other our ours out over own per
    same shall she should so some such than that the their theirs them then there
    these they this those through to too under until up upon us very via was we were
    what when where which while who whom why will with within without would you your
    yours ll re ve don doesn isn aren go get got make made take let lot lots well
    many much every
    one two three four five six seven eight nine ten first second third e g ie eg
    able ability abilities amp based best candidate candidates closely company
    companies description degree environment excellent experience experienced field
    good great help ideal including include includes job jobs join knowledge looking
    new nice offer plus preferred related required require requirement requirements
    responsibility responsibilities responsible role roles skill skills strong team
    teams title use uses used using want wish work working need needs seeking
    hiring hire
    senior junior mid level opportunity opportunities position positions apply
    application applications applicant applicants please send cv resume curriculum
    vitae cover letter contact email phone address salary compensation competitive
    benefit benefits bonus equity pension perks holiday holidays vacation
    leave remote hybrid office offices location located onsite site relocation visa
    full part time hours flexible flexibility paid per hour culture passionate
    passion love exciting excited fast paced dynamic growing world
    equal employer diversity diverse inclusive inclusion gender race religion
    disability orientation veteran status background regardless encourage
    welcome someone person people individual ideally proven track record hands
    understanding familiarity familiar proficiency proficient expertise expert
    desirable essential key ensure ensuring around whether yet however really
    com www http https inc ltd gmbh llc co
"""

_CALENDAR_WORDS_TEXT = """
    day days daily week weeks weekly weekend weekends weekday weekdays fortnight
    month months monthly year years yearly annual annually quarter quarters quarterly
    hour hours minute minutes today tomorrow yesterday date dates present current
    since ago morning afternoon evening night season
    monday tuesday wednesday thursday friday saturday sunday
    mon tue tues wed thu thur thurs fri sat sun
    january february march april june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    q1 q2 q3 q4 h1 h2 yr yrs
"""

# Text rather than list literals: hundreds of words read better wrapped than one a line.
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
CALENDAR_WORDS = frozenset(_CALENDAR_WORDS_TEXT.split())
