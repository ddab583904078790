// Content results (§D17.1): the `image`, `text` and `resourceLink`
// helpers and the `{ content, result? }` return form of a handler (§T5.5). Pure, so the inert
// entries export the same helpers without any session code.

import { encodeBase64 } from "./base64.js";

/** A `text` content block. */
export interface TextBlock {
  type: "text";
  text: string;
}

/** The image formats a content block may carry. */
export type ImageMimeType = "image/png" | "image/jpeg" | "image/webp";

/** An `image` content block: standard padded base64 of the file's bytes. */
export interface ImageBlock {
  type: "image";
  data: string;
  mimeType: ImageMimeType;
}

/** A `resource_link` content block. */
export interface ResourceLinkBlock {
  type: "resource_link";
  uri: string;
  name: string;
  mimeType?: string;
  description?: string;
}

export type ContentBlock = TextBlock | ImageBlock | ResourceLinkBlock;

/**
 * What a handler returns to answer with content: 1..=64 blocks made by `image`, `text` or
 * `resourceLink`, and optionally a JSON `result` (checked against the tool's output schema
 * like any result). Build it with `toolContent` or as a literal `{ content: [...], result }`.
 */
export interface ToolContent<O = unknown> {
  content: ContentBlock[];
  result?: O;
}

/** Most blocks in one result. */
export const MAX_CONTENT_BLOCKS = 64;
/** Largest `text` block, in UTF-8 bytes. */
export const MAX_TEXT_BLOCK_BYTES = 1_048_576;

/** Marks blocks made by the helpers, so a plain JSON result with a `content` key stays JSON. */
const BLOCK = Symbol("appduct.contentBlock");

function mark<T extends ContentBlock>(block: T): T {
  Object.defineProperty(block, BLOCK, { value: true, enumerable: false });
  return block;
}

function startsWith(bytes: Uint8Array, prefix: readonly number[], at = 0): boolean {
  return bytes.length >= at + prefix.length && prefix.every((b, i) => bytes[at + i] === b);
}

/** Whether `bytes` start with the signature of `mimeType` (the daemon checks the same). */
export function hasImageSignature(bytes: Uint8Array, mimeType: string): boolean {
  switch (mimeType) {
    case "image/png":
      return startsWith(bytes, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    case "image/jpeg":
      return startsWith(bytes, [0xff, 0xd8, 0xff]);
    case "image/webp":
      // "RIFF" size "WEBP"
      return startsWith(bytes, [0x52, 0x49, 0x46, 0x46]) && startsWith(bytes, [0x57, 0x45, 0x42, 0x50], 8);
    default:
      return false;
  }
}

/**
 * An image block from the file's bytes. Throws a `TypeError` for another mime type or bytes
 * that do not start with that format's signature (the daemon would fail the call).
 */
export function image(bytes: Uint8Array, mimeType: ImageMimeType): ImageBlock {
  if (!(bytes instanceof Uint8Array)) throw new TypeError("image(): bytes must be a Uint8Array");
  if (mimeType !== "image/png" && mimeType !== "image/jpeg" && mimeType !== "image/webp") {
    throw new TypeError(`image(): unsupported mimeType ${JSON.stringify(mimeType)}; use image/png, image/jpeg or image/webp`);
  }
  if (!hasImageSignature(bytes, mimeType)) {
    throw new TypeError(`image(): the bytes are not a ${mimeType} file (wrong signature)`);
  }
  return mark({ type: "image", data: encodeBase64(bytes), mimeType });
}

/** A text block. */
export function text(s: string): TextBlock {
  if (typeof s !== "string") throw new TypeError("text(): expects a string");
  return mark({ type: "text", text: s });
}

/** A resource link block: `uri` with a scheme, and a `name`. */
export function resourceLink(link: { uri: string; name: string; mimeType?: string; description?: string }): ResourceLinkBlock {
  const { uri, name, mimeType, description } = link;
  if (typeof uri !== "string" || !/^[A-Za-z][A-Za-z0-9+.-]*:/.test(uri) || uri.length > 4096) {
    throw new TypeError("resourceLink(): uri must be 1..=4096 characters with a scheme");
  }
  if (typeof name !== "string" || name.length < 1 || name.length > 256) {
    throw new TypeError("resourceLink(): name must be 1..=256 characters");
  }
  const block: ResourceLinkBlock = { type: "resource_link", uri, name };
  if (mimeType !== undefined) block.mimeType = mimeType;
  if (description !== undefined) block.description = description;
  return mark(block);
}

/** `{ content, result? }`, with `result` left out when `undefined`. */
export function toolContent<O>(content: ContentBlock[], result?: O): ToolContent<O> {
  return result === undefined ? { content } : { content, result };
}

/**
 * Whether a handler's return value is the content form: an object whose keys are `content`
 * (and maybe `result`), `content` being 1..=64 blocks made by the helpers. Anything else is a
 * plain JSON result, as before.
 */
export function isToolContent(value: unknown): value is ToolContent {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  if (!keys.includes("content") || keys.some((k) => k !== "content" && k !== "result")) return false;
  const content = (value as { content: unknown }).content;
  return (
    Array.isArray(content) &&
    content.length >= 1 &&
    content.every((b) => typeof b === "object" && b !== null && (b as Record<symbol, unknown>)[BLOCK] === true)
  );
}
