// The published package (§T1): its version follows the appduct binary's, and the public
// surface of every export-map subpath, under each condition, matches a committed snapshot.
// Set UPDATE_EXPORT_SURFACE=1 to rewrite the snapshot after an intended change. The build output
// these tests import is produced by the global setup (test-global-setup.ts).

import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { build as esbuild } from "esbuild";
import { build as viteBuild } from "vite";
import { describe, expect, it } from "vitest";

import { SDK_VERSION } from "../src/core/version.js";

const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const REPO_ROOT = path.resolve(PACKAGE_DIR, "../../..");
const SNAPSHOT = path.join(PACKAGE_DIR, "test", "export-surface.json");
const CONDITIONS = ["node", "development", "default", "react-native"] as const;
const WEB_APP = path.join(PACKAGE_DIR, "test", "fixtures", "web-app", "main.js");
const REACT_APP = path.join(PACKAGE_DIR, "test", "fixtures", "react-app", "main.js");
/** A text only the real React bindings contain (their missing-client warning). */
const REACT_HOOKS_MARKER = "found no client";
/** `SDK_LIVE_CORE_MARKER`: what `appduct doctor` finds in a release bundle (issue #23). */
const LIVE_CORE_MARKER = "appduct-sdk-live-core/v1";
const SESSION_CORE_MARKERS = ["session_claim", "tool_registry_snapshot", "__APPDUCT__", LIVE_CORE_MARKER];

interface PackageJson {
  name: string;
  version: string;
  type: string;
  exports: Record<string, unknown>;
}

const pkg = JSON.parse(readFileSync(path.join(PACKAGE_DIR, "package.json"), "utf8")) as PackageJson;

/** `version = "…"` of a TOML section, read line by line (the manifests are simple). */
function tomlVersion(text: string, section: string): string | undefined {
  let inSection = false;
  for (const line of text.split("\n")) {
    const header = /^\s*\[([^\]]+)\]\s*$/.exec(line);
    if (header) {
      inSection = header[1] === section;
      continue;
    }
    const version = /^\s*version\s*=\s*"([^"]+)"/.exec(line);
    if (inSection && version) return version[1];
  }
  return undefined;
}

/** The `appduct` binary's version: its crate's own, or the workspace's when inherited. */
function appductVersion(): string | undefined {
  const cli = readFileSync(path.join(REPO_ROOT, "cli", "Cargo.toml"), "utf8");
  if (/^\s*version\.workspace\s*=\s*true/m.test(cli)) {
    return tomlVersion(readFileSync(path.join(REPO_ROOT, "Cargo.toml"), "utf8"), "workspace.package");
  }
  return tomlVersion(cli, "package");
}

describe("package", () => {
  it("is the ESM package @appduct/sdk", () => {
    expect(pkg.name).toBe("@appduct/sdk");
    expect(pkg.type).toBe("module");
  });

  it("has the appduct binary's version", () => {
    const cli = readFileSync(path.join(REPO_ROOT, "cli", "Cargo.toml"), "utf8");
    expect(cli).toMatch(/name\s*=\s*"appduct"/);
    expect(pkg.version).toBe(appductVersion());
    expect(SDK_VERSION).toBe(pkg.version);
  });
});

/** Maps `react-native` (not installed) to a stub, so its entries import under Node. */
const REACT_NATIVE_STUB = pathToFileURL(path.join(PACKAGE_DIR, "test", "fixtures", "react-native-stub", "register.js")).href;

/** Runs an ES module script with Node under one export condition; returns its stdout. */
function runNode(condition: string, script: string): string {
  return execFileSync(process.execPath, [`--conditions=${condition}`, "--import", REACT_NATIVE_STUB, "--input-type=module", "-e", script], {
    cwd: PACKAGE_DIR,
    encoding: "utf8",
    env: { ...process.env, NODE_ENV: "test" },
  });
}

describe("export surface", () => {
  it("matches the committed snapshot for every subpath and condition", () => {
    const subpaths = Object.keys(pkg.exports).filter((s) => s !== "./package.json");
    const surface: Record<string, Record<string, string[] | string>> = {};
    for (const subpath of subpaths) {
      const specifier = subpath === "." ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
      surface[subpath] = {};
      for (const condition of CONDITIONS) {
        const script = `import(${JSON.stringify(specifier)}).then((m) => console.log(JSON.stringify(Object.keys(m).sort())), (e) => console.log(JSON.stringify("error: " + e.code)))`;
        (surface[subpath] as Record<string, string[] | string>)[condition] = JSON.parse(runNode(condition, script)) as string[] | string;
      }
    }
    if (process.env.UPDATE_EXPORT_SURFACE === "1") {
      writeFileSync(SNAPSHOT, `${JSON.stringify(surface, null, 2)}\n`);
    }
    expect(surface).toEqual(JSON.parse(readFileSync(SNAPSHOT, "utf8")));

    // Inert entries expose the same names as the real ones (§T8); the Node entry adds only
    // its pin helper.
    const inert = surface["./inert"]?.default;
    expect(surface["./web"]?.development).toEqual(inert);
    expect(surface["./web"]?.default).toEqual(inert);
    expect(surface["./web/enabled"]?.default).toEqual(inert);
    expect((surface["./node"]?.node as string[]).filter((n) => n !== "pinFromCertificateDer")).toEqual(inert);
    // The React Native entry: the app API plus the hooks; its auto entry exports nothing.
    for (const condition of CONDITIONS) {
      expect(surface["./react-native"]?.[condition]).toEqual([...(inert as string[]), "useAppductState", "useAppductTool"].sort());
      expect(surface["./react-native/auto"]?.[condition]).toEqual([]);
    }
    // The React bindings: the inert hooks (default condition) have the real ones' names.
    const hooks = ["useAppductState", "useAppductTool"];
    for (const condition of CONDITIONS) {
      expect(surface["./react"]?.[condition]).toEqual(hooks);
      expect(surface["./react/enabled"]?.[condition]).toEqual(hooks);
    }
  }, 60_000);

  it("imports without window (server-side rendering) without throwing, defining globals or connecting", () => {
    for (const condition of ["development", "default"]) {
      const script = `const specs = ["@appduct/sdk", "@appduct/sdk/react", "@appduct/sdk/web", "@appduct/sdk/web/enabled", "@appduct/sdk/inert"];
        const mods = await Promise.all(specs.map((s) => import(s)));
        console.log(JSON.stringify({ global: typeof globalThis.__APPDUCT__, hooks: typeof mods[1].useAppductTool, states: mods.slice(2).map((m) => m.getAppductState()) }));`;
      expect(JSON.parse(runNode(condition, script))).toEqual({ global: "undefined", hooks: "function", states: ["idle", "idle", "idle"] });
    }
  }, 60_000);
});

