// The Metro helper (§T11.4). Units drive `withAppduct`'s resolver with a stand-in for Metro's
// resolution context, for each way `include` is decided. The module-graph tests bundle what the
// helper resolves to with esbuild, then build the fixture app (test/fixtures/metro-app) with real
// Metro in release mode (dev false, minified) and run the bundle in a fresh VM context.

import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import vm from "node:vm";

import { build as esbuild } from "esbuild";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";

import { withAppduct, type MetroConfigLike, type MetroResolution, type MetroResolutionContext, type MetroResolver } from "../src/metro/index.js";
import { ENABLED_REACT_NATIVE_ENTRIES, INERT_REACT_NATIVE_ENTRY } from "../src/metro/with-appduct.js";

const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const FIXTURE_APP = path.join(PACKAGE_DIR, "test", "fixtures", "metro-app");
const REACT_NATIVE_STUB = path.join(PACKAGE_DIR, "test", "fixtures", "react-native-stub", "index.js");
/**
 * Texts only the session core contains (the same markers as the web bundle tests use), and the
 * live-core marker `appduct doctor` looks for in release bundles (`SDK_LIVE_CORE_MARKER`).
 */
const SESSION_CORE_MARKERS = ["session_claim", "tool_registry_snapshot", "appduct-sdk-live-core/v1"];
/** Modules of the session core and the real React Native entry: none may be in an inert graph. */
const SESSION_CORE_MODULES = ["core/client.js", "core/invoke.js", "core/calls.js", "react-native/client.js", "web/transport.js"];
const RN_ENTRY = "@appduct/sdk/react-native";
const RN_AUTO = "@appduct/sdk/react-native/auto";
const ENABLED_ENTRY = ENABLED_REACT_NATIVE_ENTRIES.get(RN_ENTRY) as string;
const ENABLED_AUTO = ENABLED_REACT_NATIVE_ENTRIES.get(RN_AUTO) as string;

afterEach(() => {
  vi.unstubAllEnvs();
});

/** Metro's own resolver, standing in: resolves every name to `/metro/<name>` and records it. */
function metroContext(): { context: MetroResolutionContext; metroSaw: string[] } {
  const metroSaw: string[] = [];
  const resolveRequest: MetroResolver = (_context, moduleName) => {
    metroSaw.push(moduleName);
    return { type: "sourceFile", filePath: `/metro/${moduleName}` };
  };
  return { context: { resolveRequest, originModulePath: "/app/index.js" }, metroSaw };
}

/** An app's own resolver: aliases `react-native`, chains everything else to Metro's. */
function userResolver(): { resolveRequest: MetroResolver; userSaw: string[] } {
  const userSaw: string[] = [];
  const resolveRequest: MetroResolver = (context, moduleName, platform) => {
    userSaw.push(moduleName);
    if (moduleName === "react-native") return { type: "sourceFile", filePath: "/alias/react-native.js" };
    return context.resolveRequest(context, moduleName, platform);
  };
  return { resolveRequest, userSaw };
}

function resolveWith(config: MetroConfigLike, moduleName: string, context: MetroResolutionContext = metroContext().context): MetroResolution {
  const resolver = config.resolver?.resolveRequest ?? context.resolveRequest;
  return resolver(context, moduleName, "android");
}

const sourceFile = (filePath: string): MetroResolution => ({ type: "sourceFile", filePath });

