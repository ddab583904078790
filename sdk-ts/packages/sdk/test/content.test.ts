// Content results and parts on the app side (§T5.4): the helpers, the `{ content, result? }`
// return form, feature detection from the latest `session_ack`, and the `tool_result_part`
// frames of a body too big for one frame, on the fake transport.

import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";

import { image, resourceLink, text, toolContent } from "../src/core/content.js";
import { MAX_PART_DATA_BYTES, splitBody } from "../src/core/parts.js";
import { jsonSchema } from "../src/core/standard-schema.js";
import { MAX_FRAME_BYTES } from "../src/core/text.js";
import type { ToolDefinition } from "../src/core/types.js";
import { flush } from "./support/fake-transport.js";
import { activate, makeHarness, type Harness } from "./support/harness.js";
import { totalResult } from "./support/schemas.js";

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const ACK_CONTENT = { result_content: true, result_parts_max_bytes: 16_777_216 };

/** A fake PNG: the signature, then `size - 8` bytes that do not compress. */
function fakePng(size: number): Uint8Array {
  const bytes = new Uint8Array(size);
  bytes.set(PNG_SIGNATURE);
  let x = 12345;
  for (let i = PNG_SIGNATURE.length; i < size; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyTool = ToolDefinition<any, any>;

async function callOn(ackOverrides: Record<string, unknown>, tool: AnyTool): Promise<{ h: Harness; frames: Record<string, unknown>[]; sent: string[] }> {
  const h = makeHarness();
  h.client.registerTool(tool);
  const socket = await activate(h, ackOverrides);
  const before = socket.sent.length;
  socket.receive({ type: "tool_call", session_id: "session-1", id: "call-1", name: tool.name, args: {} });
  await flush();
  return { h, frames: socket.frames.slice(before), sent: socket.sent.slice(before) };
}

describe("helpers", () => {
  it("image() encodes standard padded base64 and checks the mime type and signature", () => {
    const png = Uint8Array.from([...PNG_SIGNATURE, 1]);
    expect(image(png, "image/png")).toEqual({ type: "image", data: Buffer.from(png).toString("base64"), mimeType: "image/png" });
    expect(image(Uint8Array.from([0xff, 0xd8, 0xff, 0xe0]), "image/jpeg").mimeType).toBe("image/jpeg");
    const webp = Uint8Array.from([..."RIFF"].map((c) => c.charCodeAt(0)).concat([0, 0, 0, 0], [..."WEBP"].map((c) => c.charCodeAt(0))));
    expect(image(webp, "image/webp").mimeType).toBe("image/webp");
    expect(() => image(png, "image/gif" as "image/png")).toThrow(/unsupported mimeType/);
    expect(() => image(png, "image/jpeg")).toThrow(/not a image\/jpeg file/);
    expect(() => image(new Uint8Array(), "image/png")).toThrow(/wrong signature/);
  });

  it("text() and resourceLink() build their blocks and refuse bad fields", () => {
    expect(text("hi")).toEqual({ type: "text", text: "hi" });
    expect(resourceLink({ uri: "https://example.test/a", name: "a", mimeType: "text/plain" })).toEqual({
      type: "resource_link",
      uri: "https://example.test/a",
      name: "a",
      mimeType: "text/plain",
    });
    expect(() => resourceLink({ uri: "no-scheme", name: "a" })).toThrow(/scheme/);
    expect(() => resourceLink({ uri: "file:///x", name: "" })).toThrow(/name/);
  });

  it("splitBody gives the part of device.md's §D17.2 example (the Rust split_body's output)", () => {
    expect(splitBody('{"result":{"items":3}}')).toEqual([
      { offset: 0, total: 22, sha256: "79d1fe6b8b61ce689f96047fe50722e4a3a6170732501a992178e9e8e84cd728", data: "eyJyZXN1bHQiOnsiaXRlbXMiOjN9fQ==" },
    ]);
  });

  it("splitBody cuts ordered parts of at most 131072 bytes naming the whole body's SHA-256", () => {
    const body = JSON.stringify({ result: "é".repeat(200_000) });
    const bytes = Buffer.from(body, "utf8");
    const parts = splitBody(body);
    expect(parts).toHaveLength(Math.ceil(bytes.length / MAX_PART_DATA_BYTES));
    const sha = createHash("sha256").update(bytes).digest("hex");
    let offset = 0;
    const chunks: Buffer[] = [];
    for (const p of parts) {
      expect(p).toMatchObject({ offset, total: bytes.length, sha256: sha });
      const chunk = Buffer.from(p.data, "base64");
      expect(chunk.length).toBeGreaterThan(0);
      expect(chunk.length).toBeLessThanOrEqual(MAX_PART_DATA_BYTES);
      chunks.push(chunk);
      offset += chunk.length;
    }
    expect(Buffer.concat(chunks).equals(bytes)).toBe(true);
  });
});

describe("content results", () => {
  const png = Uint8Array.from([...PNG_SIGNATURE, 7, 7]);

  it("content without a result: tool_result carries content and no result", async () => {
    const { frames } = await callOn(ACK_CONTENT, { name: "shot", description: "d", handler: () => toolContent([image(png, "image/png"), text("the page")]) });
    expect(frames).toEqual([
      {
        type: "tool_result",
        session_id: "session-1",
        id: "call-1",
        content: [
          { type: "image", data: Buffer.from(png).toString("base64"), mimeType: "image/png" },
          { type: "text", text: "the page" },
        ],
      },
    ]);
  });

  it("content with a result: the result is checked against the output schema and sent beside the content", async () => {
    const { frames } = await callOn(ACK_CONTENT, {
      name: "shot",
      description: "d",
      outputSchema: totalResult,
      handler: () => ({ content: [text("x")], result: { total: 3 } }),
    });
    expect(frames).toEqual([{ type: "tool_result", session_id: "session-1", id: "call-1", result: { total: 3 }, content: [{ type: "text", text: "x" }] }]);
    const bad = await callOn(ACK_CONTENT, { name: "shot", description: "d", outputSchema: totalResult, handler: () => ({ content: [text("x")], result: { total: "no" } }) });
    expect((bad.frames[0]?.error as { type: string }).type).toBe("tool_output_validation_error");
  });

  it("a plain object with a content key (not built with the helpers) stays a JSON result", async () => {
    const { frames } = await callOn(ACK_CONTENT, { name: "t", description: "d", outputSchema: jsonSchema({ type: "object" }), handler: () => ({ content: [{ type: "text", text: "x" }] }) });
    expect(frames).toEqual([{ type: "tool_result", session_id: "session-1", id: "call-1", result: { content: [{ type: "text", text: "x" }] } }]);
  });

  it("an ack without result_content: the blocks are dropped with a warning, plain v2 result", async () => {
    const { h, frames } = await callOn({}, { name: "shot", description: "d", handler: () => toolContent([image(png, "image/png")]) });
    expect(frames).toEqual([{ type: "tool_result", session_id: "session-1", id: "call-1", result: null }]);
    expect(h.warnings.join("\n")).toMatch(/does not accept content results; the 1 content block\(s\) of "shot" were dropped/);
  });

  it("more than 64 blocks fail the call locally with the daemon's reason", async () => {
    const { frames } = await callOn(ACK_CONTENT, { name: "t", description: "d", handler: () => toolContent(Array.from({ length: 65 }, () => text("x"))) });
    expect(frames[0]).toMatchObject({ type: "tool_error", error: { type: "tool_serialization_error", details: { reason: "invalid_content", problem: "too_many" } } });
  });
});

describe("bodies beyond one frame", () => {
  const big = fakePng(600_000);
  const tool: AnyTool = { name: "shot", description: "d", handler: () => toolContent([image(big, "image/png")]) };

  it("go as tool_result_part frames that reassemble to the body, when the ack announced parts", async () => {
    const { frames, sent } = await callOn(ACK_CONTENT, tool);
    expect(frames.length).toBeGreaterThan(1);
    for (const s of sent) expect(Buffer.byteLength(s, "utf8")).toBeLessThanOrEqual(MAX_FRAME_BYTES);
    const chunks: Buffer[] = [];
    let offset = 0;
    for (const f of frames) {
      expect(f).toMatchObject({ type: "tool_result_part", session_id: "session-1", id: "call-1", offset });
      const chunk = Buffer.from(f.data as string, "base64");
      chunks.push(chunk);
      offset += chunk.length;
    }
    const body = Buffer.concat(chunks);
    expect(frames[0]?.total).toBe(body.length);
    expect(frames.every((f) => f.sha256 === createHash("sha256").update(body).digest("hex"))).toBe(true);
    const parsed = JSON.parse(body.toString("utf8")) as { content: { data: string }[]; result?: unknown };
    expect("result" in parsed).toBe(false);
    expect(Buffer.from(parsed.content[0]?.data as string, "base64").equals(Buffer.from(big))).toBe(true);
  });

  it("fail locally with tool_serialization_error without parts in the ack", async () => {
    const { frames } = await callOn({ result_content: true }, tool);
    expect(frames).toHaveLength(1);
    expect(frames[0]).toMatchObject({ type: "tool_error", error: { type: "tool_serialization_error", details: { limitBytes: MAX_FRAME_BYTES } } });
  });

  it("fail locally when the body is over result_parts_max_bytes", async () => {
    const { frames } = await callOn({ result_content: true, result_parts_max_bytes: 262_144 }, tool);
    expect(frames).toHaveLength(1);
    expect(frames[0]).toMatchObject({ type: "tool_error", error: { type: "tool_serialization_error", details: { limitBytes: 262_144 } } });
    expect((frames[0]?.error as { details: { bytes: number } }).details.bytes).toBeGreaterThan(800_000);
  });

  it("a large plain JSON result also goes as parts", async () => {
    const { frames } = await callOn(ACK_CONTENT, { name: "t", description: "d", outputSchema: jsonSchema({ type: "string" }), handler: () => "x".repeat(300_000) });
    expect(frames.every((f) => f.type === "tool_result_part")).toBe(true);
    const body = Buffer.concat(frames.map((f) => Buffer.from(f.data as string, "base64"))).toString("utf8");
    expect(JSON.parse(body)).toEqual({ result: "x".repeat(300_000) });
  });
});