describe("web bundles (§T8)", () => {
  async function esbuildText(conditions: string[], entry = WEB_APP): Promise<string> {
    const result = await esbuild({
      entryPoints: [entry],
      bundle: true,
      minify: true,
      write: false,
      format: "esm",
      platform: "browser",
      conditions,
      external: ["react"],
      logLevel: "silent",
    });
    return result.outputFiles.map((f) => f.text).join("\n");
  }

  async function viteText(mode: "production" | "development"): Promise<string> {
    // A real `vite build` runs with NODE_ENV unset, which Vite derives from the mode; vitest has
    // set it to "test", which Vite would otherwise keep (and treat as development).
    const saved = process.env.NODE_ENV;
    process.env.NODE_ENV = mode;
    const output = await viteBuild({
      configFile: false,
      logLevel: "silent",
      mode,
      root: path.dirname(WEB_APP),
      build: { write: false, minify: mode === "production", rollupOptions: { input: WEB_APP } },
    }).finally(() => {
      process.env.NODE_ENV = saved;
    });
    const results = Array.isArray(output) ? output : [output];
    return results
      .flatMap((r) => ("output" in r ? r.output : []))
      .map((chunk) => ("code" in chunk ? chunk.code : ""))
      .join("\n");
  }

  const markersIn = (text: string): string[] => SESSION_CORE_MARKERS.filter((m) => text.includes(m));

  // SEC-57: a production bundle carries no session code and no window.__APPDUCT__.
  it("esbuild with default conditions gets the inert entry: no session-core markers", async () => {
    expect(markersIn(await esbuildText([]))).toEqual([]);
  }, 60_000);

  it("esbuild with the development condition gets the real entry", async () => {
    expect(markersIn(await esbuildText(["development"]))).toEqual(SESSION_CORE_MARKERS);
  }, 60_000);

  it("a React app built with default conditions gets the inert hooks and web entry; with development the real ones", async () => {
    const production = await esbuildText([], REACT_APP);
    expect(markersIn(production)).toEqual([]);
    expect(production).not.toContain(REACT_HOOKS_MARKER);
    expect(production).not.toContain('from"react"');
    const development = await esbuildText(["development"], REACT_APP);
    expect(markersIn(development)).toEqual(SESSION_CORE_MARKERS);
    expect(development).toContain(REACT_HOOKS_MARKER);
  }, 60_000);

  it("a Vite production build gets the inert entry; a development build the real one", async () => {
    expect(markersIn(await viteText("production"))).toEqual([]);
    expect(markersIn(await viteText("development"))).toEqual(SESSION_CORE_MARKERS);
  }, 60_000);
});

describe("the live-core marker appduct doctor looks for (issue #23)", () => {
  const DIST = path.join(PACKAGE_DIR, "dist");
  const read = (rel: string): string => readFileSync(path.join(DIST, rel), "utf8");

  it("is the constant the session core stores", async () => {
    const { SDK_LIVE_CORE_MARKER } = await import("../src/core/client.js");
    expect(SDK_LIVE_CORE_MARKER).toBe(LIVE_CORE_MARKER);
  });

  it("is in the live dist and in no inert module", () => {
    expect(read("core/client.js")).toContain(LIVE_CORE_MARKER);
    for (const inert of ["inert/index.js", "inert/client.js", "react/inert.js", "react-native/inert.js"]) {
      expect(read(inert), inert).not.toContain(LIVE_CORE_MARKER);
    }
  });

  it("survives a minified bundle of the React Native entry, and the inert web bundle has none", async () => {
    const bundle = async (entry: string, conditions: string[]): Promise<string> => {
      const result = await esbuild({
        stdin: { contents: `import * as m from ${JSON.stringify(entry)}; globalThis.m = m;`, resolveDir: PACKAGE_DIR },
        bundle: true,
        minify: true,
        write: false,
        format: "esm",
        platform: "neutral",
        mainFields: ["module", "main"],
        conditions,
        external: ["react", "react-native"],
        logLevel: "silent",
      });
      return result.outputFiles.map((f) => f.text).join("\n");
    };
    expect(await bundle("@appduct/sdk/react-native", ["react-native"])).toContain(LIVE_CORE_MARKER);
    expect(await bundle("@appduct/sdk/web", [])).not.toContain(LIVE_CORE_MARKER);
  }, 60_000);
});