describe("withAppduct resolution (§T11.4)", () => {
  it("include: false resolves both React Native entries to the inert variant, without asking any other resolver", () => {
    const { resolveRequest, userSaw } = userResolver();
    const config = withAppduct({ resolver: { resolveRequest } }, { include: false });
    const { context, metroSaw } = metroContext();
    expect(resolveWith(config, RN_ENTRY, context)).toEqual(sourceFile(INERT_REACT_NATIVE_ENTRY));
    expect(resolveWith(config, RN_AUTO, context)).toEqual(sourceFile(INERT_REACT_NATIVE_ENTRY));
    expect(userSaw).toEqual([]);
    expect(metroSaw).toEqual([]);
    expect(existsSync(INERT_REACT_NATIVE_ENTRY)).toBe(true);
  });

  it("include: true resolves them to the variants that set the flag first, without asking any other resolver", () => {
    const { resolveRequest, userSaw } = userResolver();
    const config = withAppduct({ resolver: { resolveRequest } }, { include: true });
    const { context, metroSaw } = metroContext();
    expect(resolveWith(config, RN_ENTRY, context)).toEqual(sourceFile(ENABLED_ENTRY));
    expect(resolveWith(config, RN_AUTO, context)).toEqual(sourceFile(ENABLED_AUTO));
    expect(userSaw).toEqual([]);
    expect(metroSaw).toEqual([]);
    expect(path.basename(ENABLED_ENTRY)).toBe("enabled.js");
    expect(path.basename(ENABLED_AUTO)).toBe("auto-enabled.js");
    for (const file of [ENABLED_ENTRY, ENABLED_AUTO]) {
      const source = readFileSync(file, "utf8");
      expect(source).toMatch(/^import "\.\/enable-flag\.js";$/m);
      // The flag module is imported before the entry, so it runs first.
      expect(source.indexOf("./enable-flag.js")).toBeLessThan(source.search(/\.\/(index|auto)\.js/));
    }
    // Declared as having side effects, so a tree-shaking bundler keeps the flag import.
    const { sideEffects } = JSON.parse(readFileSync(path.join(PACKAGE_DIR, "package.json"), "utf8")) as { sideEffects: string[] };
    const declared = sideEffects.map((p) => path.join(PACKAGE_DIR, p));
    expect(declared).toEqual(expect.arrayContaining([ENABLED_ENTRY, ENABLED_AUTO, path.join(path.dirname(ENABLED_ENTRY), "enable-flag.js")]));
  });

  it("hands every other request to the app's resolveRequest, which may chain to Metro's", () => {
    for (const include of [false, true]) {
      const { resolveRequest, userSaw } = userResolver();
      const config = withAppduct({ resolver: { resolveRequest } }, { include });
      const { context, metroSaw } = metroContext();
      expect(resolveWith(config, "react-native", context)).toEqual(sourceFile("/alias/react-native.js"));
      expect(resolveWith(config, "@appduct/sdk/react", context)).toEqual(sourceFile("/metro/@appduct/sdk/react"));
      expect(resolveWith(config, "@appduct/sdk/react-native/other", context)).toEqual(sourceFile("/metro/@appduct/sdk/react-native/other"));
      expect(userSaw).toEqual(["react-native", "@appduct/sdk/react", "@appduct/sdk/react-native/other"]);
      expect(metroSaw).toEqual(["@appduct/sdk/react", "@appduct/sdk/react-native/other"]);
    }
  });

  it("without an app resolver, chains to Metro's for everything else", () => {
    const config = withAppduct({}, { include: false });
    const { context, metroSaw } = metroContext();
    expect(resolveWith(config, "lodash", context)).toEqual(sourceFile("/metro/lodash"));
    expect(resolveWith(config, RN_ENTRY, context)).toEqual(sourceFile(INERT_REACT_NATIVE_ENTRY));
    expect(metroSaw).toEqual(["lodash"]);
  });

  it("the inert variant exports the React Native entry's names (committed export surface), so app imports still link", async () => {
    const surface = JSON.parse(readFileSync(path.join(PACKAGE_DIR, "test", "export-surface.json"), "utf8")) as Record<string, Record<string, string[]>>;
    const inert = (await import(INERT_REACT_NATIVE_ENTRY)) as Record<string, unknown>;
    expect(Object.keys(inert).sort()).toEqual(surface["./react-native"]?.["react-native"]);
    expect((inert.getAppductState as () => string)()).toBe("idle");
  });

  it("returns a new config with the other keys kept and the input untouched", () => {
    const original = { projectRoot: "/app", resolver: { sourceExts: ["js"] }, serializer: { polyfillModuleNames: ["/app/p.js"] } };
    const snapshot = structuredClone(original);
    const wrapped = withAppduct(original, { include: false });
    expect(original).toEqual(snapshot);
    expect(wrapped).not.toBe(original);
    expect(wrapped.projectRoot).toBe("/app");
    expect(wrapped.resolver?.sourceExts).toEqual(["js"]);
    expect(wrapped.serializer).toBe(original.serializer);
  });

  it("rejects a non-boolean include and a config that is not an object", () => {
    expect(() => withAppduct({}, { include: "yes" as unknown as boolean })).toThrow(TypeError);
    expect(() => withAppduct(null as unknown as MetroConfigLike)).toThrow(/Metro config object/);
    expect(() => withAppduct((() => ({})) as unknown as MetroConfigLike)).toThrow(/Metro config object/);
  });
});

