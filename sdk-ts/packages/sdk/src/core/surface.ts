// The tool-surface snapshot document (§T17, §L7.4): the same text `appduct tools snapshot
// --write` writes for a live session, built here from the descriptors a claim would send.

import type { RegistrySnapshot } from "./types.js";

/** `snapshotVersion` of the document (§L7.4). */
export const SNAPSHOT_VERSION = 1;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Orders strings by Unicode code point (UTF-16 order differs above U+FFFF), as the CLI does. */
export function compareCodePoints(a: string, b: string): number {
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done || y.done) return x.done === y.done ? 0 : x.done ? -1 : 1;
    const cx = x.value.codePointAt(0) as number;
    const cy = y.value.codePointAt(0) as number;
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

const byName = (a: { name: string }, b: { name: string }): number => compareCodePoints(a.name, b.name);

/**
 * The snapshot document of a registry, as §L7.4 defines it from a listing: per tool `name`,
 * `description`, `group` (`null` when none) and every other descriptor field the tool carries;
 * per event its descriptor. The descriptors go through JSON first, exactly as the claim frame
 * does, so the document holds what the daemon receives.
 */
export function surfaceDocument(registry: RegistrySnapshot): Record<string, Json> {
  type Entry = Record<string, Json> & { name: string };
  const wire = JSON.parse(JSON.stringify(registry)) as { tools: Entry[]; events: Entry[] };
  const tools = wire.tools.map((descriptor): Entry => ({ ...descriptor, group: descriptor.group ?? null }));
  const events = wire.events;
  return {
    snapshotVersion: SNAPSHOT_VERSION,
    tools: [...tools].sort(byName),
    events: [...events].sort(byName),
  };
}

/**
 * The canonical indented text of a JSON value (§L7.4): object keys sorted by code point at
 * every depth, 2-space indent, numbers and strings as `JSON.stringify` writes them (the
 * ECMAScript form the CLI's canonical writer reproduces), LF, one final newline.
 */
export function canonicalText(value: unknown): string {
  return `${writeCanonical(value as Json, "")}\n`;
}

function writeCanonical(value: Json, indent: string): string {
  if (value === null || typeof value !== "object") {
    return JSON.stringify(value) ?? "null";
  }
  const inner = `${indent}  `;
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    return `[\n${value.map((item) => inner + writeCanonical(item, inner)).join(",\n")}\n${indent}]`;
  }
  const keys = Object.keys(value).sort(compareCodePoints);
  if (keys.length === 0) return "{}";
  const entries = keys.map((key) => `${inner}${JSON.stringify(key)}: ${writeCanonical(value[key] as Json, inner)}`);
  return `{\n${entries.join(",\n")}\n${indent}}`;
}

/** The snapshot text of a registry: `canonicalText(surfaceDocument(registry))`. */
export function surfaceSnapshotText(registry: RegistrySnapshot): string {
  return canonicalText(surfaceDocument(registry));
}
