// The published package (07 §7.1): its version follows the appduct binary's, and the public
// surface of every export-map subpath, under each condition, matches a committed snapshot.
// Set UPDATE_EXPORT_SURFACE=1 to rewrite the snapshot after an intended change.

import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { beforeAll, describe, expect, it } from "vitest";

const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const REPO_ROOT = path.resolve(PACKAGE_DIR, "../../..");
const SNAPSHOT = path.join(PACKAGE_DIR, "test", "export-surface.json");
const CONDITIONS = ["node", "development", "default", "react-native"] as const;

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
  });
});

describe("export surface", () => {
  beforeAll(() => {
    // The export map points at the build output, so build it first.
    execFileSync(process.execPath, [path.join(REPO_ROOT, "sdk-ts/node_modules/typescript/bin/tsc"), "-p", path.join(PACKAGE_DIR, "tsconfig.build.json")], {
      stdio: "pipe",
    });
  }, 120_000);

  it("matches the committed snapshot for every subpath and condition", () => {
    const subpaths = Object.keys(pkg.exports).filter((s) => s !== "./package.json");
    const surface: Record<string, Record<string, string[] | string>> = {};
    for (const subpath of subpaths) {
      const specifier = subpath === "." ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
      surface[subpath] = {};
      for (const condition of CONDITIONS) {
        const script = `import(${JSON.stringify(specifier)}).then((m) => console.log(JSON.stringify(Object.keys(m).sort())), (e) => console.log(JSON.stringify("error: " + e.code)))`;
        const out = execFileSync(process.execPath, [`--conditions=${condition}`, "--input-type=module", "-e", script], {
          cwd: PACKAGE_DIR,
          encoding: "utf8",
          env: { ...process.env, NODE_ENV: "test" },
        });
        (surface[subpath] as Record<string, string[] | string>)[condition] = JSON.parse(out) as string[] | string;
      }
    }
    if (process.env.UPDATE_EXPORT_SURFACE === "1") {
      writeFileSync(SNAPSHOT, `${JSON.stringify(surface, null, 2)}\n`);
    }
    expect(surface).toEqual(JSON.parse(readFileSync(SNAPSHOT, "utf8")));
  }, 60_000);
});
