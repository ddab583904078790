// The sealed transport's crypto inside a real Hermes (npm's hermes-engine-cli 0.12.0, Linux
// binary): no `crypto`, no TextEncoder, as on phones. test/hermes/sealed-entry.ts is bundled with
// esbuild into one file (async functions lowered to generators); class syntax, which this Hermes
// does not parse, is then lowered by Babel's class transform, as React Native's Babel preset does
// for Hermes. The script checks the
// Noise vectors produced by snow (and cacophony), then sealed round trips with each randomness
// source; any failure throws and `hermes` exits non-zero.

import { execFile } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { transformSync } from "@babel/core";
import * as esbuild from "esbuild";
import { afterAll, describe, expect, it } from "vitest";

const here = path.dirname(fileURLToPath(import.meta.url));
const SDK_TS = path.resolve(here, "..", "..", "..");
const HERMES = path.join(SDK_TS, "node_modules", "hermes-engine-cli", "linux64-bin", "hermes");
const SEALED_VECTORS = path.resolve(SDK_TS, "..", "protocol", "tests", "sealed-vectors.json");
const work = mkdtempSync(path.join(os.tmpdir(), "appduct-hermes-"));

afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The entry bundled into one script for Hermes, with the vector sets defined before it. */
async function bundle(entry: string, vectorSets: { name: string; vectors: unknown[] }[], sealed: unknown = null): Promise<string> {
  const built = await esbuild.build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format: "iife",
    platform: "neutral",
    mainFields: ["module", "main"],
    target: "es2019",
    // This Hermes parses async function declarations but not async arrows; React Native's Babel
    // preset lowers both, as esbuild does here (to generators).
    supported: { "async-await": false },
    // Metro does not tree-shake: every module's top level runs in the app, so it runs here too
    // (a dependency that called TextEncoder at load would fail this test).
    treeShaking: false,
    logLevel: "silent",
  });
  const code = (built.outputFiles[0] as { text: string }).text;
  const lowered = transformSync(code, { babelrc: false, configFile: false, sourceType: "script", plugins: ["@babel/plugin-transform-classes"] });
  const file = path.join(work, `${path.basename(entry, ".ts")}.js`);
  writeFileSync(file, `var APPDUCT_VECTORS = ${JSON.stringify(vectorSets)};\nvar APPDUCT_SEALED = ${JSON.stringify(sealed)};\n${lowered?.code ?? ""}`);
  return file;
}

function runHermes(file: string): Promise<{ code: number; stdout: string; stderr: string }> {
  if (!(statSync(HERMES).mode & 0o111)) chmodSync(HERMES, 0o755);
  return new Promise((resolve) => {
    execFile(HERMES, [file], { timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === "number" ? error.code : -1) : 0, stdout, stderr });
    });
  });
}

function vectorSets(): { name: string; vectors: unknown[] }[] {
  const published = JSON.parse(readFileSync(path.join(here, "fixtures", "noise-nk-vectors.json"), "utf8")) as { vectors: unknown[] };
  return [{ name: "published NK vectors (cacophony, snow)", vectors: published.vectors }];
}

describe("Hermes (hermes-engine-cli 0.12.0)", () => {
  it("runs the bundled sealed crypto: snow's NK vectors and sealed-vectors.json, then round trips with the drbg and the csprng source", async () => {
    expect(existsSync(HERMES), `no Hermes binary at ${HERMES}`).toBe(true);
    expect(existsSync(SEALED_VECTORS), `no ${SEALED_VECTORS}`).toBe(true);
    const sealed = JSON.parse(readFileSync(SEALED_VECTORS, "utf8")) as unknown;
    const file = await bundle(path.join(here, "hermes", "sealed-entry.ts"), vectorSets(), sealed);
    const ran = await runHermes(file);
    expect(ran.stderr).toBe("");
    expect(ran.code).toBe(0);
    expect(ran.stdout).toContain("round trip drbg ok");
    expect(ran.stdout).toContain("round trip csprng ok");
    expect(ran.stdout).toContain("sealed-vectors.json ok");
    expect(ran.stdout).toMatch(/APPDUCT_HERMES_OK vectors=\d+/);
  }, 120_000);

  it("runs the React Native client itself: a sealed claim and a tool call over the DRBG path", async () => {
    const file = await bundle(path.join(here, "hermes", "client-entry.ts"), []);
    const ran = await runHermes(file);
    expect(ran.stderr).toBe("");
    expect(ran.code).toBe(0);
    expect(ran.stdout).toContain("connected");
    expect(ran.stdout).toContain("APPDUCT_HERMES_CLIENT_OK rng=drbg frames=session_claim,tool_registry_snapshot,tool_result");
  }, 120_000);

  it("every @noble module the SDK imports loads without TextEncoder and crypto (CommonJS, as Metro resolves it, and ESM)", async () => {
    const script = path.join(here, "hermes", "noble-load.mjs");
    const sdkPackage = path.join(SDK_TS, "packages", "sdk", "package.json");
    const ran = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(process.execPath, [script, sdkPackage], { timeout: 60_000 }, (error, stdout, stderr) => resolve({ code: error ? 1 : 0, stdout, stderr })),
    );
    expect(ran.stderr).toBe("");
    expect(ran.stdout).toBe("loaded\n");
  }, 60_000);

  it("fails when the bundle throws (the harness would notice a broken crypto path)", async () => {
    const entry = path.join(work, "throws.ts");
    writeFileSync(entry, 'import { NkHandshake } from "' + path.join(SDK_TS, "packages", "sdk", "src", "core", "sealed", "index.js").replace(/\\/g, "/") + '";\nnew NkHandshake("initiator", { prologue: new Uint8Array(0), random: () => new Uint8Array(32) });\n');
    const file = await bundle(entry, []);
    const ran = await runHermes(file);
    expect(ran.code).not.toBe(0);
    expect(ran.stderr).toMatch(/NoiseError|needs the responder/);
  }, 120_000);
});
