// What an operation is about, by name: operations and notifications keep only an
// opaque reference ({type, id}); the page asks the owner's own workspace API for
// the job's title and company or the CV's filename, once per subject.

import { api } from "./api.js";
import { TASKS } from "./tasks.js";

const LIST_SIZE = 100;

// How each subject kind is read and named; its API collection comes from the task
// registry's paths (e.g. "/api/jobs/{id}/strategy-snapshot" -> "/api/jobs").
const NAMERS = {
  job: (job) => (job.company ? `${job.title} at ${job.company}` : job.title),
  attachment: (cv) => cv.filename,
};

function kindOf(type) {
  for (const entry of TASKS) {
    for (const kind of [entry.subject, entry.context]) {
      if (kind?.name === type) return kind;
    }
  }
  return null;
}

function collectionOf(type) {
  const entry = TASKS.find((candidate) => candidate.subject.name === type);
  return entry ? entry.path.slice(0, entry.path.indexOf("/{id}")) : null;
}

const names = new Map(); // "type:id" -> Promise<string | null>
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

// The subject's name, or null when it is not the caller's (any more) or cannot be read.
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
        if (error.status !== 404) names.delete(cacheKey); // try again next time
        return null;
      });
    names.set(cacheKey, read);
  }
  return names.get(cacheKey);
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
