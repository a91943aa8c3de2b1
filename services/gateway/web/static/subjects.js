// What an operation is about, by name: operations and notifications keep only an
// opaque reference ({type, id}); the page asks the owner's own workspace API for
// the job's title and company or the CV's filename, once per subject. A subject the
// workspace no longer has (404) was deleted: its finished operations and notifications
// stay (ADR 60), and name it "a deleted job", "a deleted CV".

import { api } from "./api.js";
import { h } from "./dom.js";
import { TASKS } from "./tasks.js";

const LIST_SIZE = 100;

// A name made of two pieces of user text ("<title> at <company>") -> those pieces.
const pieces = new Map();

// How each subject kind is read and named; its API collection comes from the task
// registry's paths (e.g. "/api/jobs/{id}/strategy-snapshot" -> "/api/jobs").
const NAMERS = {
  job: (job) => {
    if (!job.company) return job.title;
    const name = `${job.title} at ${job.company}`;
    pieces.set(name, [job.title, job.company]);
    return name;
  },
  attachment: (cv) => cv.filename,
};

// A subject's name shown as a `tag` element: user text, so each piece of it sets its own
// direction (dir="auto"). A job's title and company are two pieces: as one, an Arabic title
// made the whole line right to left, and "مهندس at Acme" read "at Acme مهندس".
export function shownName(tag, attributes, name) {
  const known = pieces.get(name);
  if (!known) return h(tag, { ...attributes, dir: "auto" }, name);
  const [title, company] = known;
  return h(tag, attributes, h("span", { dir: "auto" }, title), " at ", h("span", { dir: "auto" }, company));
}

function kindOf(type) {
  for (const entry of TASKS) {
    for (const kind of [entry.subject, entry.context]) {
      if (kind?.name === type) return kind;
    }
  }
  return null;
}

// The API collection of a subject kind: "/api/jobs", "/api/attachments".
export function collectionOf(type) {
  const entry = TASKS.find((candidate) => candidate.subject.name === type);
  return entry ? entry.path.slice(0, entry.path.indexOf("/{id}")) : null;
}

const names = new Map(); // "type:id" -> Promise<string | null>
const deleted = new Set(); // "type:id" of the subjects found gone, or deleted from this page
const listed = new Map(); // type -> Promise<void>: the first page of the collection, once

function key(type, id) {
  return `${type}:${id}`;
}

// The first page of a collection fills the cache in one request, not one per row.
function listOnce(type) {
  if (!listed.has(type)) {
    const collection = collectionOf(type);
    const loading = api(`${collection}?page_size=${LIST_SIZE}`)
      .then((page) => {
        for (const row of page.items) {
          if (!names.has(key(type, row.id))) names.set(key(type, row.id), Promise.resolve(NAMERS[type](row)));
        }
      })
      .catch(() => {});
    listed.set(type, loading);
  }
  return listed.get(type);
}

// How a page names a subject that is gone: "a deleted job", "a deleted CV".
function deletedName(type) {
  return `a deleted ${kindLabel(type)}`;
}

// The subject's name; "a deleted job" when the workspace answers 404 (an operation's
// subject was its owner's when it was admitted, so a 404 means it has been deleted since);
// null when it cannot be read now (asked again next time) or is of no kind the page names.
export async function subjectName(subject) {
  const type = subject?.type;
  const id = subject?.id;
  if (!type || !id || !NAMERS[type] || !collectionOf(type)) return null;
  await listOnce(type);
  const cacheKey = key(type, id);
  if (!names.has(cacheKey)) {
    const read = api(`${collectionOf(type)}/${encodeURIComponent(id)}`)
      .then((row) => NAMERS[type](row))
      .catch((error) => {
        if (error.status === 404) {
          deleted.add(cacheKey);
          return deletedName(type);
        }
        names.delete(cacheKey); // try again next time
        return null;
      });
    names.set(cacheKey, read);
  }
  return names.get(cacheKey);
}

// Whether `subject` is known to be gone: its name is then "a deleted …", and nothing of
// it (a result made from it) can be opened any more.
export function wasDeleted(subject) {
  return Boolean(subject && deleted.has(key(subject.type, subject.id)));
}

// A subject this page deleted, or found gone: named as deleted from now on.
export function forgetSubject(type, id) {
  deleted.add(key(type, id));
  names.set(key(type, id), Promise.resolve(deletedName(type)));
}

// Names for many subjects at once: Map "type:id" -> name (or null).
export async function subjectNames(subjects) {
  const unique = new Map(subjects.filter((s) => s?.type && s?.id).map((s) => [key(s.type, s.id), s]));
  const entries = await Promise.all([...unique].map(async ([cacheKey, s]) => [cacheKey, await subjectName(s)]));
  return new Map(entries);
}

export function nameFrom(map, subject) {
  return subject ? (map.get(key(subject.type, subject.id)) ?? null) : null;
}

// How a page speaks of a subject kind: "job", "CV" (from the registry), else its type.
export function kindLabel(type) {
  return kindOf(type)?.label ?? type ?? "subject";
}