/** Sets (or, with undefined, removes) the two variables for this test. */
function setEnv(env: { APPDUCT_ENABLED?: string; NODE_ENV?: string }): void {
  vi.stubEnv("APPDUCT_ENABLED", env.APPDUCT_ENABLED);
  vi.stubEnv("NODE_ENV", env.NODE_ENV);
}

/** Whether a config resolves the entry to the real (flag-setting) variant rather than the inert one. */
function includes(config: MetroConfigLike): boolean {
  const resolution = resolveWith(config, RN_ENTRY);
  if (resolution.type !== "sourceFile" || ![ENABLED_ENTRY, INERT_REACT_NATIVE_ENTRY].includes(resolution.filePath)) {
    throw new Error(`unexpected resolution ${JSON.stringify(resolution)}`);
  }
  return resolution.filePath === ENABLED_ENTRY;
}

describe("include from the environment (§T11.4)", () => {
  const includedUnder = (env: { APPDUCT_ENABLED?: string; NODE_ENV?: string }): boolean => {
    setEnv(env);
    return includes(withAppduct({}));
  };

  it("APPDUCT_ENABLED 1 or true (trimmed, any case) includes, even under NODE_ENV production", () => {
    for (const value of ["1", "true", " TRUE ", "True"]) {
      expect(includedUnder({ APPDUCT_ENABLED: value, NODE_ENV: "production" }), value).toBe(true);
    }
  });

  it("APPDUCT_ENABLED 0 or false excludes, even in development", () => {
    for (const value of ["0", "false", "FALSE"]) {
      expect(includedUnder({ APPDUCT_ENABLED: value, NODE_ENV: "development" }), value).toBe(false);
    }
  });

  it("any other APPDUCT_ENABLED throws, naming the variable: when the config is built, and at resolution", () => {
    for (const value of ["yes", "2", "garbage"]) {
      vi.stubEnv("APPDUCT_ENABLED", value);
      expect(() => withAppduct({}), value).toThrow(/APPDUCT_ENABLED/);
    }
    setEnv({});
    const config = withAppduct({});
    vi.stubEnv("APPDUCT_ENABLED", "garbage");
    expect(() => resolveWith(config, RN_ENTRY)).toThrow(/APPDUCT_ENABLED/);
  });

  it("unset: excluded when NODE_ENV is production, included otherwise", () => {
    expect(includedUnder({ NODE_ENV: "production" })).toBe(false);
    expect(includedUnder({ NODE_ENV: "development" })).toBe(true);
    expect(includedUnder({})).toBe(true);
    expect(includedUnder({ APPDUCT_ENABLED: "", NODE_ENV: "production" })).toBe(false);
  });

  it("is read when Metro resolves the entry: `react-native bundle --dev false` sets NODE_ENV=production after loading the config", () => {
    setEnv({});
    const config = withAppduct({});
    vi.stubEnv("NODE_ENV", "production");
    expect(includes(config)).toBe(false);
    vi.stubEnv("NODE_ENV", "development");
    expect(includes(config)).toBe(true);
  });

  it("an explicit include wins over the environment, which is then not read", () => {
    setEnv({ APPDUCT_ENABLED: "0" });
    expect(includes(withAppduct({}, { include: true }))).toBe(true);
    setEnv({ APPDUCT_ENABLED: "1" });
    expect(includes(withAppduct({}, { include: false }))).toBe(false);
    vi.stubEnv("APPDUCT_ENABLED", "garbage");
    expect(includes(withAppduct({}, { include: true }))).toBe(true);
  });
});

