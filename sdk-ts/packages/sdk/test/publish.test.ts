// What `npm publish` would ship (§T1): `npm pack --dry-run --json` lists types and code for every
// export target, the README and both licenses, and nothing else (no tests, no sources, no source
// maps); the manifest carries what the registry shows. The CommonJS builds load through a
// CommonJS `require` with the `require` condition, as Jest's runtime resolves them, and the
// Jest mapping the README documents sends every platform entry to the inert one. The build output
// comes from the global setup (test-global-setup.ts).

import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { describe, expect, it } from "vitest";

const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(path.join(PACKAGE_DIR, "package.json"), "utf8")) as Record<string, unknown> & {
  exports: Record<string, string | Record<string, string>>;
  scripts: Record<string, string>;
};

/** Every file path an export-map target names (all conditions). */
function exportTargets(): string[] {
  const out = new Set<string>();
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (subpath === "./package.json") continue;
    for (const file of typeof target === "string" ? [target] : Object.values(target)) out.add(file.replace(/^\.\//, ""));
  }
  return [...out].sort();
}

describe("the published package", () => {
  it("ships types and code of every export, README and licenses, and no tests, sources or maps", () => {
    // --ignore-scripts: the global setup built dist already; prepack would build it again.
    const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: PACKAGE_DIR, encoding: "utf8" });
    const [report] = JSON.parse(out) as Array<{ name: string; files: Array<{ path: string }> }>;
    expect(report?.name).toBe("@appduct/sdk");
    const files = new Set(report!.files.map((f) => f.path));
    for (const required of ["package.json", "README.md", "LICENSE-MIT", "LICENSE-APACHE", ...exportTargets()]) {
      expect(files, required).toContain(required);
    }
    for (const file of files) {
      expect(file, file).toMatch(/^(package\.json|README\.md|LICENSE-MIT|LICENSE-APACHE|dist\/.+\.(js|cjs|d\.ts))$/);
      expect(file, file).not.toMatch(/(^|\/)(test|tests|__tests__|fixtures)\/|\.test\.|\.spec\.|\.map$/);
    }
    // Every JavaScript file has its declarations beside it (the CommonJS copies share the ESM ones).
    for (const file of files) {
      if (file.endsWith(".js")) expect(files, file).toContain(file.replace(/\.js$/, ".d.ts"));
    }
  });

  it("carries the registry metadata and builds before packing", () => {
    expect(pkg.license).toBe("MIT OR Apache-2.0");
    expect(pkg.repository).toMatchObject({ type: "git", directory: "sdk-ts/packages/sdk" });
    expect(pkg.homepage).toEqual(expect.stringContaining("https://"));
    expect(pkg.keywords).toEqual(expect.arrayContaining(["mcp", "react-native"]));
    expect(pkg.publishConfig).toEqual({ access: "public" });
    expect(pkg.scripts.prepack).toBe("npm run build");
    expect(pkg.scripts.build).toContain("scripts/build-cjs.mjs");
  });
});

describe("CommonJS (Jest)", () => {
  const requireFromApp = createRequire(path.join(PACKAGE_DIR, "package.json"));

  it("require of the inert entry loads its CommonJS build, and it is inert", async () => {
    expect(requireFromApp.resolve("@appduct/sdk/inert")).toBe(path.join(PACKAGE_DIR, "dist", "inert", "index.cjs"));
    const inert = requireFromApp("@appduct/sdk/inert") as typeof import("../src/inert/index.js");
    const registration = inert.registerTool({ name: "cart_total", description: "Total.", handler: () => ({ total: 1 }) });
    expect(registration.name).toBe("cart_total");
    expect(inert.getRegisteredTools()).toEqual([]);
    expect(inert.getAppductState()).toBe("idle");
    const warn = console.warn;
    console.warn = () => undefined;
    try {
      await expect(inert.connect("myapp:///?appduct=x")).rejects.toBeInstanceOf(inert.AppductDisabledError);
    } finally {
      console.warn = warn;
    }
  });

  it("require of the test-runner client loads its CommonJS build with the full API", () => {
    expect(requireFromApp.resolve("@appduct/sdk/client")).toBe(path.join(PACKAGE_DIR, "dist", "client", "index.cjs"));
    const client = requireFromApp("@appduct/sdk/client") as Record<string, unknown>;
    expect(Object.keys(client).sort()).toEqual(["AppductError", "connect", "link", "waitForSession"]);
  });

  it("the README's moduleNameMapper sends every platform entry, and only those, to the inert entry", () => {
    const readme = readFileSync(path.join(PACKAGE_DIR, "README.md"), "utf8");
    const mapping = /"(\^@appduct\/sdk\/[^"]+)":\s*"([^"]+)"/.exec(readme);
    expect(mapping, "README moduleNameMapper").not.toBeNull();
    const [, pattern, mapped] = mapping!;
    const regex = new RegExp(pattern!);
    for (const entry of ["react-native", "react-native/auto", "web", "node"]) {
      expect(regex.test(`@appduct/sdk/${entry}`), entry).toBe(true);
      expect(pkg.exports[`./${entry}`], entry).toBeDefined();
    }
    for (const other of ["client", "inert", "metro", "web/enabled", "react"]) expect(regex.test(`@appduct/sdk/${other}`), other).toBe(false);
    expect(requireFromApp.resolve(mapped!)).toBe(path.join(PACKAGE_DIR, "dist", "inert", "index.cjs"));
  });
});
