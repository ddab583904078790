// The part of `react-native` (an optional peer dependency, not installed here) that the React
// Native entry uses. Only these shapes are read; apps compile against React Native's own types.

declare module "react-native" {
  export const Platform: {
    OS: string;
    Version: string | number;
    isPad?: boolean;
    constants?: { Manufacturer?: string; Model?: string } & Record<string, unknown>;
  };
  export const Linking: {
    addEventListener(type: "url", handler: (event: { url: string }) => void): { remove(): void };
    getInitialURL(): Promise<string | null>;
  };
  export const AppState: {
    addEventListener(type: "change", handler: (state: string) => void): { remove(): void };
  };
}