/** Bundles one file for React Native with esbuild; returns its text and the modules it holds. */
async function esbuildGraph(entry: string): Promise<{ text: string; modules: string[] }> {
  const result = await esbuild({
    entryPoints: [entry],
    bundle: true,
    write: false,
    metafile: true,
    format: "esm",
    platform: "neutral",
    conditions: ["react-native"],
    alias: { "react-native": REACT_NATIVE_STUB },
    external: ["react"],
    logLevel: "silent",
  });
  return { text: result.outputFiles.map((f) => f.text).join("\n"), modules: Object.keys(result.metafile.inputs) };
}

const markersIn = (text: string): string[] => SESSION_CORE_MARKERS.filter((m) => text.includes(m));
const coreModulesIn = (modules: readonly string[]): string[] => SESSION_CORE_MODULES.filter((m) => modules.some((p) => p.endsWith(`dist/${m}`)));

describe("module graphs (esbuild)", () => {
  it("the inert variant an excluded build gets holds none of the session-core modules", async () => {
    const resolution = resolveWith(withAppduct({}, { include: false }), RN_ENTRY);
    if (resolution.type !== "sourceFile") throw new Error("expected a source file");
    const { text, modules } = await esbuildGraph(resolution.filePath);
    expect(coreModulesIn(modules)).toEqual([]);
    expect(markersIn(text)).toEqual([]);
    expect(modules.some((p) => p.endsWith("react-native-stub/index.js"))).toBe(false);
  });

  it("the variants an included build gets hold them", async () => {
    for (const entry of [ENABLED_ENTRY, ENABLED_AUTO]) {
      const { text, modules } = await esbuildGraph(entry);
      expect(coreModulesIn(modules), entry).toEqual(SESSION_CORE_MODULES);
      expect(markersIn(text), entry).toEqual(SESSION_CORE_MARKERS);
    }
  });
});

// Real Metro (0.82, the version React Native 0.79 uses), loading the fixture's metro.config.cjs.
const requireFromHere = createRequire(import.meta.url);
type MetroModule = {
  loadConfig(argv: { config: string }, overrides: Record<string, unknown>): Promise<MetroConfigLike>;
  mergeConfig(...configs: MetroConfigLike[]): MetroConfigLike;
  runBuild(config: MetroConfigLike, options: Record<string, unknown>): Promise<{ code: string }>;
};
const Metro = requireFromHere("metro") as MetroModule;
const METRO_RUNTIME_DIR = path.dirname(createRequire(requireFromHere.resolve("metro")).resolve("metro-runtime/package.json"));

interface Probe {
  tools: string[];
  state: string;
  hooks: string;
  flag: boolean;
  os: string;
}
const INERT_PROBE: Probe = { tools: [], state: "idle", hooks: "function", flag: false, os: "android" };
const ACTIVE_PROBE: Probe = { tools: ["ping"], state: "idle", hooks: "function", flag: true, os: "android" };

