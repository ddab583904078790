// The one function of @babel/core (no bundled types) that test/hermes.test.ts uses.
declare module "@babel/core" {
  export function transformSync(
    code: string,
    options: { babelrc: boolean; configFile: boolean; sourceType: "script" | "module"; plugins: string[] },
  ): { code?: string | null } | null;
}