describe("real Metro release builds of the fixture app", () => {
  let cacheDir: string;
  beforeAll(() => {
    cacheDir = mkdtempSync(path.join(tmpdir(), "appduct-metro-"));
  });
  afterAll(() => {
    rmSync(cacheDir, { recursive: true, force: true });
  });
  afterEach(() => {
    delete (globalThis as { metroFixtureRequests?: string[] }).metroFixtureRequests;
  });

  /** Loads the fixture's config, as Metro does; records the requests the app's resolver sees. */
  async function loadFixtureConfig(): Promise<{ config: MetroConfigLike; appResolverSaw: string[] }> {
    const appResolverSaw: string[] = [];
    (globalThis as { metroFixtureRequests?: string[] }).metroFixtureRequests = appResolverSaw;
    const config = await Metro.loadConfig(
      { config: path.join(FIXTURE_APP, "metro.config.cjs") },
      {
        // This workspace's layout, not an app's: node_modules sits above the fixture.
        // The SDK's own dependencies (@noble, the sealed transport's crypto) sit there too.
        watchFolders: [
          PACKAGE_DIR,
          path.resolve(PACKAGE_DIR, "..", "..", "node_modules", "@appduct"),
          path.resolve(PACKAGE_DIR, "..", "..", "node_modules", "@noble"),
          METRO_RUNTIME_DIR,
        ],
        cacheStores: [],
        maxWorkers: 1,
        resolver: { useWatchman: false },
        reporter: { update: () => undefined },
      },
    );
    // The file-map cache goes to a temporary folder; set after loading, since Metro 0.82's config
    // validation does not list this option although its file map reads it.
    return { config: Metro.mergeConfig(config, { fileMapCacheDirectory: cacheDir }), appResolverSaw };
  }

  /** Builds like `react-native bundle --dev false`; returns the code, module paths and probe. */
  async function releaseBuild(config: MetroConfigLike): Promise<{ code: string; modules: string[]; probe: Probe }> {
    let modules: string[] = [];
    const observed = Metro.mergeConfig(config, {
      serializer: {
        experimentalSerializerHook: (graph: { dependencies: Map<string, unknown> }) => {
          modules = [...graph.dependencies.keys()];
        },
      },
    });
    const { code } = await Metro.runBuild(observed, { entry: "index.js", dev: false, minify: true, platform: "android" });
    const sandbox: { appductProbe?: Probe; console: Console } = { console };
    vm.runInNewContext(code, sandbox);
    if (!sandbox.appductProbe) throw new Error("the bundle did not run the app");
    return { code, modules, probe: sandbox.appductProbe };
  }

  it("default include, in the React Native CLI's order (config loaded, then NODE_ENV=production): inert, no session core in the graph", async () => {
    setEnv({});
    const { config, appResolverSaw } = await loadFixtureConfig();
    vi.stubEnv("NODE_ENV", "production");
    const { code, modules, probe } = await releaseBuild(config);
    expect(modules).toContain(INERT_REACT_NATIVE_ENTRY);
    expect(coreModulesIn(modules)).toEqual([]);
    expect(modules.filter((p) => p.includes(`${path.sep}dist${path.sep}react-native${path.sep}`))).toEqual([INERT_REACT_NATIVE_ENTRY]);
    expect(markersIn(code)).toEqual([]);
    expect(probe).toEqual(INERT_PROBE);
    // The app's resolver answered everything but the two entries, which the helper answered.
    expect(modules).toContain(REACT_NATIVE_STUB);
    expect(appResolverSaw).toEqual(expect.arrayContaining(["react-native", "../react/inert.js"]));
    expect(appResolverSaw).not.toContain(RN_ENTRY);
    expect(appResolverSaw).not.toContain(RN_AUTO);
  }, 120_000);

  it("APPDUCT_ENABLED=1: the real entry, active with __DEV__ false; without the flag variants the same build is inert", async () => {
    setEnv({ APPDUCT_ENABLED: "1", NODE_ENV: "production" });
    const { config, appResolverSaw } = await loadFixtureConfig();
    const { code, modules, probe } = await releaseBuild(config);
    expect(coreModulesIn(modules)).toEqual(SESSION_CORE_MODULES);
    expect(modules).toEqual(expect.arrayContaining([ENABLED_ENTRY, ENABLED_AUTO, REACT_NATIVE_STUB]));
    expect(modules).not.toContain(INERT_REACT_NATIVE_ENTRY);
    expect(markersIn(code)).toEqual(SESSION_CORE_MARKERS);
    expect(probe).toEqual(ACTIVE_PROBE);
    expect(appResolverSaw).toEqual(expect.arrayContaining(["react-native", "react"]));

    // Control: the entries resolved straight to the real entry files (no flag): inert, since a
    // release build has __DEV__ false. So the flag is what keeps the included entry active.
    const helperResolver = config.resolver?.resolveRequest as MetroResolver;
    const realFiles = new Map([
      [RN_ENTRY, path.join(PACKAGE_DIR, "dist", "react-native", "index.js")],
      [RN_AUTO, path.join(PACKAGE_DIR, "dist", "react-native", "auto.js")],
    ]);
    const withoutFlag = Metro.mergeConfig(config, {
      resolver: {
        resolveRequest: (context, moduleName, platform) => {
          const real = realFiles.get(moduleName);
          return real ? { type: "sourceFile", filePath: real } : helperResolver(context, moduleName, platform);
        },
      },
    });
    const control = await releaseBuild(withoutFlag);
    expect(coreModulesIn(control.modules)).toEqual(SESSION_CORE_MODULES);
    expect(control.probe).toEqual(INERT_PROBE);
  }, 120_000);
});
